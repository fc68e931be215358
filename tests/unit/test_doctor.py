"""``gpuperf doctor``'s pure parts: parsers of Slurm's output and the checks over planted facts (every
boundary of each check; tests/integration/test_doctor_slurm.py plants the same faults on the real cluster)."""

from __future__ import annotations

from gpuperf.commands import doctor

GOOD = {
    "node": True, "controller": True, "node_name": "n1", "config_source": "/etc/gpuperf/config.toml",
    "slurm": {"Prolog": "/opt/gpuperf/bin/gpuperf-prolog", "Epilog": "/opt/gpuperf/bin/gpuperf-epilog",
              "TaskProlog": "/opt/gpuperf/bin/gpuperf-taskprolog",
              "EpilogSlurmctld": "/opt/gpuperf/bin/gpuperf-epilog-slurmctld", "PrologFlags": "Alloc,Contain",
              "PrologEpilogTimeout": "120"},
    "executable": {f"/opt/gpuperf/bin/gpuperf-{h}": True for h in ("prolog", "epilog", "taskprolog", "epilog-slurmctld")},
    "plugstack_path": "/etc/slurm/plugstack.conf",
    "plugstack_lines": ["optional /opt/gpuperf/lib/gpuperf_spank.so run_dir=/run/gpuperf"],
    "spank_exists": {"/opt/gpuperf/lib/gpuperf_spank.so": True}, "srun_has_option": True,
    "daemon": {"pid": 7, "backend": "nvml", "gpus": 8}, "gres_gpus": 8,
    "collector": "tcp://ctl:9403", "sacctmgr": (1, " Nothing modified\n"),
    "modes": {"/var/lib/gpuperf": (0o700, True, "private", "root"),
              "/var/lib/gpuperf/daemon.sqlite": (0o600, False, "private", "root")},
    "state_group": "", "skew_s": 0.3, "watchdog_s": 60.0,
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


def _finding(facts, code):
    found = [x for x in doctor.diagnose(facts) if x.code == code]
    assert len(found) == 1, found
    return found[0]


def test_prolog_epilog_timeout_must_be_above_the_watchdog_bound_with_the_snippets_margin():
    def judged(timeout, bound=60.0):
        return _finding(dict(GOOD, watchdog_s=bound, slurm=dict(GOOD["slurm"], PrologEpilogTimeout=timeout)),
                        "prolog_timeout")

    unset = judged("65534")  # what 22.05's scontrol shows when slurm.conf does not set it
    assert unset.status == "warn" and "unset" in unset.detail and "PrologEpilogTimeout=120" in unset.fix
    assert judged("89").status == "warn" and "30 s" in judged("89").detail
    assert judged("90").status == "ok"
    assert judged("60").status == "fail" and "drain" in judged("60").detail  # Slurm kills gpuperf's hook first
    assert "PrologEpilogTimeout=330" in judged("200", bound=300.0).fix
    assert _codes(dict(GOOD, node=False, slurm=dict(GOOD["slurm"], PrologEpilogTimeout="10"))) == []


def _with_modes(group, dir_mode=0o750, file_mode=0o640, owner="gpuadmin", **extra):
    return dict(GOOD, state_group=group, modes={"/var/lib/gpuperf": (dir_mode, True, "private", owner),
                                                "/var/lib/gpuperf/daemon.sqlite": (file_mode, False, "private", owner)},
                **extra)


def test_stores_shared_with_the_named_group_pass_and_a_group_not_applied_warns():
    assert _finding(_with_modes("gpuadmin"), "modes").status == "ok"
    f = [x for x in doctor.diagnose(_with_modes("gpuadmin", 0o700, 0o600, "root")) if x.code == "modes"]
    assert [x.status for x in f] == ["warn", "warn"] and "gpuadmin cannot read it" in f[0].detail
    assert "chgrp gpuadmin /var/lib/gpuperf; chmod 0750" in f[0].fix and "chmod 0640" in f[1].fix
    assert doctor.exit_code(doctor.diagnose(_with_modes("gpuadmin", 0o700, 0o600, "root"))) == 0


def test_a_state_group_this_host_lacks_fails_and_world_access_fails_whatever_the_group():
    f = [x for x in doctor.diagnose(_with_modes("nosuch", 0o700, 0o600, "root", state_group_exists=False))
         if x.status == "fail"]
    assert [x.code for x in f] == ["modes"] and "'nosuch': no such group" in f[0].detail and "groupadd" in f[0].fix
    assert _codes(_with_modes("gpuadmin", 0o755, 0o644)) == ["modes"]


def test_group_access_without_state_group_warns():
    f = [x for x in doctor.diagnose(_with_modes("")) if x.code == "modes"]
    assert {x.status for x in f} == {"warn"} and "state_group is unset" in f[0].detail
    assert "chmod 0700 /var/lib/gpuperf" in f[0].fix


# every Slurm setting doctor reads, as scontrol prints it when slurm.conf leaves it out ("(null)",
# 65534) and when set: Slurm's default is what doctor must judge (issue 24)
def test_plugstack_path_is_slurms_default_beside_slurm_conf_when_unset():
    assert doctor.plugstack_path({"PlugStackConfig": "(null)", "SLURM_CONF": "/etc/slurm-x/slurm.conf"}) == \
        ("/etc/slurm-x/plugstack.conf", True)
    assert doctor.plugstack_path({"PlugStackConfig": "(null)"}) == ("/etc/slurm/plugstack.conf", True)
    assert doctor.plugstack_path({"PlugStackConfig": "/srv/spank.conf", "SLURM_CONF": "/etc/slurm/slurm.conf"}) == \
        ("/srv/spank.conf", False)


def test_a_relative_plugin_is_looked_for_in_each_plugin_dir():
    sc = {"PluginDir": "/usr/lib/slurm:/opt/site/slurm"}
    assert doctor.spank_candidates("gpuperf_spank.so", sc) == ["/usr/lib/slurm/gpuperf_spank.so",
                                                                "/opt/site/slurm/gpuperf_spank.so"]
    assert doctor.spank_candidates("/opt/gpuperf/lib/gpuperf_spank.so", sc) == ["/opt/gpuperf/lib/gpuperf_spank.so"]


def test_plugstack_finding_names_the_default_file_it_read():
    default = dict(GOOD, plugstack_path="/etc/slurm/plugstack.conf", plugstack_default=True)
    ok = _finding(default, "plugstack")
    assert ok.status == "ok" and "Slurm's default" in ok.detail
    missing = _finding(dict(default, plugstack_lines=[]), "plugstack")
    assert missing.status == "warn" and "/etc/slurm/plugstack.conf (PlugStackConfig unset" in missing.detail
    explicit = _finding(dict(GOOD, plugstack_lines=[], plugstack_default=False), "plugstack")
    assert explicit.status == "warn" and "unset" not in explicit.detail


def test_prolog_flags_unset_is_slurms_none_and_fails():
    unset = _finding(dict(GOOD, slurm=dict(GOOD["slurm"], PrologFlags="(null)")), "prolog_flags")
    assert unset.status == "fail" and "not set (Slurm's default: none)" in unset.detail
    assert _finding(GOOD, "prolog_flags").status == "ok"


def test_every_node_hook_unset_or_set():
    for key in ("Prolog", "Epilog", "TaskProlog"):
        unset = [x for x in doctor.diagnose(dict(GOOD, slurm=dict(GOOD["slurm"], **{key: "(null)"}))) if x.status == "fail"]
        assert [x.code for x in unset] == ["hooks"] and f"{key} is not set" in unset[0].detail
    assert _finding(GOOD, "hooks").status == "ok"


def test_prolog_epilog_timeout_unset_is_slurms_no_limit():
    unset = _finding(dict(GOOD, slurm=dict(GOOD["slurm"], PrologEpilogTimeout="65534")), "prolog_timeout")
    assert unset.status == "warn" and "unset" in unset.detail
    assert _finding(GOOD, "prolog_timeout").status == "ok"
