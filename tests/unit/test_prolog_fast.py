"""The prolog's fast path: the daemon runs the prolog's steps over the hook socket (SEQPACKET), or
declines and the prolog runs them itself. Real daemon, real sockets, a recorded node for topology;
the sampler is test_daemon's scripted one.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_daemon import Running, ScriptSampler, _frames, base, is_error_reply, make_cfg, wait_for  # noqa: E402,F401

from gpuperf.files import config, tomlw  # noqa: E402
from gpuperf.daemon import hooksock  # noqa: E402
from gpuperf.hookbase.hook import HookState, run_hook  # noqa: E402
from gpuperf.prolog import STEPS, fast, indaemon  # noqa: E402

NODE = Path(__file__).resolve().parents[1] / "data" / "nodes" / "hgx-h100-2s"
HEALTHY = [{"code": "gpu_missing", "status": "ok", "detail": "8 GPUs", "ms": 1.0},
           {"code": "pcie_link", "status": "warn", "detail": "GPU 3: gen4 x16 (max gen5)", "ms": 1.0}]


def write_config(base: Path, **daemon) -> Path:
    """A config file with make_cfg's settings, a recorded node and no Slurm tools: what both sides load."""
    cfg = make_cfg(base, **daemon)
    cfg.data["general"].update(node_root=str(NODE), slurm_bin_dir=str(base / "no-slurm"))
    lines = []
    for section, values in cfg.data.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {tomlw.value(v)}" for k, v in values.items() if not (section == "env" and k == "rules")]
    path = base / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def job_env(job_id: int, uid: int = 0) -> dict[str, str]:
    return {"SLURM_JOB_ID": str(job_id), "SLURM_JOB_UID": str(uid), "SLURM_JOB_USER": "root",
            "SLURM_JOB_GPUS": "2,3", "SLURMD_NODENAME": "n1", "SLURM_JOB_CPUS_PER_NODE": "16",
            "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_PARTITION": "gpu", "HOME": "/root", "LD_PRELOAD": "x.so"}


@pytest.fixture
def conf(base, monkeypatch):
    path = write_config(base)
    monkeypatch.setenv("GPUPERF_CONFIG", str(path))
    monkeypatch.delenv("GPUPERF_SYSFS_ROOT", raising=False)
    return config.load(str(path))


def _job_files(run_dir: str, job_id: int) -> dict:
    jdir = Path(run_dir) / "jobs" / str(job_id)
    env = json.loads((jdir / "env.json").read_text())
    for k in ("job_id", "computed"):
        env.pop(k)
    rec = json.loads((jdir / "prolog.json").read_text())
    aff = dict(rec["data"]["affinity"])
    aff.pop("plan_file")
    return {"env": env, "plan": (jdir / "affinity.plan").read_text().replace(str(job_id), "JOB"),
            "affinity_json": json.loads((jdir / "affinity.json").read_text()), "steps": sorted(rec["steps"]),
            "health": [(r["code"], r["status"]) for r in rec["data"]["health"]["results"]],
            "register_ok": rec["data"]["register"]["ok"], "env_rec": {k: v for k, v in rec["data"]["env"].items() if k != "ms"},
            "affinity_rec": aff, "via": rec["data"].get("via"), "context": rec["context"]}


def test_fast_path_writes_what_the_full_prolog_writes(base, conf):
    with Running(conf, ScriptSampler(n=8), health_fn=lambda: HEALTHY) as r:
        out = fast.try_daemon(job_env(101))
        assert (out.exit_code, out.why, out.daemon_down) == (0, None, False)
        state = HookState(job_env(102))
        assert run_hook("prolog", STEPS, env=job_env(102), state=state) == 0
        assert set(r.d.running) == {101, 102}
        assert r.d.running[101].reg["gpus"] == r.d.running[102].reg["gpus"] == [2, 3]
        assert r.d.running[101].reg["cpus"] == 16
    fast_files, full_files = _job_files(conf.general.run_dir, 101), _job_files(conf.general.run_dir, 102)
    assert fast_files.pop("via") == "daemon" and full_files.pop("via") is None
    ctx_fast, ctx_full = fast_files.pop("context"), full_files.pop("context")
    assert ctx_fast["job_id"] == 101 and ctx_full["job_id"] == 102
    assert {**ctx_fast, "job_id": 0} == {**ctx_full, "job_id": 0}
    assert fast_files == full_files
    # the plan really planned: GPUs 2 and 3 of the recorded 2-socket node
    assert fast_files["affinity_rec"]["gpus"] == [2, 3] and "rank=1" in fast_files["plan"]
    assert fast_files["health"] == [("gpu_missing", "ok"), ("pcie_link", "warn")]


def test_only_slurm_and_gpuperf_variables_are_forwarded():
    env = fast.hook_env({**job_env(5), "SPANK_GPUPERF": "off", "GPUPERF": "off", "CUDA_VISIBLE_DEVICES": "0"})
    assert "HOME" not in env and "LD_PRELOAD" not in env
    assert env["SPANK_GPUPERF"] == "off" and env["CUDA_VISIBLE_DEVICES"] == "0" and env["SLURM_JOB_ID"] == "5"


def test_daemon_declines_a_failing_check_and_registers_nothing(base, conf):
    failing = HEALTHY + [{"code": "xid", "status": "fail", "detail": "GPU 2: Xid 79", "ms": 1.0}]
    with Running(conf, ScriptSampler(n=8), health_fn=lambda: failing) as r:
        out = fast.try_daemon(job_env(201))
        assert out.exit_code is None and "fails" in out.why and not out.daemon_down
        assert r.d.running == {}
    assert not (Path(conf.general.run_dir) / "jobs" / "201").exists()


def test_daemon_declines_when_the_hook_loaded_other_settings(base, conf):
    with Running(conf, ScriptSampler(n=8), health_fn=lambda: HEALTHY) as r:
        path = Path(os.environ["GPUPERF_CONFIG"])
        path.write_text(path.read_text().replace("[env]", "[env]\nnotice = true", 1).replace("notice = false\n", "", 1))
        assert config.load(str(path)).env.notice is True
        out = fast.try_daemon(job_env(301))
        assert out.exit_code is None and "restart gpuperf-daemon" in out.why
        assert r.d.running == {}


def test_gpuperf_daemon_hands_the_daemon_the_prologs_steps_and_one_without_them_declines(base, conf):
    from gpuperf.commands import daemon as daemon_cmd
    from gpuperf.files import log

    assert daemon_cmd.prolog_steps(log.get("daemon")) is indaemon.run   # what ``gpuperf daemon`` composes
    with Running(conf, ScriptSampler(n=8), health_fn=lambda: HEALTHY, prolog=None) as r:
        out = fast.try_daemon(job_env(251))
        assert out.exit_code is None and "without the prolog's steps" in out.why and not out.daemon_down
        assert r.d.running == {}
    assert not (Path(conf.general.run_dir) / "jobs" / "251").exists()


def test_decline_reasons():
    cfg = config.defaults()
    sent = {"source": cfg.source, "digest": config.digest(cfg)}
    fresh = {"t": 1000.0, "results": HEALTHY}
    assert indaemon.decline_reason(cfg, sent, fresh, 1001.0) is None
    assert "no health" in indaemon.decline_reason(cfg, sent, None, 1001.0)
    assert "could not run" in indaemon.decline_reason(cfg, sent, {"t": 1000.0, "error": "NVML: boom"}, 1001.0)
    stale = 1000.0 + cfg.checks.daemon_max_age_s + 1
    assert "old" in indaemon.decline_reason(cfg, sent, fresh, stale)
    assert "differ" in indaemon.decline_reason(cfg, {**sent, "digest": "0-0"}, fresh, 1001.0)
    broken = config.defaults()
    broken.degraded = True
    assert "broken" in indaemon.decline_reason(broken, {"digest": config.digest(broken)}, fresh, 1001.0)


def test_dead_daemon_costs_one_attempt_then_a_pending_marker(base, conf):
    # a daemon killed with -9 leaves its socket files: nobody listens behind them
    sock_dir = Path(conf.daemon.socket_dir)
    sock_dir.mkdir(parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(hooksock.path_of(str(sock_dir)))
    s.close()
    out = fast.try_daemon(job_env(401))
    assert out.exit_code is None and out.daemon_down and "refused" in out.why.lower()
    state = HookState(job_env(401))
    state.daemon_down = out.why
    assert run_hook("prolog", STEPS, env=job_env(401), state=state) == 0
    reg = state.data["register"]
    # the full path did not ask the dead daemon again: the marker carries the fast path's error
    assert reg["ok"] is False and reg["error"] == out.why and Path(reg["pending"]).exists()
    assert state.data["health"]["source"] == "local"
    assert (Path(conf.general.run_dir) / "jobs" / "401" / "affinity.plan").exists()


def _hook_request(path: str, frame: bytes, timeout: float = 3.0) -> bytes:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.send(frame)
        return s.recv(1 << 20)
    finally:
        s.close()


def test_hook_socket_fuzz_gets_errors_and_changes_nothing(base, conf):
    with Running(conf, ScriptSampler(n=8), health_fn=lambda: HEALTHY) as r:
        path = hooksock.path_of(conf.daemon.socket_dir)
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        assert r.call("register", {"job_id": 7, "uid": 0, "gpus": [0]})["ok"]
        before = [(j["job_id"], j["state"], j["gpus"]) for j in r.d.store.jobs()]
        errors = 0
        for frame in _frames():
            if not frame:
                continue  # a zero-length SEQPACKET message reads as a closed connection: no reply
            errors += is_error_reply(frame, json.loads(_hook_request(path, frame)))
        assert errors > 290
        bad_prolog = [{"env": "SLURM_JOB_ID=1", "config": {}}, {"env": {"SLURM_JOB_ID": 1}, "config": {}},
                      {"env": {}, "config": []}, {"env": {f"V{i}": "x" for i in range(300)}, "config": {}}]
        for job in bad_prolog:
            reply = json.loads(_hook_request(path, json.dumps({"v": 1, "op": "prolog", "job": job}).encode()))
            assert reply["ok"] is False and "job." in reply["error"]
        # longer than the protocol's limit (but within the socket's): an error, not a cut message
        reply = json.loads(_hook_request(path, json.dumps({"v": 1, "op": "ping", "pad": "x" * 70000}).encode()))
        assert reply["ok"] is False and "limit" in reply["error"]
        # a connection that never sends is closed at its deadline; others are served meanwhile
        idle = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        idle.settimeout(hooksock.CONN_DEADLINE_S + 3)
        idle.connect(path)
        assert json.loads(_hook_request(path, b'{"v":1,"op":"ping"}'))["ok"]
        assert idle.recv(100) == b""
        idle.close()
        assert [(j["job_id"], j["state"], j["gpus"]) for j in r.d.store.jobs()] == before
        assert set(r.d.running) == {7}
        # the hook channel has the control socket's rules: a caller that is not root or SlurmUser gets nothing
        assert r.d.handle(b'{"v":1,"op":"ping"}', 65534, "hook")["ok"] is False
        assert r.d.handle(b'{"v":1,"op":"ping"}', 0, "hook")["ok"] is True
