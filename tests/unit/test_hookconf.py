"""gpuperf.hookbase.hookconf: the hooks get what config.load_or_defaults gives, from a cache only while it is the same."""

from __future__ import annotations

import os

import pytest

from gpuperf.files import config
from gpuperf.hookbase import hookconf


@pytest.fixture
def conf_file(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUPERF_SYSFS_ROOT", raising=False)
    p = tmp_path / "config.toml"
    p.write_text('[general]\nrun_dir = "/tmp/x/run"\n[daemon]\ninterval_s = 2\n[env]\nnotice = true\n')
    return p


def same(a: config.Config, b: config.Config) -> bool:
    return (a.to_dict(), a.source, a.degraded, a.error, config.digest(a)) == \
           (b.to_dict(), b.source, b.degraded, b.error, config.digest(b))


def test_cached_config_is_the_loaded_one(conf_file):
    first = hookconf.load_or_defaults(str(conf_file))
    assert os.path.exists(hookconf.cache_path(str(conf_file)))
    second = hookconf.load_or_defaults(str(conf_file))
    assert same(first, config.load_or_defaults(str(conf_file))) and same(second, first)
    assert second.daemon.interval_s == 2.0 and isinstance(second.daemon.interval_s, float)


def test_a_changed_file_is_loaded_again_even_at_the_same_size(conf_file):
    hookconf.load_or_defaults(str(conf_file))
    conf_file.write_text(conf_file.read_text().replace("interval_s = 2", "interval_s = 3"))
    assert hookconf.load_or_defaults(str(conf_file)).daemon.interval_s == 3.0


def test_the_environment_the_config_reads_is_part_of_the_key(conf_file, monkeypatch):
    hookconf.load_or_defaults(str(conf_file))
    monkeypatch.setenv("GPUPERF_SYSFS_ROOT", "/recorded/node")
    assert hookconf.load_or_defaults(str(conf_file)).general.node_root == "/recorded/node"


def test_a_cache_others_may_write_is_not_believed(conf_file):
    hookconf.load_or_defaults(str(conf_file))
    cache = hookconf.cache_path(str(conf_file))
    with open(cache) as f:
        text = f.read()
    with open(cache, "w") as f:
        f.write(text.replace("/tmp/x/run", "/tmp/elsewhere"))
    os.chmod(cache, 0o666)
    assert hookconf.load_or_defaults(str(conf_file)).general.run_dir == "/tmp/x/run"


def test_a_broken_or_absent_config_is_what_config_makes_of_it_and_never_cached(conf_file, tmp_path):
    conf_file.write_text("[daemon]\ninterval_s = 'fast'\n")
    got = hookconf.load_or_defaults(str(conf_file))
    assert got.degraded and "daemon.interval_s" in got.error
    assert same(got, config.load_or_defaults(str(conf_file)))
    assert not os.path.exists(hookconf.cache_path(str(conf_file)))
    absent = str(tmp_path / "none.toml")
    assert same(hookconf.load_or_defaults(absent), config.load_or_defaults(absent))


def test_the_system_config_is_cached_in_the_run_dir_not_etc():
    assert hookconf.cache_path(config.DEFAULT_PATH) == "/run/gpuperf/config.cache.json"
