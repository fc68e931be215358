"""``gpuperf doctor``'s pure parts: parsers of Slurm's output and the checks over planted facts (every
boundary of each check; tests/integration/test_doctor_slurm.py plants the same faults on the real cluster)."""

from __future__ import annotations

from gpuperf.commands import doctor, doctor_checks

GOOD = {
    "node": True, "controller": True, "node_name": "n1", "config_source": "/etc/gpuperf/config.toml",
    "slurm": {"Prolog": "/opt/gpuperf/bin/gpuperf-prolog", "Epilog": "/opt/gpuperf/bin/gpuperf-epilog",
              "TaskProlog": "/opt/gpuperf/bin/gpuperf-taskprolog",
              "EpilogSlurmctld": "/opt/gpuperf/bin/gpuperf-epilog-slurmctld", "PrologFlags": "Alloc,Contain",
              "PrologEpilogTimeout": "120", "AccountingStorageType": "accounting_storage/slurmdbd"},
    "executable": {f"/opt/gpuperf/bin/gpuperf-{h}": True for h in ("prolog", "epilog", "taskprolog", "epilog-slurmctld")},
    "plugstack_path": "/etc/slurm/plugstack.conf",
    "plugstack_lines": ["optional /opt/gpuperf/lib/gpuperf_spank.so run_dir=/run/gpuperf"],
    "spank_exists": {"/opt/gpuperf/lib/gpuperf_spank.so": True}, "srun_has_option": True,
    "daemon": {"pid": 7, "backend": "nvml", "gpus": 8}, "gres_gpus": 8, "node_known": True,
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
    bad = dict(GOOD, slurm=dict(GOOD["slurm"], PrologFlags="Serial"))  # not Contain: that sets Alloc
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


def test_a_python_node_hook_warns_that_the_compiled_client_is_missing(tmp_path):
    from gpuperf.commands import doctor as doctor_cmd

    script, elf = tmp_path / "gpuperf-prolog", tmp_path / "elf"
    script.write_text("#!/opt/gpuperf/venv/bin/python3\n")
    elf.write_bytes(b"\x7fELF\x02\x01\x01")
    assert (doctor_cmd._is_elf(str(script)), doctor_cmd._is_elf(str(elf)), doctor_cmd._is_elf("/nonexistent")) == \
        (False, True, False)
    prolog = GOOD["slurm"]["Prolog"]
    slow = _finding(dict(GOOD, compiled={prolog: False}), "hooks")
    assert slow.status == "warn" and "not the compiled client" in slow.detail and "build-hook.sh" in slow.fix
    assert _finding(dict(GOOD, compiled={prolog: True}), "hooks").status == "ok"
    assert _finding(GOOD, "hooks").status == "ok"        # not known: nothing said


def test_prolog_epilog_timeout_unset_is_slurms_no_limit():
    unset = _finding(dict(GOOD, slurm=dict(GOOD["slurm"], PrologEpilogTimeout="65534")), "prolog_timeout")
    assert unset.status == "warn" and "unset" in unset.detail
    assert _finding(GOOD, "prolog_timeout").status == "ok"


# PrologFlags as Slurm resolves it (read_config.c prolog_str2flags; slurm.conf(5)): Contain sets Alloc, X11
# sets Contain and Alloc; Slurm's default is no flag at all
def test_prolog_flags_contain_or_x11_alone_set_alloc_as_slurm_does():
    def judged(value):
        return _finding(dict(GOOD, slurm=dict(GOOD["slurm"], PrologFlags=value)), "prolog_flags")

    for value in ("Contain", "contain", "X11", "Serial,Contain"):
        ok = judged(value)
        assert ok.status == "ok" and ok.detail == f"PrologFlags={value} (which sets Alloc)", value
    assert judged("Alloc").detail == "PrologFlags=Alloc"
    for value in ("NoHold", "Serial", "DeferBatch"):  # NoHold wants Alloc set too, it does not set it
        assert judged(value).status == "fail" and f"PrologFlags={value} lacks Alloc" in judged(value).detail
    assert doctor_checks.prolog_flags("X11") == {"x11", "contain", "alloc"}
    assert doctor_checks.prolog_flags("(null)") == doctor_checks.prolog_flags("") == set()


# plugstack.conf as spank(7) reads it ----------------------------------------------------------------
def test_plugstack_include_lines_are_followed_relative_to_the_including_file(tmp_path):
    d = tmp_path / "plugstack.conf.d"
    (d / "nested").mkdir(parents=True)
    (tmp_path / "plugstack.conf").write_text("optional other.so\ninclude plugstack.conf.d/*.conf   # site plugins\n")
    (d / "20-nest.conf").write_text("include nested/*.conf\n")  # relative to plugstack.conf.d, not the top file
    (d / "nested" / "gp.conf").write_text("optional /opt/gpuperf/lib/gpuperf_spank.so run_dir=/run/gpuperf\n")
    (d / "10-first.conf").write_text("required first.so\n")
    (d / "README").write_text("required not-matched.so\n")
    lines = doctor.read_plugstack(str(tmp_path / "plugstack.conf"))
    assert lines == ["optional other.so", "required first.so",
                     "optional /opt/gpuperf/lib/gpuperf_spank.so run_dir=/run/gpuperf"]
    found = _finding(dict(GOOD, plugstack_lines=lines), "plugstack")
    assert found.status == "ok" and "/opt/gpuperf/lib/gpuperf_spank.so named in" in found.detail
    # before: one level of includes, and an include line with a comment was not one: the plugin read as unnamed
    assert _finding(dict(GOOD, plugstack_lines=[ln for ln in lines if "gpuperf" not in ln]), "plugstack").status == "warn"


def test_plugstack_includes_are_bounded_absolute_globs_work_and_missing_files_read_empty(tmp_path):
    loop = tmp_path / "loop.conf"
    loop.write_text(f"optional /x/gpuperf_spank.so\ninclude {loop}\n")
    assert doctor.read_plugstack(str(loop)) == ["optional /x/gpuperf_spank.so"] * (doctor.MAX_INCLUDE_DEPTH + 1)
    (tmp_path / "top.conf").write_text(f"include {tmp_path}/none-*.conf\ninclude\n")
    assert doctor.read_plugstack(str(tmp_path / "top.conf")) == []
    assert doctor.read_plugstack(str(tmp_path / "absent.conf")) == []  # Slurm: a missing plugstack.conf is empty


def test_plugstack_lines_are_read_as_spank_reads_them():
    lines = ["# optional /opt/gpuperf/lib/gpuperf_spank.so", "Optional /a/gpuperf_spank.so",  # keyword: lowercase
             "optional /b/other.so peer=gpuperf_spank.so", "required  gpuperf_spank.so  run_dir=/run/gpuperf # here",
             "optional /c/gpuperf_spank.so.bak"]
    assert doctor_checks.spank_plugin_paths(lines) == ["gpuperf_spank.so"]
    missing = _finding(dict(GOOD, plugstack_lines=lines, spank_exists={"gpuperf_spank.so": False}), "plugstack")
    assert missing.status == "fail" and "names gpuperf_spank.so, which does not exist" in missing.detail


def test_plugin_dir_unset_is_slurms_compiled_in_directory():
    for unset in ({"PluginDir": "(null)"}, {}):
        found = doctor.spank_candidates("gpuperf_spank.so", unset)
        assert found == [f"{d}/gpuperf_spank.so" for d in doctor.DEFAULT_PLUGIN_DIRS]
        assert found[0] == "/usr/lib/x86_64-linux-gnu/slurm-wlm/gpuperf_spank.so"  # Debian's, the test cluster's
    assert doctor.spank_candidates("gpuperf_spank.so", {"PluginDir": "/opt/slurm/lib/slurm"}) == \
        ["/opt/slurm/lib/slurm/gpuperf_spank.so"]


# the node's GPUs: Slurm's default is no Gres ---------------------------------------------------------
def test_a_node_without_gpu_gres_is_judged_against_what_the_daemon_sees():
    def judged(gres, seen, known=True):
        return [x for x in doctor.diagnose(dict(GOOD, gres_gpus=gres, node_known=known,
                                                daemon=dict(GOOD["daemon"], gpus=seen))) if x.code.startswith("daemon")]

    cpu_node = judged(None, 0)
    assert [x.status for x in cpu_node] == ["ok"] and "(gres.conf" not in cpu_node[0].detail
    [unset] = judged(None, 8)
    assert unset.status == "warn" and unset.code == "daemon_gpus" and "no GPUs on n1 (Gres unset)" in unset.detail
    assert "Gres=gpu:8" in unset.fix and doctor.exit_code(doctor.diagnose(dict(GOOD, gres_gpus=None))) == 0
    assert [x.status for x in judged(None, 8, known=False)] == ["ok"]  # scontrol does not know the node: no claim
    [explicit] = judged(8, 8)
    assert explicit.status == "ok" and "(gres.conf: 8)" in explicit.detail
    [short] = judged(8, 4)
    assert short.status == "fail" and "configures 8 GPUs on n1" in short.detail and "sees 4" in short.detail
    assert doctor.parse_gres_gpus("NodeName=n1 Arch=x86_64\n   Gres=(null)\n") is None


# the controller: SlurmctldHost / SlurmctldAddr, and controller.address -----------------------------------
def _show_config(text):
    return doctor.parse_key_values(text)


def test_slurmctld_host_and_addr_are_parsed_as_slurm_conf_defines_them():
    from gpuperf.access.slurm import SlurmError, ctld_address, ctld_hosts

    named = _show_config("SlurmctldAddr           = (null)\nSlurmctldHost[0]        = ctl\n")
    assert ctld_hosts(named) == [("ctl", "ctl")] and ctld_address(named) == "ctl"  # no (addr): the name
    with_addr = _show_config("SlurmctldAddr = (null)\nSlurmctldHost[0] = ctl(10.0.0.1)\nSlurmctldHost[1] = bak(10.0.0.2)\n")
    assert ctld_hosts(with_addr) == [("ctl", "10.0.0.1"), ("bak", "10.0.0.2")] and ctld_address(with_addr) == "10.0.0.1"
    vip = dict(with_addr, SlurmctldAddr="ctl-vip")  # explicit: one address over primary and backups
    assert ctld_address(vip) == "ctl-vip"
    many = {f"SlurmctldHost[{i}]": f"h{i}" for i in (10, 2, 0, 1)}
    assert [n for n, _ in ctld_hosts(many)] == ["h0", "h1", "h2", "h10"]
    old = {"ControlMachine": "ctl", "ControlAddr": "ctl-ib", "BackupController": "bak", "BackupAddr": "(null)"}
    assert ctld_hosts(old) == [("ctl", "ctl-ib"), ("bak", "bak")] and ctld_address(old) == "ctl-ib"
    try:
        ctld_address({"SlurmctldAddr": "(null)"})
        raise AssertionError("no controller named")
    except SlurmError as e:
        assert "no SlurmctldHost" in str(e)


def test_slurm_ctld_host_reads_scontrol(tmp_path):
    from gpuperf.access.slurm import Slurm

    scontrol = tmp_path / "scontrol"
    scontrol.write_text("#!/bin/sh\nprintf 'SlurmctldAddr           = (null)\\nSlurmctldHost[0]        = ctl(10.0.0.1)\\n'\n")
    scontrol.chmod(0o755)
    assert Slurm(str(tmp_path)).ctld_host() == "10.0.0.1"


def test_collector_endpoint_is_slurms_controller_unless_controller_address_is_set():
    from gpuperf.controller import transport
    from gpuperf.files import config

    sc = _show_config("SlurmctldAddr = (null)\nSlurmctldHost[0] = ctl(10.0.0.1)\n")
    cfg = config.defaults()
    assert cfg.controller.address == ""  # gpuperf's default: Slurm's controller
    assert transport.controller_endpoint(cfg, sc) == "tcp://10.0.0.1:9403"
    assert transport.controller_endpoint(cfg, dict(sc, SlurmctldAddr="vip")) == "tcp://vip:9403"
    cfg.data["controller"]["address"] = "collector.example:9500"
    assert transport.controller_endpoint(config.Config(cfg.data), sc) == "tcp://collector.example:9500"
    cfg.data["controller"]["address"] = "collector.example"
    assert transport.controller_endpoint(config.Config(cfg.data), sc) == "tcp://collector.example:9403"


def test_collector_finding_says_where_its_address_came_from():
    default = _finding(dict(GOOD, collector="tcp://10.0.0.1:9403", collector_default=True), "collector")
    assert default.status == "ok" and "(controller.address unset: Slurm's controller" in default.detail
    explicit = _finding(dict(GOOD, collector_default=False, collector_error="Connection refused"), "collector")
    assert explicit.status == "fail" and explicit.detail == "collector tcp://ctl:9403 unreachable: Connection refused"


def test_the_controller_says_how_long_its_store_keeps_node_series():
    kept = _finding(dict(GOOD, controller=True, series_keep_days=90.0), "store")
    assert kept.status == "ok" and kept.detail.startswith("node series kept 90 days (controller.series_keep_days)")
    assert "for ever" in _finding(dict(GOOD, controller=True, series_keep_days=0.0), "store").detail


def test_role_auto_is_controller_on_any_slurmctld_host_and_node_where_scontrol_knows_it():
    one = _show_config("SlurmctldHost[0] = ctl(10.0.0.1)\n")  # Slurm has no default: at least one is required
    assert doctor.roles("auto", one, {"ctl"}, node_known=False) == (True, False)
    assert doctor.roles("auto", one, {"n1"}, node_known=True) == (False, True)
    assert doctor.roles("auto", one, {"10.0.0.1"}, node_known=False) == (False, False)  # the name, not the address
    backups = _show_config("SlurmctldHost[0] = ctl\nSlurmctldHost[1] = bak1(10.0.0.2)\nSlurmctldHost[2] = bak2\n")
    for host in ("bak1", "bak2"):  # before: only SlurmctldHost[0] was a controller
        assert doctor.roles("auto", backups, {host, f"{host}.example"}, node_known=True) == (True, True)
    assert doctor.roles("auto", {"ControlMachine": "ctl", "BackupController": "bak"}, {"bak"}, False) == (True, False)
    assert doctor.roles("auto", None, {"ctl"}, node_known=True) == (False, True)  # scontrol did not answer
    assert doctor.roles("node", one, {"ctl"}, node_known=False) == (False, True)
    assert doctor.roles("controller", one, {"n1"}, node_known=True) == (True, False)
    assert doctor.roles("both", None, set(), node_known=False) == (True, True)


# sacctmgr: Slurm's default AccountingStorageType keeps no database -------------------------------------
def test_accounting_storage_unset_is_slurms_none_and_no_admin_comment_can_be_written():
    absent = {k: v for k, v in GOOD["slurm"].items() if k != "AccountingStorageType"}
    for sc in (absent, dict(absent, AccountingStorageType="(null)")):
        f = _finding(dict(GOOD, slurm=sc), "sacctmgr")
        assert f.status == "fail" and "not set (Slurm's default: accounting_storage/none)" in f.detail
        assert "AccountingStorageType=accounting_storage/slurmdbd" in f.fix
    none = _finding(dict(GOOD, slurm=dict(GOOD["slurm"], AccountingStorageType="accounting_storage/none")), "sacctmgr")
    assert none.status == "fail" and "AccountingStorageType=accounting_storage/none: no accounting database" in none.detail
    assert _finding(GOOD, "sacctmgr").status == "ok"  # explicit slurmdbd, and the test write reached it
    down = _finding(dict(GOOD, sacctmgr=(1, "sacctmgr: error: Problem talking to the database: Connection refused")),
                    "sacctmgr")
    assert down.status == "fail" and "cannot write AdminComment (rc 1)" in down.detail and "slurmdbd" in down.fix
    assert _codes(dict(GOOD, controller=False, slurm=dict(GOOD["slurm"], AccountingStorageType="(null)"))) == []


# gpuperf's own config: $GPUPERF_CONFIG, else /etc/gpuperf/config.toml ------------------------------------
def test_config_is_read_from_gpuperf_config_else_the_default_path(tmp_path, monkeypatch):
    from gpuperf.files import config

    assert config.DEFAULT_PATH == "/etc/gpuperf/config.toml" and config.ENV_VAR == "GPUPERF_CONFIG"
    monkeypatch.delenv("GPUPERF_CONFIG", raising=False)
    monkeypatch.setattr(config, "DEFAULT_PATH", str(tmp_path / "etc-config.toml"))  # stands in for /etc
    f = {}
    doctor.config_facts(f)
    assert f == {"config_source": f"{tmp_path}/etc-config.toml (absent: defaults)"}
    assert doctor_checks.check_config(f)[0].detail == f"{tmp_path}/etc-config.toml (absent: defaults) valid"
    explicit = tmp_path / "site.toml"
    explicit.write_text("[controller]\nport = 9500\n")
    monkeypatch.setenv("GPUPERF_CONFIG", str(explicit))
    f = {}
    assert doctor.config_facts(f).controller.port == 9500 and f == {"config_source": str(explicit)}
    explicit.write_text("[controller]\nportt = 9500\n")
    f = {}
    doctor.config_facts(f)
    bad = doctor_checks.check_config(f)[0]
    assert bad.status == "fail" and str(explicit) in bad.detail and "portt" in bad.detail
