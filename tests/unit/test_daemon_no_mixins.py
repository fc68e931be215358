"""The daemon is made of parts with explicit dependencies (issue 25): no mixins sharing ``self``."""

from __future__ import annotations

import ast
from pathlib import Path

import gpuperf.daemon

DAEMON = Path(gpuperf.daemon.__file__).parent


def test_no_part_of_the_daemon_reaches_state_it_does_not_own():
    hits = [f"{p.name}:{n}" for p in sorted(DAEMON.glob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if "ignore[attr-defined]" in line]
    assert hits == [], "a part uses state it was not given: pass it in its constructor"


def test_no_class_of_the_daemon_is_a_mixin():
    mixins = []
    for p in sorted(DAEMON.glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                if node.name.endswith("Mixin") or any(b.endswith("Mixin") for b in bases):
                    mixins.append(f"{p.name}:{node.name}({', '.join(bases)})")
    assert mixins == []
