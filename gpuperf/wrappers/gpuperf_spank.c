/*
 * gpuperf_spank.so: pin each task of a job next to its GPU(s), as the prolog planned it.
 *
 * plugstack.conf:  optional /opt/gpuperf/lib/gpuperf_spank.so run_dir=/run/gpuperf
 *
 * - Option --gpuperf=off|on (sbatch, salloc, srun). "off" switches off pinning and, by putting
 *   GPUPERF=off into the job's environment, gpuperf's environment injection in the TaskProlog.
 * - slurm_spank_task_init (in the task, as the job user, just before exec): reads
 *   <run_dir>/jobs/<job>/affinity.plan (format: gpuperf/affinity.py), takes the line for this
 *   step's local task count and the task's local id, applies sched_setaffinity and
 *   set_mempolicy, sets OMP_NUM_THREADS/OMP_PLACES where the user has not, and writes what it
 *   applied to <run_dir>/jobs/<job>/applied/<step>.<rank>.
 * - Any failure is logged and the task runs as Slurm placed it: this plugin never fails a task.
 *
 * No Python and no libnuma in the task's path: one small file read and two system calls.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(gpuperf, 1);

#define GP_MPOL_PREFERRED 1 /* linux/mempolicy.h values, without needing its header */
#define GP_MPOL_BIND 2
#define GP_MAX_NODES 1024
#define GP_MAX_CPUS 65536
#define GP_LINE 16384
#define GP_PATH 4096
#define GP_HEADER "# gpuperf affinity plan v1"

static char run_dir[GP_PATH / 2] = "/run/gpuperf";
static int opt_state = -1; /* --gpuperf: -1 not given, 0 on, 1 off */

static int opt_cb(int val, const char *optarg, int remote)
{
	(void)val;
	(void)remote;
	if (optarg == NULL || strcmp(optarg, "on") == 0) {
		opt_state = 0;
		return 0;
	}
	if (strcmp(optarg, "off") == 0) {
		opt_state = 1;
		return 0;
	}
	slurm_error("gpuperf: --gpuperf=%s: expected off or on", optarg);
	return -1;
}

static struct spank_option gpuperf_option = {
	"gpuperf", "off|on",
	"gpuperf: 'off' disables CPU/memory pinning and environment injection for this job",
	1, 0, opt_cb};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	for (int i = 0; i < ac; i++) {
		if (strncmp(av[i], "run_dir=", 8) == 0 && strlen(av[i] + 8) > 0 &&
		    strlen(av[i] + 8) < sizeof(run_dir))
			strcpy(run_dir, av[i] + 8);
		else
			slurm_error("gpuperf: plugstack.conf: unknown argument '%s' (known: run_dir=DIR)", av[i]);
	}
	if (spank_option_register(sp, &gpuperf_option) != ESPANK_SUCCESS)
		slurm_error("gpuperf: cannot register option --gpuperf");
	return 0;
}

/*
 * Tell the prolog (sbatch/srun: job control environment, seen there as SPANK_GPUPERF) and the
 * TaskProlog and the job (slurmstepd: GPUPERF) whether gpuperf is off. An explicit option
 * overrides a GPUPERF inherited from the batch step, so `srun --gpuperf=on` inside an
 * `sbatch --gpuperf=off` job is on.
 */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (opt_state < 0)
		return 0;
	const char *v = opt_state ? "off" : "on";
	if (spank_remote(sp) == 1)
		spank_setenv(sp, "GPUPERF", v, 1);
	else
		spank_job_control_setenv(sp, "GPUPERF", v, 1);
	return 0;
}

/* --- small parsers ------------------------------------------------------------------------ */

/* "0-3,8" -> set bits; returns the count of ids, -1 on a malformed list or an id >= max. */
static int parse_list(const char *s, size_t len, unsigned long *bits, long max)
{
	char buf[GP_LINE];
	int n = 0;
	if (len == 4 && strncmp(s, "none", 4) == 0)
		return 0;
	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	char *p = buf;
	while (*p) {
		char *end;
		errno = 0;
		long a = strtol(p, &end, 10), b;
		if (end == p || errno || a < 0)
			return -1;
		p = end;
		b = a;
		if (*p == '-') {
			p++;
			b = strtol(p, &end, 10);
			if (end == p || errno || b < a)
				return -1;
			p = end;
		}
		if (b >= max)
			return -1;
		for (long i = a; i <= b; i++) {
			bits[i / (8 * sizeof(long))] |= 1UL << (i % (8 * sizeof(long)));
			n++;
		}
		if (*p == ',')
			p++;
		else if (*p)
			return -1;
	}
	return n;
}

/* The value of " key=" in a plan line (pointer and length), or NULL. */
static const char *field(const char *line, const char *key, size_t *len)
{
	size_t k = strlen(key);
	const char *p = line;
	while (p && *p) {
		if (strncmp(p, key, k) == 0 && p[k] == '=') {
			const char *v = p + k + 1;
			*len = strcspn(v, " \t\n");
			return v;
		}
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	return NULL;
}

static int field_int(const char *line, const char *key, long *out)
{
	size_t len;
	const char *v = field(line, key, &len);
	char *end;
	if (!v || len == 0)
		return -1;
	*out = strtol(v, &end, 10);
	return (size_t)(end - v) == len ? 0 : -1;
}

static void copy_field(const char *line, const char *key, char *dst, size_t size)
{
	size_t len = 0;
	const char *v = field(line, key, &len);
	if (!v || len >= size)
		len = 0;
	memcpy(dst, v ? v : "", len);
	dst[len] = '\0';
}

/* --- the applied record ---------------------------------------------------------------------- */

struct task_id {
	uint32_t job, step, ntasks;
	int rank;
};

static void step_name(uint32_t step, char *buf, size_t size)
{
	if (step == 0xfffffffb) /* SLURM_BATCH_SCRIPT */
		snprintf(buf, size, "batch");
	else if (step == 0xfffffffc) /* SLURM_EXTERN_CONT */
		snprintf(buf, size, "extern");
	else if (step == 0xfffffffd) /* SLURM_INTERACTIVE_STEP */
		snprintf(buf, size, "interactive");
	else
		snprintf(buf, size, "%u", step);
}

static double elapsed_us(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) * 1e6 + (t1.tv_nsec - t0->tv_nsec) / 1e3;
}

/* The CPUs this task may run on now, as a cpulist ("0-3,8"). */
static void current_cpus(char *out, size_t size)
{
	unsigned long mask[GP_MAX_CPUS / (8 * sizeof(long))];
	const int bits = 8 * sizeof(long);
	size_t used = 0;
	out[0] = '\0';
	/* the raw syscall returns how many bytes the kernel's mask has: only those are scanned */
	long got = syscall(SYS_sched_getaffinity, 0, sizeof(mask), mask);
	if (got <= 0)
		return;
	int ncpu = (int)(got * 8), i = 0;
	while (i < ncpu && used + 24 < size) {
		if (mask[i / bits] == 0 && i % bits == 0) {
			i += bits;
			continue;
		}
		if (!(mask[i / bits] >> (i % bits) & 1UL)) {
			i++;
			continue;
		}
		int j = i;
		while (j + 1 < ncpu && (mask[(j + 1) / bits] >> ((j + 1) % bits) & 1UL))
			j++;
		used += snprintf(out + used, size - used, used ? ",%d" : "%d", i);
		if (j > i)
			used += snprintf(out + used, size - used, "-%d", j);
		i = j + 1;
	}
}

/* Leave <run_dir>/jobs/<job>/applied/<step>.<rank>: one line the report reads. Best effort. */
static void write_applied(const struct task_id *t, const char *status, const char *plan_line,
			  const char *mem, const struct timespec *t0)
{
	char path[GP_PATH], step[32], cpus[GP_LINE / 2], gpus[256] = "", numa[256] = "", policy[16] = "";
	char line[GP_LINE];
	step_name(t->step, step, sizeof(step));
	snprintf(path, sizeof(path), "%s/jobs/%u/applied/%s.%d", run_dir, t->job, step, t->rank);
	current_cpus(cpus, sizeof(cpus));
	if (plan_line) {
		copy_field(plan_line, "gpus", gpus, sizeof(gpus));
		copy_field(plan_line, "numa", numa, sizeof(numa));
		copy_field(plan_line, "policy", policy, sizeof(policy));
	}
	int n = snprintf(line, sizeof(line),
			 "job=%u step=%s rank=%d tasks=%u pid=%d status=%s gpus=%s numa=%s cpus=%s policy=%s mem=%s us=%.1f\n",
			 t->job, step, t->rank, t->ntasks, (int)getpid(), status, gpus[0] ? gpus : "none",
			 numa[0] ? numa : "none", cpus[0] ? cpus : "none", policy[0] ? policy : "none", mem,
			 elapsed_us(t0));
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return; /* no applied/ dir (prolog not run): the plan's absence was logged already */
	if (n > 0 && write(fd, line, (size_t)n) < 0)
		slurm_debug("gpuperf: cannot write %s: %s", path, strerror(errno));
	close(fd);
}

/* --- the task ------------------------------------------------------------------------------ */

static int is_off(spank_t sp)
{
	char v[16];
	if (opt_state >= 0)
		return opt_state;
	return spank_getenv(sp, "GPUPERF", v, sizeof(v)) == ESPANK_SUCCESS && strcmp(v, "off") == 0;
}

/* Find this task's line; 1 found, 0 noop, -1 no plan, -2 corrupt, -3 no line for this shape. */
static int find_line(const struct task_id *t, char *line, size_t size, char *why, size_t whysize)
{
	char path[GP_PATH];
	snprintf(path, sizeof(path), "%s/jobs/%u/affinity.plan", run_dir, t->job);
	FILE *f = fopen(path, "re");
	if (!f) {
		snprintf(why, whysize, "%s: %s", path, strerror(errno));
		return -1;
	}
	int rc = -3, lineno = 0;
	snprintf(why, whysize, "%s has no line for tasks=%u rank=%d", path, t->ntasks, t->rank);
	while (fgets(line, (int)size, f)) {
		lineno++;
		size_t len = strlen(line);
		if (len == size - 1 && line[len - 1] != '\n') {
			snprintf(why, whysize, "%s line %d: longer than %zu bytes", path, lineno, size);
			rc = -2;
			break;
		}
		if (lineno == 1) {
			if (strncmp(line, GP_HEADER, strlen(GP_HEADER)) != 0) {
				snprintf(why, whysize, "%s: not a gpuperf affinity plan (bad first line)", path);
				rc = -2;
				break;
			}
			continue;
		}
		if (strncmp(line, "noop=", 5) == 0) {
			snprintf(why, whysize, "%.*s", (int)strcspn(line + 5, "\n"), line + 5);
			rc = 0;
			break;
		}
		if (strncmp(line, "tasks=", 6) != 0)
			continue;
		long tasks, rank;
		if (field_int(line, "tasks", &tasks) || field_int(line, "rank", &rank)) {
			snprintf(why, whysize, "%s line %d: no tasks=/rank= numbers", path, lineno);
			rc = -2;
			break;
		}
		if (tasks == (long)t->ntasks && rank == t->rank) {
			rc = 1;
			break;
		}
	}
	if (lineno == 0) {
		snprintf(why, whysize, "%s: empty", path);
		rc = -2;
	}
	fclose(f);
	return rc;
}

/* "<threads> <places>" marker -> its two parts (places "" when absent); 0 when the variable is unset. */
static int marker(spank_t sp, const char *name, char *buf, int size, char **places)
{
	if (spank_getenv(sp, name, buf, size) != ESPANK_SUCCESS)
		return 0;
	char *sep = strchr(buf, ' ');
	*places = sep ? sep + 1 : buf + strlen(buf);
	if (sep)
		*sep = '\0';
	return 1;
}

/*
 * OMP_NUM_THREADS/OMP_PLACES for this rank, unless the user set them. GPUPERF_AFFINITY_OMP
 * ("<threads> <places>", written only by gpuperf's affinity) and GPUPERF_OMP (shared with the
 * env part's TaskProlog, which may have exported OMP_NUM_THREADS) say which values are gpuperf's,
 * so values inherited from the batch step (srun copies its environment) are replaced, not
 * mistaken for the user's.
 */
static void set_omp(spank_t sp, const char *line)
{
	char threads[16], places[GP_LINE / 4], cur_t[16], cur_p[GP_LINE / 4];
	char aff[GP_LINE / 2], env[GP_LINE / 2], want[GP_LINE / 2], *aff_p = NULL, *env_p = NULL;
	copy_field(line, "omp_threads", threads, sizeof(threads));
	copy_field(line, "omp_places", places, sizeof(places));
	if (!threads[0] || strcmp(threads, "0") == 0 || !places[0] || strcmp(places, "none") == 0)
		return;
	int has_t = spank_getenv(sp, "OMP_NUM_THREADS", cur_t, sizeof(cur_t)) == ESPANK_SUCCESS;
	int has_p = spank_getenv(sp, "OMP_PLACES", cur_p, sizeof(cur_p)) == ESPANK_SUCCESS;
	int has_aff = marker(sp, "GPUPERF_AFFINITY_OMP", aff, sizeof(aff), &aff_p);
	int has_env = marker(sp, "GPUPERF_OMP", env, sizeof(env), &env_p);
	int ours_t = !has_t || (has_aff && strcmp(aff, cur_t) == 0) || (has_env && strcmp(env, cur_t) == 0);
	int ours_p = !has_p || (has_aff && strcmp(aff_p, cur_p) == 0);
	if (!ours_t || !ours_p)
		return; /* the user chose their threading: leave both alone, consistent with each other */
	snprintf(want, sizeof(want), "%s %s", threads, places);
	spank_setenv(sp, "OMP_NUM_THREADS", threads, 1);
	spank_setenv(sp, "OMP_PLACES", places, 1);
	spank_setenv(sp, "GPUPERF_AFFINITY_OMP", want, 1);
	spank_setenv(sp, "GPUPERF_OMP", want, 1);
}

/* A task left unpinned drops the OpenMP values our batch-step pinning left in its environment. */
static void clear_omp(spank_t sp)
{
	char aff[GP_LINE / 2], cur[GP_LINE / 4], *aff_p = NULL;
	if (!marker(sp, "GPUPERF_AFFINITY_OMP", aff, sizeof(aff), &aff_p))
		return;
	if (spank_getenv(sp, "OMP_PLACES", cur, sizeof(cur)) == ESPANK_SUCCESS && strcmp(cur, aff_p) == 0)
		spank_unsetenv(sp, "OMP_PLACES");
	if (spank_getenv(sp, "OMP_NUM_THREADS", cur, sizeof(cur)) == ESPANK_SUCCESS && strcmp(cur, aff) == 0)
		spank_unsetenv(sp, "OMP_NUM_THREADS");
	spank_unsetenv(sp, "GPUPERF_AFFINITY_OMP");
}

/* Apply one plan line. Returns 0 when the CPUs were set, -1 (task left unpinned) otherwise. */
static int apply_line(spank_t sp, const struct task_id *t, const char *line, char *mem, size_t memsize)
{
	size_t len;
	const char *cpus = field(line, "cpus", &len);
	size_t setsize = CPU_ALLOC_SIZE(GP_MAX_CPUS);
	unsigned long nodes[GP_MAX_NODES / (8 * sizeof(long))];
	char policy[16] = "";
	snprintf(mem, memsize, "none");
	if (!cpus) {
		slurm_error("gpuperf: job %u task %d: corrupt affinity plan line (no cpus=): not pinned", t->job, t->rank);
		return -1;
	}
	cpu_set_t *set = CPU_ALLOC(GP_MAX_CPUS);
	if (!set)
		return -1;
	CPU_ZERO_S(setsize, set);
	int ncpus = parse_list(cpus, len, (unsigned long *)set, GP_MAX_CPUS);
	const char *mems = field(line, "mems", &len);
	memset(nodes, 0, sizeof(nodes));
	int nnodes = mems ? parse_list(mems, len, nodes, GP_MAX_NODES) : -1;
	copy_field(line, "policy", policy, sizeof(policy));
	if (ncpus < 0 || nnodes < 0 || !policy[0]) {
		slurm_error("gpuperf: job %u task %d: corrupt affinity plan line (cpus/mems/policy): not pinned",
			    t->job, t->rank);
		CPU_FREE(set);
		return -1;
	}
	if (ncpus == 0) { /* the plan leaves this rank as Slurm placed it (warned in the prolog) */
		CPU_FREE(set);
		return -1;
	}
	if (sched_setaffinity(0, setsize, set) != 0) {
		slurm_error("gpuperf: job %u task %d: sched_setaffinity(%.*s): %s: not pinned", t->job, t->rank,
			    (int)strcspn(cpus, " "), cpus, strerror(errno));
		CPU_FREE(set);
		return -1;
	}
	CPU_FREE(set);
	int mode = strcmp(policy, "bind") == 0 ? GP_MPOL_BIND : strcmp(policy, "prefer") == 0 ? GP_MPOL_PREFERRED : -1;
	if (mode > 0 && nnodes > 0) {
		/* maxnode counts one past the last bit the kernel reads */
		if (syscall(SYS_set_mempolicy, mode, nodes, (unsigned long)GP_MAX_NODES + 1) == 0) {
			snprintf(mem, memsize, "ok");
		} else {
			int err = errno;
			snprintf(mem, memsize, "failed:%s", strerrorname_np(err) ? strerrorname_np(err) : "?");
			slurm_error("gpuperf: job %u task %d: set_mempolicy(%s, %.*s): %s: CPUs pinned, memory not",
				    t->job, t->rank, policy, (int)strcspn(mems, " "), mems, strerror(err));
		}
	}
	set_omp(sp, line);
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	struct timespec t0;
	struct task_id t = {0, 0, 0, -1};
	char line[GP_LINE], why[GP_PATH + 256], mem[64] = "none";
	(void)ac;
	(void)av;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (spank_get_item(sp, S_JOB_ID, &t.job) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &t.step) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &t.ntasks) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_TASK_ID, &t.rank) != ESPANK_SUCCESS) {
		slurm_error("gpuperf: cannot read job/task ids from slurmstepd: task not pinned");
		return 0;
	}
	if (t.step == 0xfffffffc) /* the extern step holds no user task worth pinning */
		return 0;
	if (is_off(sp)) {
		clear_omp(sp);
		write_applied(&t, "off", NULL, mem, &t0);
		return 0;
	}
	int found = find_line(&t, line, sizeof(line), why, sizeof(why));
	if (found == 1 && apply_line(sp, &t, line, mem, sizeof(mem)) == 0) {
		write_applied(&t, "ok", line, mem, &t0);
		return 0;
	}
	clear_omp(sp);
	switch (found) {
	case 1:
		write_applied(&t, "unpinned", line, mem, &t0);
		break;
	case 0:
		write_applied(&t, "noop", NULL, mem, &t0);
		break;
	case -1:
		slurm_info("gpuperf: job %u task %d: no affinity plan (%s): not pinned", t.job, t.rank, why);
		write_applied(&t, "noplan", NULL, mem, &t0);
		break;
	case -2:
		slurm_error("gpuperf: job %u task %d: corrupt affinity plan (%s): not pinned", t.job, t.rank, why);
		write_applied(&t, "corrupt", NULL, mem, &t0);
		break;
	default:
		slurm_info("gpuperf: job %u task %d: %s: not pinned", t.job, t.rank, why);
		write_applied(&t, "noshape", NULL, mem, &t0);
	}
	return 0;
}
