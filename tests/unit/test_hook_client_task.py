"""gpuperf-hook as TaskProlog: the taskenv request on the user socket (env filter, CPUs, the NCCL it can
see), printing the daemon's ``out`` byte for byte, the step's record file, and exit 0 whatever happens.

Stand-in stream server and prefix: tests/unit/hookclient.py; the Prolog's tests: test_hook_client.py.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from gpuperf.prolog import fast
from hookclient import Server, base_env, built_client, config, fell_back, make_prefix, run_hook


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    return built_client(tmp_path_factory)


@pytest.fixture
def prefix(tmp_path, exe):
    return make_prefix(tmp_path / "opt", exe)


def reply(out: str, record_path: str | None = None, record: str | None = None) -> bytes:
    """A done taskenv reply, as the daemon encodes it (ASCII-only: every non-ASCII character \\u-escaped)."""
    body = {"v": 1, "ok": True, "done": True, "out": out, "record_path": record_path}
    if record is not None:
        body["record"] = record
    return json.dumps(body).encode()


@pytest.fixture
def user(tmp_path):
    servers = []

    def start(answer=reply("export A=b\n"), **kw):
        s = Server(tmp_path / "user", answer, stream=True, **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def task_env(tmp_path, **more):
    return base_env(config(tmp_path / "c.toml", tmp_path / "root-only", tmp_path / "user"), **more)


def test_taskprolog_prints_out_exactly_and_sends_the_task_filter(tmp_path, prefix, user):
    out = 'export A="x y"\nexport B=\'q\\\\z\'\texport C=é✓𝄞\n# \u0001 end'
    server = user(reply(out))
    env = task_env(tmp_path, SLURM_JOB_ID="9", NCCL_DEBUG="WARN", OMP_NUM_THREADS="4", TORCH_X="1", FI_P="efa",
                   MKL_Y="2", UCX_TLS="rc", GLOO_Z="g", NVSHMEM_W="w", PYTORCH_CUDA_ALLOC_CONF="a:b",
                   CUDA_HOME="/c", NCCL_VERSION="2.21.5", HOME="/home/u", LD_PRELOAD="/evil.so", NCCLX="no")
    p = run_hook(prefix, "taskprolog", env)
    assert p.returncode == 0 and fell_back(prefix, "taskprolog") is None, p.stderr
    assert p.stdout == out.encode()
    job = server.request()["job"]
    assert server.request()["op"] == "taskenv"
    wanted = {k: v for k, v in env.items() if k in fast.hook_env(env) or k.startswith(
        ("NCCL_", "CUDA_", "PYTORCH_", "TORCH_", "OMP_", "UCX_", "FI_", "NVSHMEM_", "GLOO_", "MKL_"))}
    assert job["env"] == wanted and "LD_PRELOAD" not in job["env"] and "NCCLX" not in job["env"]
    assert job["cpus"] == len(os.sched_getaffinity(0))
    assert job["nccl"] == {"dirs": {}, "wheels": []}


def test_taskprolog_decodes_escapes_and_surrogate_pairs(tmp_path, prefix, user):
    raw = b'{"v":1,"ok":true,"done":true,"out":"a\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\u2713\\ud834\\udd1e\\u0000"}'
    user(raw)
    p = run_hook(prefix, "taskprolog", task_env(tmp_path))
    assert p.stdout == 'a"b\\c/d\b\f\n\r\té✓𝄞\0'.encode()


def test_taskprolog_lists_the_nccl_it_can_see(tmp_path, prefix, user):
    server = user()
    ld1, ld2, conda, venv = tmp_path / "ld1", tmp_path / "ld2", tmp_path / "conda", tmp_path / "venv"
    for d, names in ((ld1, ["libnccl.so.2.21.5", "libnccl.so.2", "libother.so"]), (ld2, []),
                     (conda / "lib", ["libnccl.so.2.18.1"]),
                     (venv / "lib/python3.11/site-packages", ["nvidia_nccl_cu12-2.21.5.dist-info", "torch", "nvidia_nccl_cu12.txt"])):
        d.mkdir(parents=True)
        for n in names:
            (d / n).mkdir() if n.endswith(".dist-info") else (d / n).write_bytes(b"")
    env = task_env(tmp_path, LD_LIBRARY_PATH=f"{ld1}::/nonexistent:{ld2}:{ld1}", CONDA_PREFIX=f"{conda}/",
                   VIRTUAL_ENV=str(venv))
    run_hook(prefix, "taskprolog", env)
    nccl = server.request()["job"]["nccl"]
    assert {d: sorted(n) for d, n in nccl["dirs"].items()} == {
        str(ld1): ["libnccl.so.2", "libnccl.so.2.21.5"], str(ld2): [], f"{conda}/lib": ["libnccl.so.2.18.1"]}
    assert nccl["wheels"] == ["nvidia_nccl_cu12-2.21.5.dist-info"]
    assert server.request()["job"]["env"]["LD_LIBRARY_PATH"] == env["LD_LIBRARY_PATH"]


def test_taskprolog_creates_the_record_once_with_mode_0600(tmp_path, prefix, user):
    rec = tmp_path / "step-0.json"
    server = user(reply("export A=b\n", str(rec), '{"n": "é"}\n'))
    p = run_hook(prefix, "taskprolog", task_env(tmp_path))
    assert p.returncode == 0 and rec.read_text() == '{"n": "é"}\n'
    assert stat.S_IMODE(rec.stat().st_mode) == 0o600
    server.reply = reply("export A=c\n", str(rec), "second")
    p = run_hook(prefix, "taskprolog", task_env(tmp_path))
    assert p.returncode == 0 and p.stdout == b"export A=c\n" and rec.read_text() == '{"n": "é"}\n'
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "target.json")
    server.reply = reply("", str(link), "x")
    assert run_hook(prefix, "taskprolog", task_env(tmp_path)).returncode == 0
    assert not (tmp_path / "target.json").exists()


@pytest.mark.parametrize("answer,kind", [
    (b'{"v":1,"ok":true,"done":false,"why":"no plan cached"}', "declined: no plan cached"),
    (b'{"v":1,"ok":false,"error":"rate limited"}', "declined: daemon refused: rate limited"),
    (b'{"v":1,"ok":true,"done":true,"out":"\\ud834"}', "down: reply is not JSON"),
    (None, "down: "),
])
def test_taskprolog_falls_back_to_python_and_prints_what_it_prints(tmp_path, prefix, user, answer, kind):
    user(answer)
    p = run_hook(prefix, "taskprolog", task_env(tmp_path))
    assert p.returncode == 0 and p.stdout == b"export FROM=python\n"
    assert fell_back(prefix, "taskprolog").startswith(kind)


def test_a_reply_over_1_mib_is_down(tmp_path, prefix, user):
    user(reply("x" * (1024 * 1024)))
    p = run_hook(prefix, "taskprolog", task_env(tmp_path))
    assert p.returncode == 0 and fell_back(prefix, "taskprolog").endswith("reply over 1 MiB")


def test_taskprolog_exits_0_when_nothing_works(tmp_path, exe):
    bare = make_prefix(tmp_path / "bare", exe, stand_ins=False)
    p = run_hook(bare, "taskprolog", task_env(tmp_path))  # no daemon, no Python hook
    assert p.returncode == 0 and p.stdout == b"" and b"hook fallback failed" in p.stderr
    for mode in ("prolog", "epilog"):  # gpuperf's own failure never drains a node
        assert run_hook(bare, mode, task_env(tmp_path)).returncode == 0
    bad = tmp_path / "bad.toml"
    bad.write_text('[daemon]\nuser_socket_dir = """x"""\n')
    assert run_hook(bare, "taskprolog", base_env(bad)).returncode == 0


def test_a_fallback_that_is_the_client_itself_does_not_loop(tmp_path, exe):
    loop = make_prefix(tmp_path / "loop", exe, stand_ins=False)
    (loop / "venv/bin/gpuperf-taskprolog").symlink_to(loop / "bin/gpuperf-hook")
    p = run_hook(loop, "taskprolog", task_env(tmp_path), timeout=5)
    assert p.returncode == 0 and b"gpuperf-hook itself" in p.stderr


def test_another_name_is_a_usage_error(tmp_path, exe):
    p = run_hook(make_prefix(tmp_path / "u", exe), "hook", {})
    assert p.returncode == 2 and b"usage" in p.stderr
