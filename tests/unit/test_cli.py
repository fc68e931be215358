"""The gpuperf command: a broken config file is one clear error and exit 2 for every subcommand."""

import pytest

from gpuperf import cli


@pytest.mark.parametrize("argv", [["check"], ["daemon"], ["env"], ["jobs"], ["report", "1"]])
def test_broken_config_is_one_line_naming_the_key_and_exit_2(argv, tmp_path, monkeypatch, capsys):
    bad = tmp_path / "c.toml"
    bad.write_text("[report]\nadmin_coment = true\n")
    monkeypatch.setenv("GPUPERF_CONFIG", str(bad))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"gpuperf {argv[0]}: ") and "report.admin_coment" in err[0] and "c.toml:2" in err[0]


def test_no_subcommand_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().out
