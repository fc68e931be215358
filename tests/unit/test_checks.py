"""Health checks on node fixtures derived (in tmp dirs) from tests/data/nodes: each check trips and passes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from gpuperf import checks
from gpuperf.files import config
from gpuperf.checks import base, history, policy, runner, xid
from gpuperf.hookbase.hook import HookState
from gpuperf.hookbase.jobctx import JobContext
from gpuperf.prolog import health
from gpuperf.topology import load_node

NODES = Path(__file__).resolve().parents[1] / "data" / "nodes"
HGX, L40S = "hgx-h100-2s", "pcie-l40s-2s"
ALL8 = list(range(8))


def derive(tmp_path: Path, base_node: str, gpus: Callable[[dict[str, Any]], None] | None = None,
           files: dict[str, str | bytes] | None = None) -> Path:
    """A copy of a base fixture with its gpus.json edited by ``gpus`` and sysfs files replaced."""
    dest = tmp_path / base_node
    shutil.copytree(NODES / base_node, dest, symlinks=True)
    if gpus is not None:
        snap = json.loads((dest / "gpus.json").read_text())
        gpus(snap)
        (dest / "gpus.json").write_text(json.dumps(snap))
    for rel, content in (files or {}).items():
        p = dest / rel
        p = p.resolve() if p.is_symlink() else p
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return dest


def cfg_with(**checks_keys: Any) -> config.Config:
    """Defaults plus [checks] keys, validated as a config file would be."""
    lines = ["[checks]"] + [f"{k} = {json.dumps(v)}" for k, v in checks_keys.items()]
    return config.parse("\n".join(lines) + "\n")


def run(root: Path, gpus: list[int] | None = None, cfg: config.Config | None = None) -> dict[str, base.CheckResult]:
    """The fast checks on a recorded node, by code."""
    return {r.code: r for r in checks.run_fast(load_node(str(root)), cfg or config.defaults(), gpus or [])}


def gpu(i: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda snap: next(g for g in snap["gpus"] if g["index"] == i)


# --- the base fixtures are healthy ----------------------------------------------------------------

@pytest.mark.parametrize("node,gpus", [(HGX, ALL8), (L40S, [0, 1, 2, 3])])
def test_base_fixtures_are_healthy(node: str, gpus: list[int]) -> None:
    res = run(NODES / node, gpus)
    assert {c: r.status for c, r in res.items() if r.status in ("fail", "error")} == {}
    assert set(res) == {c for c, s in checks.registry().items() if s.cost == "fast"}


# --- one trip and one pass per check ---------------------------------------------------------------

def test_gpu_missing(tmp_path: Path) -> None:
    root = derive(tmp_path, HGX, lambda s: s.update(gpus=[g for g in s["gpus"] if g["index"] != 7]))
    r = run(root, ALL8, cfg_with(expected_gpus=8))["gpu_missing"]
    assert r.status == "fail"
    assert "allocated GPU 7 not visible (NVML shows 7: indices 0,1,2,3,4,5,6)" in r.detail
    assert "7 GPUs visible, 8 expected" in r.detail
    bus7 = json.loads((NODES / HGX / "gpus.json").read_text())["gpus"][7]["bus_id"]
    assert f"on the PCI bus but not visible to NVML: {bus7}" in r.detail
    # a job on GPUs 0-3 of the same node: its GPUs are there, but sysfs still sees a lost GPU
    ok = run(NODES / HGX, [0, 1, 2, 3], cfg_with(expected_gpus=8))["gpu_missing"]
    assert ok.status == "ok" and "8 GPUs visible, 8 expected" in ok.detail


def test_xid_fatal_window(tmp_path: Path) -> None:
    recorded = runner.recorded_time(json.loads((NODES / HGX / "gpus.json").read_text()))
    assert recorded is not None

    def events(*evs: tuple[int, float]) -> Callable[[dict[str, Any]], None]:
        return lambda s: gpu(3)(s).update(xid_events=[{"xid": x, "t": recorded - age} for x, age in evs])

    r = run(derive(tmp_path / "a", HGX, events((79, 60.0), (13, 30.0))), ALL8)["xid_fatal"]
    assert r.status == "fail"
    assert r.detail.startswith("GPU 3 (0000:") and "XID 79 at" in r.detail and "XID 13" not in r.detail
    assert "window: last 7200 s" in r.detail
    # application XID 13 only, and a fatal one older than the window: not a failure
    old = run(derive(tmp_path / "b", HGX, events((13, 30.0), (79, 9000.0))), ALL8)["xid_fatal"]
    assert old.status == "ok"
    # the job does not hold GPU 3: not its business
    assert run(derive(tmp_path / "c", HGX, events((79, 60.0))), [0, 1])["xid_fatal"].status == "ok"


def test_xid_window_starts_at_last_clean_check() -> None:
    snap = {"gpus": [{"index": 0, "bus_id": "0000:18:00.0", "xid_events": [{"xid": 48, "t": 1000.0}]}]}
    cfg = config.defaults()
    fn = checks.registry()["xid_fatal"].fn
    before = fn({}, snap, [0], cfg, base.CheckEnv(now=1100.0, xid_since={"0000:18:00.0": 900.0}))
    assert before.status == "fail" and "since last clean check" in before.detail
    after = fn({}, snap, [0], cfg, base.CheckEnv(now=1100.0, xid_since={"0000:18:00.0": 1050.0}))
    assert after.status == "ok"


def test_ecc_uncorrectable(tmp_path: Path) -> None:
    root = derive(tmp_path, HGX, lambda s: gpu(5)(s)["ecc"].update(volatile_uncorrected=2, aggregate_uncorrected=3))
    r = run(root, ALL8)["ecc_uncorrectable"]
    assert r.status == "fail" and r.detail.startswith("GPU 5 (") and "2 volatile uncorrectable ECC errors (aggregate 3)" in r.detail
    assert run(root, [0, 1])["ecc_uncorrectable"].status == "ok"


def test_row_remap_and_retired_pages(tmp_path: Path) -> None:
    root = derive(tmp_path / "a", HGX, lambda s: gpu(2)(s)["row_remap"].update(pending=True, uncorrectable=1))
    r = run(root, ALL8)["row_remap"]
    assert r.status == "fail" and "GPU 2 (" in r.detail and "row remap pending" in r.detail and "uncorrectable rows 1" in r.detail

    def old_gpu(s: dict[str, Any]) -> None:
        gpu(1)(s).update(row_remap=None, retired_pages={"pending": True, "sbe": 0, "dbe": 2})
    r2 = run(derive(tmp_path / "b", HGX, old_gpu), ALL8)["row_remap"]
    assert r2.status == "fail" and "GPU 1 (" in r2.detail and "page retirement pending" in r2.detail and "dbe 2" in r2.detail
    assert run(NODES / HGX, ALL8)["row_remap"].status == "ok"


def test_pcie_downtrained(tmp_path: Path) -> None:
    narrow = derive(tmp_path / "w", HGX, lambda s: gpu(3)(s)["pcie"].update(width=8))
    r = run(narrow, ALL8)["pcie_downtrained"]
    bus3 = json.loads((NODES / HGX / "gpus.json").read_text())["gpus"][3]["bus_id"]
    assert r.status == "fail"
    assert r.detail == f"GPU 3 ({bus3}) PCIe gen5 x8, max gen5 x16 (read with the link idle)"
    # a lower generation on an idle GPU may be power saving: a warning, unless checks.fail says otherwise
    slow = derive(tmp_path / "g", HGX, lambda s: gpu(3)(s)["pcie"].update(gen=4))
    warn = run(slow, ALL8)["pcie_downtrained"]
    assert warn.status == "warn" and "gen4 x16, max gen5 x16" in warn.detail and "power" in warn.detail
    assert run(slow, ALL8, cfg_with(fail=["pcie_downtrained"]))["pcie_downtrained"].status == "fail"
    busy = derive(tmp_path / "b", HGX, lambda s: gpu(3)(s).update(util_gpu_pct=40, throttle_reasons=0,
                                                                   pcie={"gen": 4, "width": 16, "max_gen": 5, "max_width": 16}))
    b = run(busy, ALL8)["pcie_downtrained"]
    assert b.status == "fail" and "read with the link in use: util 40%" in b.detail
    assert run(narrow, [0, 1, 2])["pcie_downtrained"].status == "ok"


def _bridge_config(root: Path, gpu_index: int) -> Path:
    node = load_node(str(root))
    bridge = node.topology["pcie_paths"][f"gpu:{gpu_index}"][-1]["bus_id"]
    return next((root / "sys" / "devices").glob(f"**/{bridge}/config"))


def test_acs_enabled(tmp_path: Path) -> None:
    root = derive(tmp_path, HGX)
    cfg_file = _bridge_config(root, 3)
    data = bytearray(cfg_file.read_bytes())
    off = 0x100
    while int.from_bytes(data[off:off + 2], "little") != 0x000D:  # find the ACS capability
        off = (int.from_bytes(data[off:off + 4], "little") >> 20) & 0xFFC
        assert off, "fixture bridge has no ACS capability"
    data[off + 6:off + 8] = (0x001D).to_bytes(2, "little")  # SrcValid+ReqRedir+CmpltRedir+UpstreamFwd
    cfg_file.write_bytes(bytes(data))
    r = run(root, ALL8)["acs_enabled"]
    assert r.status == "warn"  # severity warn by default
    assert cfg_file.parent.name in r.detail and "gpu 3" in r.detail and "ReqRedir" in r.detail
    assert run(root, ALL8, cfg_with(fail=["acs_enabled"]))["acs_enabled"].status == "fail"
    assert run(NODES / HGX, ALL8)["acs_enabled"].status == "ok"


def test_nvlink_down(tmp_path: Path) -> None:
    def link_down(s: dict[str, Any]) -> None:
        nv = gpu(2)(s)["nvlink"]
        nv["links"][3]["active"] = False
        nv["links_active"] = 17
    r = run(derive(tmp_path, HGX, link_down), ALL8)["nvlink_down"]
    assert r.status == "fail" and r.detail.startswith("GPU 2 (") and "17 of 18 NVLinks active (down: 3)" in r.detail
    assert run(NODES / HGX, ALL8)["nvlink_down"].status == "ok"
    # no NVLink fabric at all (PCIe cards): nothing to expect
    assert run(NODES / L40S, [0, 1])["nvlink_down"].status == "skip"


def test_nvlink_error_growth_since_last_clean_check() -> None:
    g = {"index": 0, "bus_id": "0000:18:00.0", "nvlink": {"links_total": 1, "links_active": 1, "links": [
        {"link": 0, "active": True, "errors": {"replay": 5, "crc_flit": 0}}]}}
    fn, cfg = checks.registry()["nvlink_down"].fn, config.defaults()
    grown = fn({}, {"gpus": [g]}, [0], cfg, base.CheckEnv(nvlink_baseline={"0000:18:00.0": {"0": {"replay": 2, "crc_flit": 0}}}))
    assert grown.status == "fail" and "link 0 replay +3" in grown.detail
    same = fn({}, {"gpus": [g]}, [0], cfg, base.CheckEnv(nvlink_baseline={"0000:18:00.0": {"0": {"replay": 5, "crc_flit": 0}}}))
    assert same.status == "ok"
    assert fn({}, {"gpus": [g]}, [0], cfg_with(nvlink_max_error_growth=3),
              base.CheckEnv(nvlink_baseline={"0000:18:00.0": {"0": {"replay": 2}}})).status == "ok"


def _crc_gpu(bus: str, counts: list[int]) -> dict[str, Any]:
    links = [{"link": i, "active": True, "errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": c}}
             for i, c in enumerate(counts)]
    return {"index": 0, "bus_id": bus, "nvlink": {"links_total": len(links), "links_active": len(links), "links": links}}


def test_corrected_crc_errors_of_a_healthy_h200_pair_under_all_reduce_only_warn() -> None:
    """Recorded on 2x H200 (tests/data/checks/nvlink_crc_h200x2.json): every growth used to fail the node."""
    rec = json.loads((Path(__file__).parents[1] / "data" / "checks" / "nvlink_crc_h200x2.json").read_text())
    fn, cfg = checks.registry()["nvlink_down"].fn, config.defaults()
    t0 = 1000.0
    for bus, grown in rec["crc_data_growth"].items():
        g = dict(_crc_gpu(bus, grown), index=0)
        env = base.CheckEnv(now=t0 + rec["window_s"], nvlink_since={bus: t0},
                            nvlink_baseline={bus: {str(i): {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
                                                   for i in range(len(grown))}})
        r = fn({}, {"gpus": [g]}, [0], cfg, env)
        assert r.status == "warn", r
        assert "corrected NVLink CRC errors" in r.detail and f"+{max(grown)}" in r.detail
        assert "under the 100/s that fails" in r.detail
        # the same growth in a second is a link at 100+/s: that one fails, as in DCGM's health watch
        fast = fn({}, {"gpus": [g]}, [0], cfg, base.CheckEnv(now=t0 + 1.0, nvlink_since={bus: t0},
                                                               nvlink_baseline=env.nvlink_baseline))
        assert fast.status == "fail" and "CRC errors at 100/s or more" in fast.detail


def test_nvlink_crc_rate_replay_and_unknown_window() -> None:
    bus = "0000:18:00.0"
    fn, cfg = checks.registry()["nvlink_down"].fn, config.defaults()
    zero = {"0": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}}

    def judged(errors: dict[str, int], now: float | None, since: float | None, c: Any = cfg) -> Any:
        g = {"index": 0, "bus_id": bus, "nvlink": {"links_total": 1, "links_active": 1, "links": [
            {"link": 0, "active": True, "errors": {**zero["0"], **errors}}]}}
        env = base.CheckEnv(now=now, nvlink_since={bus: since} if since is not None else {}, nvlink_baseline={bus: zero})
        return fn({}, {"gpus": [g]}, [0], c, env)

    assert judged({"crc_flit": 999}, 110.0, 100.0).status == "warn"        # 99.9/s over 10 s
    assert judged({"crc_flit": 1000}, 110.0, 100.0).status == "fail"       # 100/s: DCGM's limit fails
    assert judged({"crc_data": 5}, 200.0, 100.0).status == "warn"
    assert judged({"crc_data": 5}, None, None).status == "warn"            # an older baseline: no time
    assert "over an unknown time" in judged({"crc_data": 5}, None, None).detail
    assert judged({"recovery": 1, "crc_data": 1}, 1e6, 100.0).status == "fail"
    assert judged({"replay": 1}, 1e6, 100.0).status == "fail"
    assert judged({"crc_data": 50}, 110.0, 100.0, cfg_with(nvlink_crc_max_per_s=5.0)).status == "fail"
    assert judged({}, 110.0, 100.0).status == "ok"


def test_clocks_throttled(tmp_path: Path) -> None:
    root = derive(tmp_path, HGX, lambda s: gpu(6)(s).update(throttle_reasons=0x41, util_gpu_pct=0, temp_c=92))
    r = run(root, ALL8)["clocks_throttled"]
    assert r.status == "warn" and "GPU 6 (" in r.detail and "hw_thermal" in r.detail and "temp 92 C" in r.detail
    busy = derive(tmp_path / "b", HGX, lambda s: gpu(6)(s).update(throttle_reasons=0x40, util_gpu_pct=99))
    assert run(busy, ALL8)["clocks_throttled"].status == "ok"


def test_persistence_off(tmp_path: Path) -> None:
    r = run(derive(tmp_path, L40S, lambda s: gpu(1)(s).update(persistence_mode=False)), [0, 1])["persistence_off"]
    assert r.status == "warn" and r.detail.startswith("GPU 1 (") and "persistence mode off" in r.detail
    assert run(NODES / L40S, [0, 1])["persistence_off"].status == "ok"


def test_ib_port(tmp_path: Path) -> None:
    port = "sys/class/infiniband/mlx5_3/ports/1/"
    down = run(derive(tmp_path / "d", HGX, files={port + "state": "1: DOWN\n"}), ALL8)["ib_port"]
    assert down.status == "fail" and "mlx5_3:1 (ib, " in down.detail and "state DOWN" in down.detail
    slow = derive(tmp_path / "s", HGX, files={port + "rate": "200 Gb/sec (4X HDR)\n"})
    assert run(slow, ALL8)["ib_port"].status == "ok"  # no rate expected unless configured
    r = run(slow, ALL8, cfg_with(ib_min_rate_gbps=400.0))["ib_port"]
    assert r.status == "fail" and "mlx5_3:1" in r.detail and "rate 200 Gb/s, expected >= 400" in r.detail
    ok = run(NODES / HGX, ALL8, cfg_with(ib_min_rate_gbps=400.0))["ib_port"]
    assert ok.status == "ok" and "8 IB/RoCE ports ACTIVE at 400 Gb/s" in ok.detail


def test_gdr_missing(tmp_path: Path) -> None:
    root = derive(tmp_path, HGX)
    shutil.rmtree(root / "sys" / "module" / "nvidia_peermem")
    r = run(root, ALL8)["gdr_missing"]
    assert r.status == "warn" and "8 RDMA NICs (mlx5_0" in r.detail and "not loaded" in r.detail
    assert run(NODES / HGX, ALL8)["gdr_missing"].status == "ok"


def test_driver_mismatch() -> None:
    actual = json.loads((NODES / HGX / "gpus.json").read_text())["driver_version"]
    assert run(NODES / HGX, ALL8)["driver_mismatch"].status == "skip"
    bad = run(NODES / HGX, ALL8, cfg_with(driver_version="999.1"))["driver_mismatch"]
    assert bad.status == "fail" and bad.detail == f"driver {actual}, configured 999.1 (checks.driver_version)"
    major_minor = ".".join(actual.split(".")[:2])
    assert run(NODES / HGX, ALL8, cfg_with(driver_version=major_minor))["driver_mismatch"].status == "ok"
    # a prefix that is not whole components does not match
    assert run(NODES / HGX, ALL8, cfg_with(driver_version=actual[:-1]))["driver_mismatch"].status == "fail"


def test_disabled_check_does_not_run(tmp_path: Path) -> None:
    root = derive(tmp_path, HGX, lambda s: gpu(3)(s)["pcie"].update(width=8))
    res = run(root, ALL8, cfg_with(disabled=["pcie_downtrained"]))
    assert "pcie_downtrained" not in res and res["ecc_uncorrectable"].status == "ok"


# --- bad input --------------------------------------------------------------------------------------

def test_nvml_error_on_one_gpu_does_not_hide_another_failure(tmp_path: Path) -> None:
    def broken(s: dict[str, Any]) -> None:
        s["gpus"][2] = {"index": 2, "error": "NVMLError_GpuIsLost: GPU is lost"}
        gpu(5)(s)["ecc"]["volatile_uncorrected"] = 1
    res = run(derive(tmp_path, HGX, broken), ALL8)
    assert res["ecc_uncorrectable"].status == "fail"
    assert "GPU 5 (" in res["ecc_uncorrectable"].detail and "GPU 2 (bus id unknown): NVML error" in res["ecc_uncorrectable"].detail
    assert res["persistence_off"].status == "error" and "GPU is lost" in res["persistence_off"].detail
    assert res["gpu_missing"].status == "ok"  # NVML still lists it


def test_garbage_and_truncated_sysfs(tmp_path: Path) -> None:
    root = derive(tmp_path, HGX, files={"sys/class/infiniband/mlx5_0/ports/1/state": b"\xff\x00garbage",
                                        "sys/class/infiniband/mlx5_0/ports/1/rate": "",
                                        })
    cfg_file = _bridge_config(root, 0)
    cfg_file.write_bytes(cfg_file.read_bytes()[:64])  # truncated config space: ACS unknown
    res = run(root, ALL8)
    assert all(r.status in ("ok", "skip", "warn") for r in res.values()), {c: r.detail for c, r in res.items()}
    assert res["ib_port"].status == "ok" and "7 IB/RoCE ports ACTIVE" in res["ib_port"].detail


def test_truncated_gpus_json_means_could_not_check(tmp_path: Path) -> None:
    root = derive(tmp_path, HGX)
    text = (root / "gpus.json").read_text()
    (root / "gpus.json").write_text(text[: len(text) // 2])
    res = run(root, ALL8)
    assert res["gpu_missing"].status == "error" and "gpus.json" in res["gpu_missing"].detail
    assert res["ib_port"].status == "ok"  # topology-only checks still judge
    p = _gpuperf("check", "--root", str(root))
    assert p.returncode == 2, p.stdout + p.stderr


def test_unknown_check_name_in_config() -> None:
    with pytest.raises(config.ConfigError) as e:
        config.parse("[checks]\ndisabled = [\"pcie_downtrain\"]\n", "/etc/gpuperf/config.toml")
    msg = str(e.value)
    assert "checks.disabled" in msg and ":2" in msg and "'pcie_downtrain'" in msg and "pcie_downtrained" in msg


def test_raising_and_hanging_checks_are_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: Any, **k: Any) -> base.CheckResult:
        raise KeyError("pcie")

    def hang(*a: Any, **k: Any) -> base.CheckResult:
        time.sleep(2)
        return base.CheckResult("zz_hang", "fail", "too late")
    monkeypatch.setitem(base._REGISTRY, "zz_boom", base.CheckSpec("zz_boom", boom, "fail", "fast", True, ""))
    monkeypatch.setitem(base._REGISTRY, "zz_hang", base.CheckSpec("zz_hang", hang, "fail", "fast", True, ""))
    t0 = time.perf_counter()
    res = run(NODES / HGX, ALL8, cfg_with(timeout_s=0.2))
    assert time.perf_counter() - t0 < 1.5
    assert res["zz_boom"].status == "error" and "KeyError" in res["zz_boom"].detail
    assert res["zz_hang"].status == "error" and "timed out" in res["zz_hang"].detail
    assert res["pcie_downtrained"].status == "ok"


# --- the prolog step without Slurm --------------------------------------------------------------------

def _prolog(root: Path, cfg: config.Config, gpus: list[int]) -> HookState:
    cfg.data["general"]["node_root"] = str(root)
    state = HookState()
    health.step(JobContext(hook="prolog", job_id=42, uid=0, user="root", gpus=gpus, node="n1"), cfg, state)
    return state


def test_prolog_records_warnings_and_never_drains_for_them() -> None:
    state = _prolog(NODES / L40S, config.defaults(), [0, 1])
    h = state.data["health"]
    assert h["source"] == "local" and h["status"] == "warn" and "action" not in h
    assert any(w.startswith("gdr_missing: 1 RDMA NICs") for w in h["warnings"])


def test_prolog_does_not_drain_when_slurm_cannot_be_asked(tmp_path: Path) -> None:
    root = derive(tmp_path, HGX, lambda s: gpu(3)(s)["pcie"].update(width=8))
    cfg = config.defaults()
    cfg.data["general"]["slurm_bin_dir"] = str(tmp_path / "no-slurm")
    state = _prolog(root, cfg, ALL8)  # no HookVerdict: the safety bound cannot be checked
    h = state.data["health"]
    assert h["status"] == "fail" and h["reason"].startswith("gpuperf: pcie_downtrained: GPU 3 (")
    assert h["action"].startswith("none (cannot read node states")


def test_prolog_drain_off_and_degraded_config(tmp_path: Path) -> None:
    root = derive(tmp_path, HGX, lambda s: gpu(1)(s)["ecc"].update(volatile_uncorrected=1))
    assert _prolog(root, cfg_with(drain=False), ALL8).data["health"]["action"] == "none (checks.drain is off)"
    broken = config.defaults()
    broken.degraded = True
    assert _prolog(root, broken, ALL8).data["health"]["action"] == "none (config is broken: no drain)"


def test_prolog_with_unreadable_node_is_error_not_drain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def stuck(cfg: Any, root: Any = None) -> Any:
        raise runner.CheckTimeout("no answer within 5 s")
    monkeypatch.setattr(checks, "read_node", stuck)
    state = _prolog(NODES / HGX, config.defaults(), ALL8)
    h = state.data["health"]
    assert h["status"] == "error" and all("cannot read the node" in r["detail"] for r in h["results"])


# --- policy, history, XID parsing -----------------------------------------------------------------------

def test_drain_reason_is_one_bounded_line() -> None:
    fails = [base.CheckResult("pcie_downtrained", "fail", "GPU 3 (0000:9a:00.0) PCIe gen4 x16 |\n" + "x" * 400),
             base.CheckResult("ecc_uncorrectable", "fail", "GPU 1")]
    r = policy.drain_reason(fails)
    assert r.startswith("gpuperf: pcie_downtrained: GPU 3 (0000:9a:00.0) PCIe gen4 x16 / x")
    assert r.endswith("... (+1 more: ecc_uncorrectable)") and len(r) <= policy.MAX_REASON and "\n" not in r


def test_safety_bound_counts_only_gpuperf_drains() -> None:
    nodes = {f"n{i}": ("idle", "") for i in range(10)}
    nodes["n0"] = ("drained", "gpuperf: xid_fatal: GPU 0")
    nodes["n1"] = ("drained", "admin: fan replacement")
    b = policy.drain_bound(nodes, 0.10)
    assert (b.drained_by_gpuperf, b.nodes, b.allows) == (1, 10, True)
    nodes["n2"] = ("draining", "gpuperf: ecc_uncorrectable: GPU 3")
    assert policy.drain_bound(nodes, 0.10).allows is False
    assert "2 of 10 nodes drained by gpuperf (20%" in policy.drain_bound(nodes, 0.10).describe()


def test_resume_only_gpuperf_drains_and_only_when_passing() -> None:
    ok = [base.CheckResult("ecc_uncorrectable", "ok", ""), base.CheckResult("gdr_missing", "warn", "")]
    assert policy.resume_decision("drained", "gpuperf: pcie_downtrained: x", ok)[0] is True
    assert policy.resume_decision("drained", "admin: broken fan", ok)[0] is False
    assert policy.resume_decision("idle", "", ok)[0] is False
    err = ok + [base.CheckResult("xid_fatal", "error", "")]
    assert policy.resume_decision("drained", "gpuperf: xid_fatal: x", err) == (False, "checks still not passing: xid_fatal error")


def test_kmsg_xid_record_parsing_and_merge() -> None:
    rec = "3,1234,5000000,-;NVRM: Xid (PCI:0000:9A:00): 79, pid=4242, name=python, GPU has fallen off the bus."
    ev = xid.parse_kmsg_record(rec, boot_wall=1000.0)
    assert ev == xid.XidEvent("0000:9a:00", 79, 1005.0)
    assert xid.parse_kmsg_record("6,1,2,-;NVRM: loading NVIDIA UNIX driver", 0.0) is None
    long_domain = xid.parse_kmsg_record("3,2,1000000,-;NVRM: Xid (PCI:00000000:1b:00): 48, pid=1", 0.0)
    assert long_domain is not None and long_domain.bus == "0000:1b:00"
    snap = {"gpus": [{"index": 3, "bus_id": "0000:9a:00.0"}]}
    unmatched = xid.merge_into_snapshot(snap, [ev, xid.XidEvent("0000:01:00", 13, 1.0)])
    assert snap["gpus"][0]["xid_events"] == [{"xid": 79, "t": 1005.0}] and [u.xid for u in unmatched] == [13]


def test_history_moves_forward_only_for_clean_gpus(tmp_path: Path) -> None:
    snap = {"gpus": [
        {"index": 0, "bus_id": "0000:18:00.0", "xid_events": [{"xid": 79, "t": 990.0}]},
        {"index": 1, "bus_id": "0000:2a:00.0", "nvlink": {"links_total": 1, "links_active": 1,
                                                           "links": [{"link": 0, "active": True, "errors": {"replay": 4}}]}}]}
    cfg = config.defaults()
    env = history.env_from({"gpus": {}}, 1000.0, True, "test")
    entries = history.advanced({"gpus": {}}, {}, snap, [], cfg, env)
    assert "xid_clean_t" not in entries["0000:18:00.0"]  # the XID keeps counting on the next run
    assert entries["0000:2a:00.0"] == {"xid_clean_t": 1000.0, "nvlink_errors": {"0": {"replay": 4}}, "nvlink_t": 1000.0}
    history.save(str(tmp_path), entries)
    env2 = history.env_from(history.load(str(tmp_path)), 1100.0, True, "test")
    assert env2.xid_since == {"0000:2a:00.0": 1000.0}
    assert env2.nvlink_baseline == {"0000:2a:00.0": {"0": {"replay": 4}}}
    assert env2.nvlink_since == {"0000:2a:00.0": 1000.0}
    # corrected CRC errors under the rate only warn, and the window starts again at that check
    snap["gpus"][1]["nvlink"]["links"][0]["errors"] = {"replay": 4, "crc_data": 30}
    entries = history.advanced({"gpus": {"0000:2a:00.0": {"nvlink_errors": {"0": {"replay": 4, "crc_data": 0}},
                                                         "nvlink_t": 1000.0}}}, {}, snap, [1], cfg,
                               history.env_from({"gpus": {"0000:2a:00.0": {"nvlink_errors": {"0": {"replay": 4, "crc_data": 0}},
                                                                          "nvlink_t": 1000.0}}}, 1100.0, True, "test"))
    assert entries["0000:2a:00.0"]["nvlink_errors"] == {"0": {"replay": 4, "crc_data": 30}}
    assert entries["0000:2a:00.0"]["nvlink_t"] == 1100.0


def _gpuperf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuperf", *args], capture_output=True, text=True, timeout=60,
                          env={"GPUPERF_CONFIG": "/nonexistent/gpuperf.toml", "PATH": "/usr/bin:/bin"})


def test_check_command_exit_codes_and_lines(tmp_path: Path) -> None:
    p = _gpuperf("check", "--root", str(NODES / HGX))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == len([s for s in checks.registry().values() if s.cost == "fast"]) + 1
    assert lines[-1].startswith("healthy (")
    bad = derive(tmp_path, HGX, lambda s: gpu(3)(s)["pcie"].update(width=8))
    p = _gpuperf("check", "--root", str(bad), "--json", "--gpus", "2-3")
    assert p.returncode == 1
    out = json.loads(p.stdout)
    assert out["gpus"] == [2, 3] and out["status"] == "fail"
    assert [r["code"] for r in out["results"] if r["status"] == "fail"] == ["pcie_downtrained"]
    assert _gpuperf("check", "--root", str(bad), "--gpus", "0,1").returncode == 0


# --- the prolog's fast path through the node daemon ------------------------------------------------------

class _IdleSampler:
    """Two idle GPUs: the daemon needs a sampler; these tests are about its health answer."""

    name = "idle"

    def gpu_count(self) -> int:
        return 2

    def sample(self) -> list:
        from gpuperf.samplers.base import GpuSample
        return [GpuSample(gpu=i, t=time.time(), util_gpu_pct=0.0, power_w=60.0) for i in range(2)]

    def read_energy(self) -> dict:
        return {0: None, 1: None}

    def close(self) -> None:
        pass


def test_prolog_uses_the_daemons_fresh_checks(tmp_path: Path) -> None:
    import threading

    from gpuperf.daemon.server import Daemon

    root = derive(tmp_path, HGX, lambda s: gpu(4)(s)["row_remap"].update(failure=True))
    cfg = cfg_with(drain=False)
    cfg.data["general"].update(run_dir=str(tmp_path / "run"), state_dir=str(tmp_path / "state"), log_file="",
                               node_root=str(root))
    cfg.data["daemon"].update(socket_dir=str(tmp_path / "sock"), user_socket_dir=str(tmp_path / "usock"),
                              metrics_port=0, interval_s=0.05)
    d = Daemon(cfg, _IdleSampler(), node="n1", metrics=False, send_summaries=False)
    th = threading.Thread(target=d.run, daemon=True)
    th.start()
    try:
        assert d.ready.wait(10)
        end = time.time() + 10
        while d.health is None and time.time() < end:
            time.sleep(0.05)
        state = HookState()
        health.step(JobContext(hook="prolog", job_id=7, uid=0, user="root", gpus=ALL8, node="n1"), cfg, state)
    finally:
        d.stop()
        th.join(10)
    h = state.data["health"]
    assert h["source"] == "daemon" and h["status"] == "fail"
    rr = next(r for r in h["results"] if r["code"] == "row_remap")
    assert rr["status"] == "fail" and "GPU 4 (" in rr["detail"] and "row remapping failed" in rr["detail"]
    assert h["action"] == "none (checks.drain is off)"


def test_deep_check_never_touches_a_recorded_node_and_reads_dcgmi_failures() -> None:
    from gpuperf.checks.builtin import dcgm_diag

    res = checks.run_deep(load_node(str(NODES / HGX)), config.defaults(), [])
    assert sorted((r.code, r.status) for r in res) == [("dcgm_diag", "skip"), ("gpu_probe", "skip")]
    assert all("recorded node" in r.detail for r in res)
    table = ("| Diagnostic | Result |\n| Deployment | Pass |\n| Memory | Fail - GPU 3: DBE |\n"
             "| PCIe | Warn - GPU 1 |\n")
    assert dcgm_diag.failing_lines(table) == ["Memory Fail - GPU 3: DBE", "PCIe Warn - GPU 1"]


def test_live_path_reads_kernel_log_xids_and_keeps_them_until_clean(tmp_path: Path) -> None:
    from gpuperf.topology import Node

    recorded = load_node(str(NODES / HGX))
    live = Node(topology=recorded.topology, gpus=recorded.gpus, root=None)  # judged as the live node
    bus3 = recorded.gpus["gpus"][3]["bus_id"]
    usec = int((time.clock_gettime(time.CLOCK_MONOTONIC) - 60) * 1e6)  # a minute ago
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(f"6,100,{usec - 5},-;NVRM: loading NVIDIA UNIX driver\n"
                    f"3,101,{usec},-;NVRM: Xid (PCI:{bus3.rsplit('.', 1)[0]}): 79, pid=77, GPU has fallen off the bus.\n"
                    " SUBSYSTEM=pci\n")
    cfg = config.defaults()
    cfg.data["general"]["state_dir"] = str(tmp_path / "state")
    for _ in range(2):  # the second run still sees it: GPU 3 never had a clean check since
        r = {x.code: x for x in checks.run_fast(live, cfg, ALL8, kmsg=str(kmsg))}["xid_fatal"]
        assert r.status == "fail" and f"GPU 3 ({bus3}): XID 79 at" in r.detail
        assert f"source: kernel log {kmsg}" in r.detail
    since = history.load(str(tmp_path / "state"))["gpus"]
    assert bus3 not in since or "xid_clean_t" not in since[bus3]
    assert "xid_clean_t" in since[recorded.gpus["gpus"][0]["bus_id"]]
    missing = {x.code: x for x in checks.run_fast(live, cfg, ALL8, kmsg=str(tmp_path / "absent"))}["xid_fatal"]
    assert missing.status == "error" and "cannot read" in missing.detail
