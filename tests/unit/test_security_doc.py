"""docs/SECURITY.md: every test a "what gpuperf does" line points at exists."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_test_named_in_the_threat_model_exists():
    text = (REPO / "docs" / "SECURITY.md").read_text()
    files = {p.name: p for p in (REPO / "tests").rglob("test_*.py")}
    current, named = None, []
    for m in re.finditer(r"(test_\w+\.py)?::(\w+)", text):
        current = m.group(1) or current
        named.append((current, m.group(2)))
    assert len(named) >= 25
    missing = [f"{f}::{t}" for f, t in named if f not in files or f"def {t}(" not in files[f].read_text()]
    assert not missing, missing
    for f in re.findall(r"`tests/\w+/(test_\w+\.py)`", text):
        assert f in files, f


def test_the_bounds_stated_for_the_daemons_work_per_user_are_the_codes():
    """Issue 36's section says `module.NAME` = value for each bound: each is the code's constant."""
    import importlib

    text = (REPO / "docs" / "SECURITY.md").read_text()
    section = text.split("## Threat model: the daemon's work per user", 1)[1].split("\n## ", 1)[0]
    modules = {"ratelimit": "gpuperf.daemon.ratelimit", "procread": "gpuperf.daemon.procread",
               "plan": "gpuperf.env.plan", "taskdaemon": "gpuperf.prolog.taskdaemon"}
    stated = re.findall(r"`(\w+)\.([A-Z_]+)` = ([\d.]+)", section)
    assert len(stated) >= 9, stated
    for mod, name, value in stated:
        assert getattr(importlib.import_module(modules[mod]), name) == float(value), f"{mod}.{name}"
