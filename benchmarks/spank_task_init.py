"""Time added per task by gpuperf_spank.so's slurm_spank_task_init (target: <= 1 ms).

    python benchmarks/spank_task_init.py [--iterations 2000]

Builds the plugin from source (packaging/build-spank.sh) and a small C harness that dlopens it
with a stub SPANK API (job id, step, local task count and rank, the job environment), then calls
slurm_spank_task_init in a loop, timing each call with CLOCK_MONOTONIC. Each call does what it
does in a real task: reads the plan file, finds the rank's line, sched_setaffinity,
set_mempolicy, sets OMP_* and writes the applied record.

The plan file is the real one for the ``hgx-h100-2s`` fixture (8 GPUs, one line per rank for 1..8
tasks per node) with each line's CPUs and memory node rewritten to ones this machine has, and the
rank timed is the last line of the file (tasks=8 rank=7), the longest search. Cases: pinned
(the full path), off (--gpuperf=off: no file read), noplan (file missing).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HARNESS_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <slurm/spank.h>

/* A stub of the slurmstepd side of SPANK: just enough for slurm_spank_init and task_init. */
static uint32_t job_id, step_id = 0, ntasks;
static int rank;
static char env[64][4096];
static int nenv;
int errors;

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
	va_list ap;
	(void)sp;
	va_start(ap, item);
	switch (item) {
	case S_JOB_ID: *va_arg(ap, uint32_t *) = job_id; break;
	case S_JOB_STEPID: *va_arg(ap, uint32_t *) = step_id; break;
	case S_JOB_LOCAL_TASK_COUNT: *va_arg(ap, uint32_t *) = ntasks; break;
	case S_TASK_ID: *va_arg(ap, int *) = rank; break;
	default: va_end(ap); return ESPANK_BAD_ARG;
	}
	va_end(ap);
	return ESPANK_SUCCESS;
}
static int find(const char *var)
{
	size_t n = strlen(var);
	for (int i = 0; i < nenv; i++)
		if (strncmp(env[i], var, n) == 0 && env[i][n] == '=')
			return i;
	return -1;
}
spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len)
{
	(void)sp;
	int i = find(var);
	if (i < 0) return ESPANK_ENV_NOEXIST;
	snprintf(buf, len, "%s", env[i] + strlen(var) + 1);
	return ESPANK_SUCCESS;
}
spank_err_t spank_setenv(spank_t sp, const char *var, const char *val, int overwrite)
{
	(void)sp;
	int i = find(var);
	if (i >= 0 && !overwrite) return ESPANK_ENV_EXISTS;
	if (i < 0) i = nenv++;
	snprintf(env[i], sizeof(env[i]), "%s=%s", var, val);
	return ESPANK_SUCCESS;
}
spank_err_t spank_unsetenv(spank_t sp, const char *var)
{
	(void)sp;
	int i = find(var);
	if (i >= 0) {
		memmove(env[i], env[nenv - 1], sizeof(env[i]));
		nenv--;
	}
	return ESPANK_SUCCESS;
}
spank_err_t spank_job_control_setenv(spank_t sp, const char *n, const char *v, int o) { (void)sp; (void)n; (void)v; (void)o; return ESPANK_SUCCESS; }
spank_err_t spank_option_register(spank_t sp, struct spank_option *opt) { (void)sp; (void)opt; return ESPANK_SUCCESS; }
int spank_remote(spank_t sp) { (void)sp; return 1; }
static void logv(const char *fmt, va_list ap) { if (getenv("HARNESS_LOG")) { vfprintf(stderr, fmt, ap); fputc('\n', stderr); } }
void slurm_info(const char *fmt, ...) { va_list ap; va_start(ap, fmt); logv(fmt, ap); va_end(ap); }
void slurm_debug(const char *fmt, ...) { va_list ap; va_start(ap, fmt); logv(fmt, ap); va_end(ap); }
void slurm_error(const char *fmt, ...) { va_list ap; errors++; va_start(ap, fmt); logv(fmt, ap); va_end(ap); }

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

int main(int argc, char **argv)
{
	if (argc < 8) { fprintf(stderr, "usage: harness SO RUN_DIR JOB NTASKS RANK ITER off|on\n"); return 2; }
	void *so = dlopen(argv[1], RTLD_NOW);
	if (!so) { fprintf(stderr, "%s\n", dlerror()); return 1; }
	spank_f *init = (spank_f *)dlsym(so, "slurm_spank_init");
	spank_f *task_init = (spank_f *)dlsym(so, "slurm_spank_task_init");
	char arg[4200];
	snprintf(arg, sizeof(arg), "run_dir=%s", argv[2]);
	char *args[] = {arg};
	job_id = atoi(argv[3]); ntasks = atoi(argv[4]); rank = atoi(argv[5]);
	int n = atoi(argv[6]);
	if (strcmp(argv[7], "off") == 0) spank_setenv(NULL, "GPUPERF", "off", 1);
	init(NULL, 1, args);
	double *us = malloc(sizeof(double) * n);
	for (int i = 0; i < n; i++) {
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		task_init(NULL, 0, NULL);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		us[i] = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3;
	}
	qsort(us, n, sizeof(double), cmp);
	printf("%.1f %.1f %.1f %d\n", us[n / 2], us[(int)(n * 0.99)], us[n - 1], errors);
	return 0;
}
"""


def build(out: Path) -> tuple[Path, Path]:
    """The plugin (built from source) and the harness, in ``out``."""
    subprocess.run(["bash", str(REPO / "packaging" / "build-spank.sh"), "--out", str(out)], check=True,
                   capture_output=True, text=True)
    src = out / "harness.c"
    src.write_text(HARNESS_C)
    exe = out / "harness"
    subprocess.run(["gcc", "-O2", "-Wall", "-rdynamic", "-o", str(exe), str(src), "-ldl"], check=True)
    return out / "gpuperf_spank.so", exe


def plan_for_this_machine(job_id: int) -> str:
    """The hgx-h100-2s plan file (all shapes 1..8 tasks), CPUs and memory rewritten to ones here."""
    from gpuperf.affinity import plan as aff
    from gpuperf.topology import load_node

    topo = load_node(str(REPO / "tests" / "data" / "nodes" / "hgx-h100-2s"), health=False).topology
    alloc = aff.Allocation(gpus=tuple(range(8)), cpus=tuple(c for n in topo["numa_nodes"] for c in n["cpus"]),
                           cpus_source="cgroup")
    text = aff.plan_text(job_id, alloc, [aff.plan(topo, alloc, t) for t in aff.plan_counts(alloc)])
    here = aff.format_cpu_list(sorted(os.sched_getaffinity(0)))
    # rank lines only: the header's "cpus=" is not followed by "mems="
    text = re.sub(r" cpus=\S+ mems=\S+", f" cpus={here} mems=0", text)
    return text


def _fs(path: str) -> str:
    """The filesystem type of the mount holding ``path`` (tmpfs, ext4, ...)."""
    best, kind = "", "?"
    for line in Path("/proc/mounts").read_text().splitlines():
        f = line.split()
        if len(f) > 2 and path.startswith(f[1]) and len(f[1]) > len(best):
            best, kind = f[1], f[2]
    return kind


def main() -> int:
    """Build, run the cases, print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=2000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuperf-spank-bench-") as tmp:
        so, exe = build(Path(tmp))
        job = 4242
        plan = plan_for_this_machine(job)
        print(f"gpuperf_spank.so slurm_spank_task_init, {a.iterations} calls per case, "
              f"{platform.machine()}, {os.cpu_count()} CPUs, plan file {len(plan)} B / "
              f"{plan.count(chr(10))} lines, rank = last line (tasks=8 rank=7)")
        print(f"{'run_dir on':<16} {'case':<8} {'p50_us':>8} {'p99_us':>8} {'max_us':>8}  errors")
        # /run/gpuperf is tmpfs on a real node; the disk case shows what a run_dir on disk costs
        for where in (p for p in ("/dev/shm", tempfile.gettempdir()) if os.path.isdir(p)):
            with tempfile.TemporaryDirectory(prefix="gpuperf-spank-run-", dir=where) as run:
                jdir = Path(run) / "jobs" / str(job)
                (jdir / "applied").mkdir(parents=True)
                (jdir / "affinity.plan").write_text(plan)
                for case, mode, present in (("pinned", "on", True), ("off", "off", True), ("noplan", "on", False)):
                    if not present:
                        (jdir / "affinity.plan").unlink()
                    p = subprocess.run([str(exe), str(so), run, str(job), "8", "7", str(a.iterations), mode],
                                       capture_output=True, text=True)
                    if p.returncode != 0:
                        sys.exit(f"harness failed: {p.stderr.strip()}")
                    p50, p99, mx, errors = p.stdout.split()
                    kind = f"{where} ({_fs(where)})"
                    print(f"{kind:<16} {case:<8} {float(p50):>8.1f} {float(p99):>8.1f} {float(mx):>8.1f}  {errors}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
