"""The test cluster's layout and generated files (pure: no Slurm needed)."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

from gpuperf.files import config

try:
    from cluster import slurmconf as sc
except ImportError:  # tests/ became a package
    from tests.cluster import slurmconf as sc

# names in use: the default, the two-node fixture's, and one per engineer
NAMES = ["pytest", "pytest-2n", *(f"eng{i}" for i in range(1, 9)), *(f"eng{i}-2n" for i in range(1, 9))]


def _ports(l: sc.Layout) -> set[int]:
    return {l.ctld_port, l.slurmd_port, l.dbd_port, l.metrics_port, l.collector_port}


def test_instances_in_use_share_no_port_dir_job_id_or_subnet():
    layouts = [sc.make_layout(n, "host", nodes=2 if n.endswith("-2n") else 1) for n in NAMES]
    ports = [p for l in layouts for p in _ports(l)]
    assert len(ports) == len(set(ports))
    assert all(20000 <= p < 32768 for p in ports), "ports must stay below the ephemeral range"
    assert len({l.dir for l in layouts}) == len({l.cluster_name for l in layouts}) == len(layouts)
    # job ids never meet: cgroup v1 paths and gpuperf's run dirs are keyed by job id
    starts = sorted(l.first_job_id for l in layouts)
    assert all(b - a >= 1000 for a, b in zip(starts, starts[1:]))
    subnets = [l.subnet for l in layouts if l.subnet]
    assert len(subnets) == len(set(subnets)) == 9


def test_layout_is_a_function_of_the_name():
    assert sc.make_layout("eng3", "h") == sc.make_layout("eng3", "h")
    assert sc.make_layout("eng3", "h").ctld_port != sc.make_layout("eng4", "h").ctld_port


@pytest.mark.parametrize("bad", ["", "a/b", "../x", "a b", "x" * 33, "-lead"])
def test_bad_instance_names_are_refused(bad):
    with pytest.raises(ValueError, match="instance name"):
        sc.make_layout(bad, "h")


def test_single_node_uses_cgroups_on_loopback_and_multi_node_does_not():
    one = sc.slurm_conf(sc.make_layout("a", "h"))
    two_l = sc.make_layout("b", "h", nodes=2)
    two = sc.slurm_conf(two_l)
    assert "ProctrackType=proctrack/cgroup" in one and "NodeAddr=127.0.0.1" in one
    assert "ProctrackType=proctrack/linuxproc" in two and "cgroup" not in two
    for i, n in enumerate(two_l.nodes, 2):
        assert f"NodeName={n.name} NodeAddr={two_l.subnet}.{i} " in two
    assert f"SlurmctldHost=h({two_l.subnet}.1)" in two
    # no cgroup v1 controllers (a cgroup v2 container without systemd): no cgroup plugins either
    assert "cgroup" not in sc.slurm_conf(sc.make_layout("a", "h", cgroup_v1=False))


def test_gres_conf_names_each_nodes_devices():
    l = sc.make_layout("b", "h", nodes=2, gpus=4)
    text = sc.gres_conf(l)
    for n in l.nodes:
        assert f"NodeName={n.name} Name=gpu File={n.devdir}/nvidia[0-3]" in text
    assert f"File={sc.make_layout('c', 'h', gpus=1).nodes[0].devdir}/nvidia0\n" in sc.gres_conf(
        sc.make_layout("c", "h", gpus=1))


def test_default_gpuperf_config_passes_gpuperf_schema():
    l = sc.make_layout("eng5", "h")
    cfg = config.parse(sc.to_toml(sc.gpuperf_defaults(l)), "test")
    assert cfg.general.run_dir == str(l.run_dir)
    assert cfg.daemon.metrics_port == l.metrics_port
    assert cfg.controller.store == str(l.state_dir / "cluster.sqlite")


def test_to_toml_round_trips_tables_and_arrays_of_tables():
    data = {"env": {"enabled": True, "rules": [{"name": "A", "value": 'x "q"'}, {"name": "B", "value": "2"}]},
            "checks": {"disabled": ["a", "b"], "max_drained_share": 0.25, "thresholds": {"x": 1}}}
    assert tomllib.loads(sc.to_toml(data)) == data
    with pytest.raises(TypeError, match="cannot write"):
        sc.to_toml({"general": {"x": object()}})


def test_each_node_of_a_multi_node_instance_gets_its_own_dirs():
    l = sc.make_layout("b", "h", nodes=2)
    base = sc.gpuperf_defaults(l)
    n1 = sc.for_node(base, "bn1")
    assert n1["general"]["run_dir"] == f"{l.run_dir}/bn1"
    assert n1["daemon"]["socket_dir"] == f"{l.run_dir}/daemon/bn1"
    assert n1["general"]["log_file"] == base["general"]["log_file"]
    assert base["general"]["run_dir"] == str(l.run_dir), "for_node must not change its input"
    # keys absent from the file: the node's dirs derive from gpuperf's defaults
    bare = sc.for_node({"general": {"log_level": "debug"}}, "bn2")
    assert bare["general"]["run_dir"] == config.defaults().general.run_dir + "/bn2"


def _wrapper_config(l: sc.Layout, hook: str, env: dict[str, str], tmp_path: Path) -> str:
    """Run the generated wrapper with its exec replaced by printing the config it chose."""
    script = sc.hook_script(l, hook)
    exec_line = f'exec {sc.HOOK_BIN / sc.HOOKS[hook]} "$@"'
    assert script.rstrip().endswith(exec_line)
    f = tmp_path / hook
    f.write_text(script.replace(exec_line, 'echo "$GPUPERF_CONFIG $SLURM_CONF"'))
    return subprocess.run(["/bin/sh", str(f)], env=env, capture_output=True, text=True, check=True).stdout.split()


def test_hook_wrappers_choose_the_nodes_config(tmp_path):
    l = sc.make_layout("w", "h", nodes=2, root=tmp_path)
    node_conf = sc.node_gpuperf_conf(l, "wn2")
    node_conf.parent.mkdir(parents=True)
    node_conf.write_text("")
    assert _wrapper_config(l, "prolog", {"SLURMD_NODENAME": "wn2"}, tmp_path) == [str(node_conf), str(l.slurm_conf)]
    # no such node file, or the controller's hook: the instance's config
    assert _wrapper_config(l, "epilog", {"SLURMD_NODENAME": "wn1"}, tmp_path)[0] == str(l.gpuperf_conf)
    assert _wrapper_config(l, "epilog-slurmctld", {"SLURMD_NODENAME": "wn2"}, tmp_path)[0] == str(l.gpuperf_conf)
    one = sc.make_layout("v", "h", root=tmp_path)
    assert _wrapper_config(one, "taskprolog", {}, tmp_path)[0] == str(one.gpuperf_conf)


def test_prolog_epilog_timeout_is_the_snippets_and_above_every_watchdog_bound_with_its_margin():
    from gpuperf.hookbase import watchdog
    from gpuperf.commands.doctor_checks import TIMEOUT_MARGIN_S

    snippet = (Path(__file__).parents[2] / "packaging" / "slurm.conf.snippet").read_text()
    assert f"PrologEpilogTimeout={sc.PROLOG_EPILOG_TIMEOUT_S}\n" in snippet
    conf = sc.slurm_conf(sc.make_layout("eng1", "h"))
    assert f"\nPrologEpilogTimeout={sc.PROLOG_EPILOG_TIMEOUT_S}\n" in conf
    cfg = config.defaults()  # the test cluster's hooks run with the default bounds
    for hook in ("prolog", "epilog"):
        assert watchdog.bound_of(cfg, hook) + TIMEOUT_MARGIN_S <= sc.PROLOG_EPILOG_TIMEOUT_S


def test_real_gpus_give_one_gres_line_per_device_and_cgroup_v2_without_systemd():
    l = sc.make_layout("gpu", "h", gpus=4, cpus=16, cgroup_v1=False, cgroup_v2=True,
                       gpu_files=("/dev/nvidia0", "/dev/nvidia2"),
                       plugin_dir="/p/usr/lib/x86_64-linux-gnu/slurm-wlm", slurm_bin="/p/usr/bin")
    assert l.gpus == 2 and l.real_gpus and l.cgroup and l.cgroup_v2
    gres = sc.gres_conf(l).splitlines()
    # one line per device: a range would claim a /dev/nvidia1 this machine does not have
    assert gres[1:] == ["NodeName=gpun1 Name=gpu File=/dev/nvidia0", "NodeName=gpun1 Name=gpu File=/dev/nvidia2"]
    conf = sc.slurm_conf(l)
    assert "PluginDir=/p/usr/lib/x86_64-linux-gnu/slurm-wlm\n" in conf and "Gres=gpu:2 " in conf
    # slurmdbd loads its plugins (auth/munge, accounting_storage/mysql) from there too
    assert "PluginDir=/p/usr/lib/x86_64-linux-gnu/slurm-wlm\n" in sc.slurmdbd_conf(l)
    assert "ProctrackType=proctrack/cgroup" in conf and "TaskPlugin=task/cgroup,task/affinity" in conf
    assert "SocketsPerBoard=1 CoresPerSocket=16" in conf  # the real node's one NUMA node, not the fake two sockets
    cg = sc.cgroup_conf(l)
    assert "CgroupPlugin=cgroup/v2" in cg and "IgnoreSystemd=yes" in cg and "ConstrainDevices=yes" in cg
    assert sc.gpuperf_defaults(l)["general"]["slurm_bin_dir"] == "/p/usr/bin"
    with pytest.raises(ValueError, match="one node"):
        sc.make_layout("gpu", "h", nodes=2, gpu_files=("/dev/nvidia0",))


def test_fake_gpus_on_cgroup_v1_are_unchanged():
    l = sc.make_layout("eng1", "h")
    assert not l.real_gpus and not l.cgroup_v2 and l.cgroup
    assert "PluginDir" not in sc.slurm_conf(l) and "CgroupPlugin=cgroup/v1" in sc.cgroup_conf(l)
    assert sc.gres_conf(l).splitlines()[1].endswith("/dev/eng1n1/nvidia[0-3]")


def test_root_hooks_get_an_unpacked_slurms_libraries_and_the_taskprolog_does_not(tmp_path: Path) -> None:
    """Found on the GPU machine: the prolog could not drain there (sinfo: libslurmfull.so not found)."""
    l = sc.make_layout("libs", "h", root=tmp_path, slurm_bin="/p/usr/bin", lib_path="/p/usr/lib/x86_64-linux-gnu/slurm")
    for hook in ("prolog", "epilog", "epilog-slurmctld"):
        assert "LD_LIBRARY_PATH=/p/usr/lib/x86_64-linux-gnu/slurm; export LD_LIBRARY_PATH" in sc.hook_script(l, hook)
    assert "LD_LIBRARY_PATH" not in sc.hook_script(l, "taskprolog")
    assert "LD_LIBRARY_PATH" not in sc.hook_script(sc.make_layout("libs", "h", root=tmp_path), "prolog")
