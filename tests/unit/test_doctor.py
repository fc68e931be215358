"""``gpuperf doctor``'s pure parts: parsers of Slurm's output and the checks over planted facts
(the faults the real-cluster test cannot plant: PrologFlags without Alloc, a skewed clock)."""

from __future__ import annotations

from gpuperf.commands import doctor

GOOD = {
    "node": True, "controller": True, "node_name": "n1", "config_source": "/etc/gpuperf/config.toml",
    "slurm": {"Prolog": "/opt/gpuperf/bin/gpuperf-prolog", "Epilog": "/opt/gpuperf/bin/gpuperf-epilog",
              "TaskProlog": "/opt/gpuperf/bin/gpuperf-taskprolog",
              "EpilogSlurmctld": "/opt/gpuperf/bin/gpuperf-epilog-slurmctld", "PrologFlags": "Alloc,Contain"},
    "executable": {f"/opt/gpuperf/bin/gpuperf-{h}": True for h in ("prolog", "epilog", "taskprolog", "epilog-slurmctld")},
    "plugstack_path": "/etc/slurm/plugstack.conf",
    "plugstack_lines": ["optional /opt/gpuperf/lib/gpuperf_spank.so run_dir=/run/gpuperf"],
    "spank_exists": {"/opt/gpuperf/lib/gpuperf_spank.so": True}, "srun_has_option": True,
    "daemon": {"pid": 7, "backend": "nvml", "gpus": 8}, "gres_gpus": 8,
    "collector": "tcp://ctl:9403", "sacctmgr": (1, " Nothing modified\n"),
    "modes": {"/var/lib/gpuperf": (0o700, True, "private")}, "skew_s": 0.3,
}


def _codes(facts, status="fail"):
    return sorted({x.code for x in doctor.diagnose(facts) if x.status == status})


def test_a_good_install_has_only_ok_findings_and_exit_0():
    found = doctor.diagnose(GOOD)
    assert {x.status for x in found} == {"ok"}
    assert doctor.exit_code(found) == 0 and "installation fine" in doctor.render(found)


def test_prolog_flags_without_alloc_fails_with_the_line_to_add():
    bad = dict(GOOD, slurm=dict(GOOD["slurm"], PrologFlags="Contain"))
    f = [x for x in doctor.diagnose(bad) if x.code == "prolog_flags"][0]
    assert f.status == "fail" and "PrologFlags=Alloc" in f.fix
    assert doctor.exit_code(doctor.diagnose(bad)) == 1


def test_clock_skew_warns_then_fails():
    assert _codes(dict(GOOD, skew_s=5.0), "warn") == ["clock"]
    assert _codes(dict(GOOD, skew_s=-120.0)) == ["clock"]


def test_unset_hook_names_the_setting_and_the_gpuperf_path():
    bad = dict(GOOD, slurm=dict(GOOD["slurm"], EpilogSlurmctld="(null)"))
    f = [x for x in doctor.diagnose(bad) if x.status == "fail"]
    assert [x.code for x in f] == ["hooks"] and "EpilogSlurmctld=/opt/gpuperf/bin/gpuperf-epilog-slurmctld" in f[0].fix
    # a node that is not the controller does not need EpilogSlurmctld
    assert _codes(dict(bad, controller=False)) == []


def test_no_slurm_config_is_could_not_check():
    found = doctor.diagnose(dict(GOOD, slurm=None, slurm_error="Unable to contact slurm controller"))
    assert doctor.exit_code(found) == 2


def test_parsers_read_slurm_output():
    assert doctor.parse_gres_gpus("NodeName=n1 Arch=x86_64\n   Gres=gpu:h100:8(S:0-1)\n") == 8
    assert doctor.parse_gres_gpus("Gres=gpu:a:2,gpu:b:2,shard:8") == 4
    assert doctor.parse_gres_gpus("Gres=(null)") is None
    assert doctor.parse_sdiag_time("*****\nsdiag output at Mon Nov 23 03:57:07 2026 (1795406227)\n") == 1795406227.0
    assert doctor.parse_key_values("PrologFlags             = Alloc,Contain\nConfiguration data as of x\n") == \
        {"PrologFlags": "Alloc,Contain"}
    assert doctor.parse_key_values("SlurmctldHost[0]        = ctl(10.0.0.1)")["SlurmctldHost[0]"] == "ctl(10.0.0.1)"
