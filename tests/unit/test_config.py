"""The config file: defaults, validation errors naming key and line, and hooks never failing on it."""

import pytest

from gpuperf.files import config


def test_defaults_have_every_schema_key():
    cfg = config.defaults()
    for section, keys in config.SCHEMA.items():
        assert set(cfg.data[section]) == set(keys)
    assert cfg.daemon.interval_s == 1.0
    assert cfg.checks.max_drained_share == pytest.approx(0.10)


def test_values_override_defaults_and_ints_become_floats():
    cfg = config.parse('[daemon]\ninterval_s = 2\n[checks]\ndisabled = ["acs_enabled"]\n')
    assert cfg.daemon.interval_s == 2.0 and isinstance(cfg.daemon.interval_s, float)
    assert cfg.checks.disabled == ["acs_enabled"]
    assert cfg.checks.drain is True  # untouched default


@pytest.mark.parametrize(
    "text, key, line",
    [
        ("[checks]\nfoo = 1\n", "checks.foo", 2),
        ("[general]\nrun_dir = '/x'\n\n[daemon]\n\ninterval_s = 'fast'\n", "daemon.interval_s", 6),
        ("[daemon]\ninterval_s = -1\n", "daemon.interval_s", 2),
        ("[checks]\ndrain = 1\n", "checks.drain", 2),
        ("[checks]\nmax_drained_share = true\n", "checks.max_drained_share", 2),
        ("[affinity]\nmem_policy = 'interleave'\n", "affinity.mem_policy", 2),
        ("[checks]\ndisabled = ['a', 3]\n", "checks.disabled[1]", 2),
        ("[nosuch]\nx = 1\n", "nosuch", 1),
    ],
)
def test_errors_name_the_key_and_line(text, key, line):
    with pytest.raises(config.ConfigError) as ei:
        config.parse(text, "/etc/gpuperf/config.toml")
    e = ei.value
    assert e.key == key
    assert e.line == line
    assert key in str(e) and f"config.toml:{line}" in str(e)


def test_toml_syntax_error_has_line():
    with pytest.raises(config.ConfigError) as ei:
        config.parse("[daemon]\ninterval_s = = 1\n")
    assert ei.value.line == 2 and "not valid TOML" in str(ei.value)


def test_missing_file_means_defaults(tmp_path):
    cfg = config.load(str(tmp_path / "absent.toml"))
    assert not cfg.degraded and "absent" in cfg.source
    assert cfg.general.run_dir == "/run/gpuperf"


def test_load_or_defaults_marks_degraded_and_keeps_error(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[checks]\nbogus = true\n")
    cfg = config.load_or_defaults(str(p))
    assert cfg.degraded
    assert "checks.bogus" in cfg.error and ":2" in cfg.error
    assert cfg.checks.drain is True  # defaults are usable


def test_env_var_selects_file_and_sysfs_root(tmp_path, monkeypatch):
    p = tmp_path / "c.toml"
    p.write_text("[general]\nrun_dir = '/tmp/x'\n")
    monkeypatch.setenv("GPUPERF_CONFIG", str(p))
    monkeypatch.setenv("GPUPERF_SYSFS_ROOT", "/fixtures/node")
    cfg = config.load()
    assert cfg.general.run_dir == "/tmp/x"
    assert cfg.general.node_root == "/fixtures/node"


def test_defaults_are_not_shared_between_configs():
    a, b = config.defaults(), config.defaults()
    a.checks.disabled.append("x")
    assert b.checks.disabled == []


def test_packaged_example_config_is_the_schema_and_parses_to_defaults():
    """packaging/config.example.toml is generated from SCHEMA: a key added without regenerating it fails here."""
    import pathlib

    example = pathlib.Path(__file__).parents[2] / "packaging" / "config.example.toml"
    assert example.read_text() == config.example_toml(), "regenerate: python -c 'from gpuperf.files import config; print(config.example_toml(), end=\"\")'"
    assert config.parse(example.read_text()).to_dict() == config.defaults().to_dict()


def test_broken_file_keeps_its_valid_general_paths(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(f"[general]\nrun_dir = '{tmp_path}/run'\nlog_file = 7\n[checks]\ntypo = 1\n")
    cfg = config.load_or_defaults(str(p))
    assert cfg.degraded and "general.log_file" in cfg.error  # the first error is the one named
    assert cfg.general.run_dir == f"{tmp_path}/run"          # valid: kept
    assert cfg.general.log_file == "/var/log/gpuperf/gpuperf.log"  # invalid: default
    assert cfg.checks.drain is True
