"""The env policy: what each node gets and why; the user's variables, opt-out and NCCL versions."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from gpuperf.env import policy as ep
from gpuperf.env import report as env_report
from gpuperf.env.policy import JobShape
from gpuperf.prolog import envplan, envtask

NODES = Path(__file__).resolve().parents[1] / "data" / "nodes"
NEVER = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_LEVEL", "CUDA_DEVICE_MAX_CONNECTIONS")


def hgx(kind: str = "ib", gdr: bool = True, gids: tuple = (3,) * 8, acs: bool = False) -> dict:
    """An 8-GPU node: GPU i and NIC mlx5_<7-i> share PCIe switch i (NIC names reversed to test rail order)."""
    gpus, nics, paths = [], [], {}
    for i in range(8):
        switch, root = f"0000:{0x20 + i:02x}:00.0", f"0000:{0x10 + i:02x}:01.0"
        gpus.append({"index": i, "name": "NVIDIA H100 80GB HBM3", "arch": "hopper", "numa_node": i // 4,
                     "nvlink": {"links": 18, "via_switch": True, "peers": [j for j in range(8) if j != i]}})
        nic = f"mlx5_{7 - i}"
        nics.append({"name": nic, "kind": kind, "netdev": None, "state": "ACTIVE", "numa_node": i // 4,
                     "port": 1, "gid_index_rocev2": gids[i] if kind == "roce" else None, "ipv4": []})
        paths[f"gpu:{i}"] = [{"bus_id": f"0000:{0x30 + i:02x}:00.0", "acs_enabled": acs},
                             {"bus_id": switch, "acs_enabled": False}, {"bus_id": root, "acs_enabled": False}]
        paths[f"nic:{nic}"] = [{"bus_id": f"0000:{0x30 + i:02x}:01.0", "acs_enabled": False},
                               {"bus_id": switch, "acs_enabled": False}, {"bus_id": root, "acs_enabled": False}]
    nics += [{"name": "eno1", "kind": "ethernet", "netdev": "eno1", "state": "UP", "ipv4": ["10.1.0.5"]},
             {"name": "docker0", "kind": "ethernet", "netdev": "docker0", "state": "UP", "ipv4": ["172.17.0.1"]},
             {"name": "mlx5_9", "kind": kind, "netdev": None, "state": "DOWN", "port": 1, "ipv4": []}]
    return {"schema": "gpuperf.topology.v1", "hostname": "gpu01", "gpus": gpus, "nics": nics,
            "pcie_paths": paths, "gdr": {"module": "nvidia_peermem", "loaded": gdr}}


MULTI = JobShape(gpus=tuple(range(8)), nodes=2, node_addrs=("10.1.0.5",), node_name="gpu01")


def values(plan: ep.EnvPlan) -> dict[str, str]:
    return {v.name: v.value for v in plan.vars}


# --- the built-in policy on synthetic nodes ---------------------------------------------------------

def test_multi_node_ib_sets_hcas_in_rail_order_interface_and_gdr():
    plan = ep.plan(hgx(), MULTI)
    v = values(plan)
    # GPU i's switch neighbour is mlx5_<7-i>: rail order follows the GPUs, not the names; the DOWN port is left out
    assert v["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{7 - i}:1" for i in range(8))
    assert v["NCCL_SOCKET_IFNAME"] == "=eno1"
    assert "10.1.0.5" in plan.get("NCCL_SOCKET_IFNAME").reason
    assert v["NCCL_NET_GDR_LEVEL"] == "PXB"
    assert "NCCL_IB_GID_INDEX" not in v  # InfiniBand has no GID index to pick
    for name in NEVER:
        assert name not in v
    assert all(var.reason and var.rule.startswith("default:") for var in plan.vars)


def test_single_node_sets_no_network_variables():
    plan = ep.plan(hgx(), JobShape(gpus=(0, 1, 2, 3), nodes=1, cpus_per_task=32, gpus_per_task=4))
    v = values(plan)
    assert not [n for n in v if n.startswith("NCCL_")]
    assert "CUDA_DEVICE_ORDER" not in v  # identical GPUs: CUDA's order is the PCI order already
    assert v["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert v["OMP_NUM_THREADS"] == "8"  # 32 CPUs shared by the 4 GPU processes a launcher starts


def test_roce_gid_index_found_and_skipped_for_nccl_that_finds_it():
    plan = ep.plan(hgx("roce", gids=(5,) * 8), MULTI)
    gid = plan.get("NCCL_IB_GID_INDEX")
    assert gid.value == "5" and gid.nccl_below == (2, 21, 0)
    newer = ep.plan(hgx("roce", gids=(5,) * 8), MULTI._replace(nccl_version=(2, 21, 5), nccl_source="test"))
    assert newer.get("NCCL_IB_GID_INDEX") is None
    assert any(s.name == "NCCL_IB_GID_INDEX" and "2.21.5" in s.reason for s in newer.skipped)


def test_roce_ports_disagreeing_on_gid_index_get_none():
    plan = ep.plan(hgx("roce", gids=(3, 3, 3, 3, 5, 5, 5, 5)), MULTI)
    assert plan.get("NCCL_IB_GID_INDEX") is None
    assert any(s.name == "NCCL_IB_GID_INDEX" for s in plan.skipped)


def test_gdr_level_only_when_module_loaded_and_nic_shares_a_switch():
    assert ep.plan(hgx(gdr=False), MULTI).get("NCCL_NET_GDR_LEVEL") is None
    far = hgx()
    for i in range(8):  # every NIC moved behind another root port: GPU and NIC share nothing
        far["pcie_paths"][f"nic:mlx5_{7 - i}"] = [{"bus_id": f"0000:{0x90 + i:02x}:01.0", "acs_enabled": False}]
    plan = ep.plan(far, MULTI)
    assert plan.get("NCCL_NET_GDR_LEVEL") is None
    assert any(s.name == "NCCL_NET_GDR_LEVEL" and "root complex" in s.reason for s in plan.skipped)


def test_socket_ifname_never_virtual_and_skipped_when_ambiguous():
    topo = hgx()
    topo["nics"] = [n for n in topo["nics"] if n["name"] != "eno1"]
    topo["nics"] += [{"name": "ens1", "kind": "ethernet", "netdev": "ens1", "state": "UP", "ipv4": ["10.2.0.5"]},
                     {"name": "ens2", "kind": "ethernet", "netdev": "ens2", "state": "UP", "ipv4": ["10.3.0.5"]}]
    # the node's address is on docker0 only: never chosen; two physical candidates: NCCL decides
    shape = MULTI._replace(node_addrs=("172.17.0.1",))
    plan = ep.plan(topo, shape)
    assert plan.get("NCCL_SOCKET_IFNAME") is None
    assert any(s.name == "NCCL_SOCKET_IFNAME" for s in plan.skipped)
    shape = MULTI._replace(node_addrs=("10.3.0.5",))
    assert ep.plan(topo, shape).get("NCCL_SOCKET_IFNAME").value == "=ens2"


def test_acs_and_pcie_only_are_notes_not_variables():
    topo = hgx(acs=True)
    for g in topo["gpus"]:
        g["nvlink"] = {"links": 0, "via_switch": False, "peers": []}
    plan = ep.plan(topo, MULTI)
    assert any("ACS" in n and "0000:30:00.0" in n for n in plan.notes)
    assert any("PCIe-only" in n for n in plan.notes)
    assert not [v for v in plan.vars if v.name.startswith("NCCL_P2P")]


def test_ib_ports_all_down_is_a_note_not_a_variable():
    topo = hgx()
    for n in topo["nics"]:
        if n["name"].startswith("mlx5"):
            n["state"] = "DOWN"
    plan = ep.plan(topo, MULTI)
    assert plan.get("NCCL_IB_HCA") is None and plan.get("NCCL_NET_GDR_LEVEL") is None
    assert any("none ACTIVE" in n and "mlx5_0" in n for n in plan.notes)


def test_no_gpus_no_injection():
    plan = ep.plan(hgx(), JobShape(gpus=(), nodes=2))
    assert plan.vars == [] and "no GPU" in plan.disabled


def test_user_set_variables_are_untouched_and_said_so():
    shape = MULTI._replace(user_set=frozenset({"NCCL_IB_HCA", "OMP_NUM_THREADS"}))
    plan = ep.plan(hgx(), shape)
    assert plan.get("NCCL_IB_HCA") is None and plan.get("OMP_NUM_THREADS") is None
    assert {s.name for s in plan.skipped if s.reason == ep.USER_WINS} == {"NCCL_IB_HCA", "OMP_NUM_THREADS"}


def test_user_set_alias_counts_as_the_users_choice():
    plan = ep.plan(hgx(), MULTI._replace(user_set=frozenset({"PYTORCH_ALLOC_CONF"})))
    assert plan.get("PYTORCH_CUDA_ALLOC_CONF") is None
    assert ep.Skipped("PYTORCH_CUDA_ALLOC_CONF", ep.USER_WINS, "default:pytorch_alloc") in plan.skipped


def test_marker_tells_gpuperf_values_from_the_users():
    exported = [("OMP_NUM_THREADS", "8"), ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")]
    env = {"OMP_NUM_THREADS": "8", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", ep.MARKER: ep.marker(exported),
           "NCCL_DEBUG": "INFO", "HOME": "/root"}
    assert ep.user_set(env) == {"NCCL_DEBUG"}
    env["OMP_NUM_THREADS"] = "4"  # the batch script changed gpuperf's value: now it is the user's
    assert ep.user_set(env) == {"NCCL_DEBUG", "OMP_NUM_THREADS"}


def test_finalize_task_decides_per_task_values_and_nccl_version():
    plan = ep.plan(hgx("roce"), MULTI)  # prolog: CPUs per task unknown
    omp = plan.get("OMP_NUM_THREADS")
    assert omp.per_task == "omp_threads" and omp.value == ""
    task = ep.finalize_task(plan, set(), cpus_per_task=12, gpus_per_task=2, nccl_version=(2, 28, 3), nccl_source="t")
    assert task.get("OMP_NUM_THREADS").value == "6"
    assert task.get("NCCL_IB_GID_INDEX") is None
    old = ep.finalize_task(plan, {"NCCL_SOCKET_IFNAME"}, cpus_per_task=None, gpus_per_task=1,
                           nccl_version=(2, 19, 3), nccl_source="t")
    assert old.get("NCCL_IB_GID_INDEX").value == "3"
    assert old.get("OMP_NUM_THREADS") is None and old.get("NCCL_SOCKET_IFNAME") is None


def test_plan_round_trips_through_json_cache():
    plan = ep.plan(hgx("roce"), MULTI)
    again = ep.EnvPlan.from_dict(copy.deepcopy(plan.to_dict()))
    assert again.vars == plan.vars and again.skipped == plan.skipped and again.notes == plan.notes
    with pytest.raises(ValueError):
        ep.EnvPlan.from_dict({"schema": "other"})


def test_off_reason():
    assert "config error" in ep.off_reason("bad key", True, None)
    assert "disabled" in ep.off_reason(None, False, None)
    assert "off" in ep.off_reason(None, True, "OFF")
    assert ep.off_reason(None, True, "on") is None


@pytest.mark.parametrize("text,want", [("n[1-3,5],m1", 5), ("gpu01", 1), ("a[01-04]-ib[1-2]", 8), ("", None)])
def test_count_hosts(text, want):
    assert envplan.count_hosts(text) == want


def test_version_discovery_from_job_env(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libnccl.so.2.19.3").write_text("")
    (lib / "libnccl.so.2").write_text("")
    from gpuperf.env.ncclver import nccl_from_env

    assert nccl_from_env({"NCCL_VERSION": "2.21.5-1"})[0] == (2, 21, 5)
    v, src = nccl_from_env({"LD_LIBRARY_PATH": f"/nonexistent:{lib}"})
    assert v == (2, 19, 3) and str(lib) in src
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "nvidia_nccl_cu12-2.27.3.dist-info"
    site.mkdir(parents=True)
    assert nccl_from_env({"VIRTUAL_ENV": str(tmp_path / "venv")})[0] == (2, 27, 3)
    assert nccl_from_env({}) == (None, None)


# --- the recorded node fixtures -------------------------------------------------------------------------

def _node(name: str) -> dict:
    d = NODES / name
    if not (d / "sys").is_dir():
        pytest.skip(f"node fixture {name} not recorded yet (tests/data/nodes/{name})")
    from gpuperf.topology import load_node

    return load_node(str(d), health=False).topology


def _shape(topo: dict, nodes: int) -> JobShape:
    addrs = [a for n in topo["nics"] for a in (n.get("ipv4") or []) if n.get("kind") == "ethernet"]
    return JobShape(gpus=tuple(g["index"] for g in topo["gpus"]), nodes=nodes, node_addrs=tuple(addrs[:1]),
                    node_name=topo.get("hostname"), cpus_per_task=16, gpus_per_task=len(topo["gpus"]))


@pytest.mark.parametrize("name", ["hgx-h100-2s", "pcie-l40s-2s", "h100-vm", "h200x4-vm"])
def test_fixture_single_node_gets_only_the_common_variables(name):
    topo = _node(name)
    plan = ep.plan(topo, _shape(topo, 1))
    assert plan.names() == ["PYTORCH_CUDA_ALLOC_CONF", "OMP_NUM_THREADS"]
    assert plan.get("OMP_NUM_THREADS").value == str(max(1, 16 // len(topo["gpus"])))
    assert any(s.name == "CUDA_DEVICE_ORDER" for s in plan.skipped)  # identical GPUs: nothing to reorder


def test_cuda_device_order_only_where_cuda_and_pci_orders_differ():
    topo = _node("mixed-a100-h100")  # A100 on the lower PCI bus, H100 above it
    assert [g["name"] for g in topo["gpus"]] == ["NVIDIA A100 80GB PCIe", "NVIDIA H100 PCIe"]
    assert ep.cuda_default_order(topo["gpus"]) == [1, 0]  # compute capability first: the H100 is CUDA device 0
    plan = ep.plan(topo, _shape(topo, 1))
    var = plan.get("CUDA_DEVICE_ORDER")
    assert var.value == "PCI_BUS_ID" and "[1, 0]" in var.reason and "docs.nvidia.com/cuda" in var.reason
    same = copy.deepcopy(topo)
    for g in same["gpus"]:
        g.update(name="NVIDIA H100 PCIe", arch="hopper")
    assert ep.cuda_default_order(same["gpus"]) == [0, 1]
    assert ep.plan(same, _shape(same, 1)).get("CUDA_DEVICE_ORDER") is None
    unknown = copy.deepcopy(topo)
    unknown["gpus"][0]["arch"] = None  # a model gpuperf cannot place: the orders may differ, so set it
    assert ep.cuda_default_order(unknown["gpus"]) is None
    assert ep.plan(unknown, _shape(unknown, 1)).get("CUDA_DEVICE_ORDER") is not None


@pytest.mark.parametrize("name", ["hgx-h100-2s", "pcie-l40s-2s", "h100-vm", "h200x4-vm"])
def test_fixture_multi_node_never_forces_workload_variables(name):
    topo = _node(name)
    plan = ep.plan(topo, _shape(topo, 4))
    for n in NEVER:
        assert plan.get(n) is None
    for v in plan.vars:
        assert v.reason and v.rule, v


def test_fixture_hgx_multi_node():
    topo = _node("hgx-h100-2s")
    plan = ep.plan(topo, _shape(topo, 4))
    ib = [n["name"] for n in topo["nics"] if n["kind"] == "ib" and n["state"] == "ACTIVE"]
    assert len(ib) == 8
    hca = plan.get("NCCL_IB_HCA").value.lstrip("=").split(",")
    assert sorted(h.split(":")[0] for h in hca) == sorted(ib)
    for gpu, entry in enumerate(hca):  # rail i is the NIC behind GPU i's PCIe switch
        assert ep._same_switch(topo, gpu, entry.split(":")[0])
    assert plan.get("NCCL_NET_GDR_LEVEL").value == "PXB"
    assert plan.get("NCCL_IB_GID_INDEX") is None
    assert plan.get("NCCL_SOCKET_IFNAME").value == "=eno1np0"  # the management port holds the node address
    assert not any("ACS" in n for n in plan.notes)


def test_fixture_pcie_l40s_multi_node():
    topo = _node("pcie-l40s-2s")
    plan = ep.plan(topo, _shape(topo, 2))
    roce = [n for n in topo["nics"] if n["kind"] == "roce" and n["state"] == "ACTIVE"]
    assert len(roce) == 1
    assert plan.get("NCCL_IB_HCA").value == f"={roce[0]['name']}:{roce[0]['port'] or 1}"
    gid = plan.get("NCCL_IB_GID_INDEX")
    assert gid is not None and gid.value == str(roce[0]["gid_index_rocev2"])
    assert any("PCIe-only" in n for n in plan.notes)
    assert not [v for v in plan.vars if v.name.startswith("NCCL_P2P")]
    assert plan.get("NCCL_SOCKET_IFNAME").value == "=eno1"
    assert plan.get("NCCL_NET_GDR_LEVEL") is None  # nvidia_peermem not loaded there


@pytest.mark.parametrize("name", ["h100-vm", "h200x4-vm"])
def test_fixture_vms_multi_node_have_no_ib(name):
    topo = _node(name)
    plan = ep.plan(topo, _shape(topo, 2))
    assert plan.get("NCCL_IB_HCA") is None and plan.get("NCCL_NET_GDR_LEVEL") is None
    assert any(s.name == "NCCL_IB_HCA" for s in plan.skipped)


# --- the hook steps: prolog cache -> TaskProlog exports ---------------------------------------------------

class _Cfg:
    """A config as the hooks see it (attribute sections), built from the real defaults."""

    def __init__(self, run_dir: str, **env):
        from gpuperf.files import config

        self._c = config.defaults()
        self._c.data["general"]["run_dir"] = run_dir
        self._c.data["env"].update(env)

    def __getattr__(self, name):
        return getattr(self._c, name)


def _ctx(**kw):
    from gpuperf.hookbase import jobctx

    base = dict(hook="prolog", job_id=42, uid=os.geteuid(), user="u", gpus=[0, 1], node="gpu01",
                nodelist="gpu[01-02]")
    base.update(kw)
    return jobctx.JobContext(**base)


def test_prolog_caches_plan_and_taskprolog_exports_it(tmp_path, capsys, monkeypatch):
    from gpuperf.hookbase.hook import HookState

    cfg = _Cfg(str(tmp_path))
    monkeypatch.setattr(envplan, "load_topology", lambda cfg, root=None: hgx())
    monkeypatch.setattr(envplan, "resolve_addrs", lambda names, timeout_s=1.0: ("10.1.0.5",))
    state = HookState()
    envplan.step(_ctx(), cfg, state)
    cache = tmp_path / "jobs" / "42" / "env.json"
    assert oct(cache.stat().st_mode & 0o777) == "0o600"
    assert state.data["env"]["disabled"] is None
    for k in list(os.environ):
        if k.startswith(("NCCL_", "OMP_", "CUDA_", "PYTORCH_", "GPUPERF")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "=ib0")  # the user's own choice
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    tstate = HookState()
    envtask.step(_ctx(hook="taskprolog", step_id="0"), cfg, tstate)
    lines = capsys.readouterr().out.splitlines()
    exported = dict(line[len("export "):].split("=", 1) for line in lines)
    assert exported["NCCL_IB_HCA"].startswith("=mlx5_7:1,")
    assert exported["OMP_NUM_THREADS"] == "3"
    assert "NCCL_SOCKET_IFNAME" not in exported
    assert not any(line.startswith("print") for line in lines)  # notice is off by default
    assert tstate.data["env"]["user_kept"] == ["NCCL_SOCKET_IFNAME"]
    step_rec = json.loads((tmp_path / "jobs" / "42" / "env" / "step-0.json").read_text())
    assert step_rec["user_kept"] == ["NCCL_SOCKET_IFNAME"] and step_rec["step"] == "0"


def test_taskprolog_leaves_omp_threads_to_the_affinity_plugin(tmp_path, capsys, monkeypatch):
    """The SPANK plugin's task_init runs before the TaskProlog in 22.05 and set the rank's exact count."""
    from gpuperf.hookbase.hook import HookState

    cfg = _Cfg(str(tmp_path))
    monkeypatch.setattr(envplan, "load_topology", lambda cfg, root=None: hgx())
    monkeypatch.setattr(envplan, "resolve_addrs", lambda names, timeout_s=1.0: ("10.1.0.5",))
    envplan.step(_ctx(), cfg, HookState())
    for k in list(os.environ):
        if k.startswith(("NCCL_", "OMP_", "CUDA_", "PYTORCH_", "GPUPERF")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "6")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("OMP_NUM_THREADS", "5")  # what the plugin set, and marked
    monkeypatch.setenv("GPUPERF_AFFINITY_OMP", "5 {0:5}")
    monkeypatch.setenv("GPUPERF_OMP", "5 {0:5}")
    envtask.step(_ctx(hook="taskprolog", step_id="0"), cfg, HookState())
    exported = dict(l[len("export "):].split("=", 1) for l in capsys.readouterr().out.splitlines())
    assert "OMP_NUM_THREADS" not in exported and "PYTORCH_CUDA_ALLOC_CONF" in exported
    # without the plugin's mark, the same task gets gpuperf's per-task value
    monkeypatch.delenv("GPUPERF_AFFINITY_OMP")
    monkeypatch.delenv("GPUPERF_OMP")
    monkeypatch.delenv("OMP_NUM_THREADS")
    envtask.step(_ctx(hook="taskprolog", step_id="1"), cfg, HookState())
    exported = dict(l[len("export "):].split("=", 1) for l in capsys.readouterr().out.splitlines())
    assert exported["OMP_NUM_THREADS"] == "3"


@pytest.mark.parametrize("case", ["gpuperf_off", "config_error", "disabled", "no_cache"])
def test_taskprolog_exports_nothing(case, tmp_path, capsys, monkeypatch):
    from gpuperf.hookbase.hook import HookState

    cfg = _Cfg(str(tmp_path), enabled=case != "disabled")
    monkeypatch.setattr(envplan, "load_topology", lambda cfg, root=None: hgx())
    if case != "no_cache":
        envplan.step(_ctx(), cfg, HookState())
    ctx = _ctx(hook="taskprolog")
    if case == "gpuperf_off":
        ctx.env_gpuperf = "off"
    elif case == "config_error":
        cfg._c.degraded, cfg._c.error = True, "config error in c.toml: key 'env.rules' ..."
    state = HookState()
    envtask.step(ctx, cfg, state)
    assert capsys.readouterr().out == ""
    assert state.data["env"]["exported"] == []


def test_step_turned_off_takes_back_only_inherited_injections(tmp_path, capsys, monkeypatch):
    from gpuperf.hookbase.hook import HookState

    cfg = _Cfg(str(tmp_path))
    for k in list(os.environ):
        if k.startswith(("NCCL_", "OMP_", "CUDA_", "PYTORCH_", "GPUPERF")):
            monkeypatch.delenv(k)
    exported = [("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("OMP_NUM_THREADS", "8")]
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # changed by the batch script after injection: the user's
    monkeypatch.setenv(ep.MARKER, ep.marker(exported))
    state = HookState()
    envtask.step(_ctx(hook="taskprolog", env_gpuperf="off"), cfg, state)
    assert capsys.readouterr().out.splitlines() == ["unset CUDA_DEVICE_ORDER", f"unset {ep.MARKER}"]
    assert state.data["env"]["unset"] == ["CUDA_DEVICE_ORDER"]


def test_prolog_with_broken_config_caches_a_disabled_plan(tmp_path, capsys):
    from gpuperf.hookbase.hook import HookState

    cfg = _Cfg(str(tmp_path))
    cfg._c.degraded, cfg._c.error = True, "env rule 'x' (rules[0]): sets NCCL_ALGO"
    envplan.step(_ctx(), cfg, HookState())
    envtask.step(_ctx(hook="taskprolog"), cfg, HookState())
    assert capsys.readouterr().out == ""
    cache = envtask.read_cache(cfg, 42)
    assert cache["vars"] == [] and "NCCL_ALGO" in cache["disabled"]


def test_notice_is_one_print_line(tmp_path, capsys, monkeypatch):
    from gpuperf.hookbase.hook import HookState

    cfg = _Cfg(str(tmp_path), notice=True)
    monkeypatch.setattr(envplan, "load_topology", lambda cfg, root=None: hgx())
    envplan.step(_ctx(nodelist="gpu01"), cfg, HookState())
    envtask.step(_ctx(hook="taskprolog"), cfg, HookState())
    lines = capsys.readouterr().out.splitlines()
    prints = [l for l in lines if l.startswith("print ")]
    assert len(prints) == 1 and "PYTORCH_CUDA_ALLOC_CONF" in prints[0]
    assert lines[-2].startswith(f"export {ep.MARKER}=")


def test_exports_for_computes_without_a_cache(tmp_path, monkeypatch):
    cfg = _Cfg(str(tmp_path))
    monkeypatch.setattr(envplan, "load_topology", lambda cfg, root=None: hgx())
    env = {"SLURM_CPUS_PER_TASK": "4", "CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "2"}
    pairs = dict(envtask.exports_for(_ctx(job_id=None, gpus=[0], nodelist=None), cfg, env))
    assert pairs["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "OMP_NUM_THREADS" not in pairs  # the caller's own value wins
    assert ep.MARKER in pairs


# --- gpuperf env ----------------------------------------------------------------------------------------

def _gpuperf(argv, capsys, monkeypatch, tmp_path, config_text=""):
    from gpuperf import cli

    cfg = tmp_path / "c.toml"
    cfg.write_text(config_text)
    monkeypatch.setenv("GPUPERF_CONFIG", str(cfg))
    for k in list(os.environ):
        if k.startswith(("NCCL_", "OMP_", "CUDA_", "PYTORCH_", "GPUPERF_ENV", "SLURM_")):
            monkeypatch.delenv(k)
    rc = cli.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_gpuperf_env_json_and_explain_on_a_recorded_node(capsys, monkeypatch, tmp_path):
    root = NODES / "hgx-h100-2s"
    if not (root / "sys").is_dir():
        pytest.skip("hgx-h100-2s fixture not recorded yet")
    rc, out, _ = _gpuperf(["env", "--json", "--root", str(root), "--nodes", "2", "--gpus", "4",
                           "--cpus-per-task", "16"], capsys, monkeypatch, tmp_path)
    assert rc == 0
    data = json.loads(out)
    exports = dict(data["exports"])
    assert exports["NCCL_IB_HCA"].startswith("=mlx5_") and exports["OMP_NUM_THREADS"] == "4"
    assert data["shape"]["gpus"] == [0, 1, 2, 3] and data["shape"]["nodes"] == 2
    assert not any(n.startswith("GPUPERF_") for n in exports)
    rc, out, _ = _gpuperf(["env", "--explain", "--root", str(root)], capsys, monkeypatch, tmp_path)
    lines = out.splitlines()
    assert rc == 0 and "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in lines
    reason = lines[lines.index("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") - 1]
    assert reason.startswith("# ") and "[default:pytorch_alloc]" in reason and "alloc_fragmentation" in reason
    assert any(l.startswith("# not set: CUDA_DEVICE_ORDER: ") for l in lines)  # eight identical H100s
    assert any(l.startswith("# not set: NCCL_SOCKET_IFNAME, NCCL_IB_*: single-node") for l in lines)


def test_gpuperf_env_bad_policy_is_one_line_and_exit_2(capsys, monkeypatch, tmp_path):
    rc, out, err = _gpuperf(["env"], capsys, monkeypatch, tmp_path,
                            '[env]\n[[env.rules]]\nname = "p2p"\nset = { NCCL_P2P_LEVEL = "NVL" }\n')
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "'p2p'" in err and "force = true" in err


def test_report_fills_per_task_values_and_ignores_planted_links(tmp_path, capsys, monkeypatch):
    from gpuperf.hookbase.hook import HookState

    cfg = _Cfg(str(tmp_path))
    monkeypatch.setattr(envplan, "load_topology", lambda cfg, root=None: hgx())
    envplan.step(_ctx(nodelist="gpu01"), cfg, HookState())
    for k in list(os.environ):
        if k.startswith(("NCCL_", "OMP_", "CUDA_", "PYTORCH_", "GPUPERF")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "8")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("NCCL_ALGO", "Tree")  # the user's forced choice: kept, and named in the report
    envtask.step(_ctx(hook="taskprolog", step_id="batch"), cfg, HookState())
    capsys.readouterr()
    job_dir = tmp_path / "jobs" / "42"
    (job_dir / "env" / "step-9.json").symlink_to(job_dir / "env.json")
    rep = env_report.report(job_dir)
    vars_ = {v["name"]: v for v in rep["vars"]}
    assert vars_["OMP_NUM_THREADS"]["value"] == "4" and vars_["OMP_NUM_THREADS"]["reason"]
    assert list(rep["steps"]) == ["batch"]
    assert rep["steps"]["batch"]["user_forced"] == {"NCCL_ALGO": "Tree"}
    assert env_report.report(tmp_path / "jobs" / "43") is None
