"""No gpuperf module over 400 lines unless its opening docstring says why (the words "400 lines" and a
reason): a longer one is split by concern (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import gpuperf

ROOT = Path(gpuperf.__file__).parent
LIMIT = 400


def too_long(root: Path = ROOT, limit: int = LIMIT) -> list[str]:
    """``path: N lines`` of each module over ``limit`` lines whose docstring does not say why."""
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        n = len(text.splitlines())
        if n > limit and f"{limit} lines" not in (ast.get_docstring(ast.parse(text)) or ""):
            out.append(f"{path.relative_to(root.parent)}: {n} lines")
    return out


def test_no_module_over_400_lines_without_a_reason():
    assert too_long() == [], "split these by concern, or say in the docstring why they are longer"


def test_the_size_check_sees_a_long_module_and_its_reason(tmp_path):
    body = "".join(f"x{i} = {i}\n" for i in range(LIMIT))
    (tmp_path / "long.py").write_text('"""A long module."""\n' + body)
    (tmp_path / "said.py").write_text('"""A table: over 400 lines, one row a line, read as one."""\n' + body)
    (tmp_path / "short.py").write_text('"""Short."""\n' + body[: -len(f"x{LIMIT - 1} = {LIMIT - 1}\n")])
    assert too_long(tmp_path) == [f"{tmp_path.name}/long.py: {LIMIT + 1} lines"]
