"""gpuperf's layers (docs/ARCHITECTURE.md) as tests: the import-linter contract in ``.importlinter`` holds,
every gpuperf module lies in one of its layers, and no import cycle joins two modules or two packages.

Late (function-level) imports count like any other: the contract ignores none. The mutation tests put
each piece that was moved to break a cycle back where it was, as a late import in a copy of the
package, and check the contract (or the cycle check) then fails.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / ".importlinter"


def layers() -> list[list[str]]:
    """The contract's layers, highest first, each a list of its packages (``a | b`` or ``a : b``)."""
    cp = configparser.ConfigParser()
    cp.read(CONTRACT)
    raw = cp["importlinter:contract:layers"]["layers"]
    return [[p.strip() for p in line.replace(":", "|").split("|") if p.strip()]
            for line in raw.splitlines() if line.strip()]


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` (the test venv's, beside this interpreter) on the package under ``root``."""
    exe = Path(sys.executable).parent / "lint-imports"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command as m; sys.exit(m())"]
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run(cmd + ["--no-cache", "--config", str(root / ".importlinter")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def cycles(package: str = "gpuperf", path: Path = REPO) -> tuple[list[list[str]], list[list[str]]]:
    """(module cycles, package cycles): each a strongly connected set of more than one module, or of
    gpuperf's sub-packages (``gpuperf.X``) joined by their modules' imports."""
    code = f"""
import json, sys
sys.path.insert(0, {str(path)!r})
import grimp
g = grimp.build_graph({package!r}, cache_dir=None)
print(json.dumps({{m: sorted(g.find_modules_directly_imported_by(m)) for m in g.modules}}))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    assert p.returncode == 0, p.stderr
    import json

    edges: dict[str, list[str]] = json.loads(p.stdout)
    packages: dict[str, set[str]] = {}
    for m, imported in edges.items():
        a = ".".join(m.split(".")[:2])
        packages.setdefault(a, set()).update(b for b in (".".join(i.split(".")[:2]) for i in imported) if b != a)
    return _sccs(edges), _sccs({k: sorted(v) for k, v in packages.items()})


def _sccs(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(edges.get(root, [])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(edges.get(w, []))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_layer_contract_holds():
    p = lint_imports(REPO)
    assert p.returncode == 0 and "1 kept, 0 broken" in p.stdout, p.stdout + p.stderr


def test_every_gpuperf_module_lies_in_a_layer_and_every_layer_exists():
    named = [pkg for layer in layers() for pkg in layer]
    assert len(named) == len(set(named)), f"a package in two layers: {named}"
    modules = grimp.build_graph("gpuperf", cache_dir=None).modules
    tops = {m.split(".")[1] for m in modules if m != "gpuperf"}
    assert sorted(tops - set(named)) == [], "gpuperf modules in no layer: add them to .importlinter and docs/ARCHITECTURE.md"
    assert sorted(set(named) - tops) == [], "layers naming no gpuperf module"


def test_the_architecture_doc_names_every_layer():
    doc = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    missing = [pkg for layer in layers() for pkg in layer if f"`{pkg}`" not in doc and f"`gpuperf.{pkg}`" not in doc]
    assert not missing, f"docs/ARCHITECTURE.md does not name {missing}"


def test_every_package_says_what_it_owns():
    bare = [str(d.relative_to(REPO)) for d in sorted((REPO / "gpuperf").iterdir())
            if (d / "__init__.py").exists() and not (d / "README.md").exists()
            and len(_docstring(d / "__init__.py")) < 60]
    assert not bare, f"packages without an opening docstring or README saying what they own: {bare}"


def _docstring(path: Path) -> str:
    import ast

    return ast.get_docstring(ast.parse(path.read_text())) or ""


def test_no_import_cycle_between_gpuperf_modules_or_packages():
    modules, packages = cycles()
    assert modules == [], f"import cycles between modules: {modules}"
    assert packages == [], f"import cycles between packages: {packages}"


def test_config_names_each_feature_validator_it_calls():
    """config imports no feature (the contract): the validators it names by ``module:function`` exist."""
    from gpuperf.files import config

    named = {spec.validate for section in config.SCHEMA.values() for spec in section.values()
             if isinstance(spec.validate, str)}
    assert named >= {"gpuperf.env.rules:validate", "gpuperf.checks:validate_codes",
                     "gpuperf.diagnosis.thresholds:resolve_thresholds"}
    for name in named:
        assert callable(config._validator(name)), name
        assert name.split(":")[0].split(".")[1] in {p for layer in layers()[:-1] for p in layer}, name


# each piece moved to break a cycle, put back as the late import it was: (file, import) -> what catches it
BACK = [
    ("files/config.py", "from gpuperf.diagnosis import resolve_thresholds", "contract"),
    ("files/config.py", "from gpuperf.env import rules", "contract"),
    ("files/config.py", "from gpuperf.checks import validate_codes", "contract"),
    ("model/summary.py", "from gpuperf.prolog.envplan import compute", "contract"),
    ("model/summary.py", "from gpuperf.prolog.affinityplan import step", "contract"),
    ("model/summary.py", "from gpuperf.diagnosis import diagnose", "contract"),
    ("model/summary.py", "from gpuperf.diagnosis import roofline", "contract"),
    ("model/summary.py", "from gpuperf.fleet import fingerprint", "contract"),
    ("model/aggregates.py", "from gpuperf.fleet import ranking", "contract"),
    ("daemon/ops.py", "from gpuperf.prolog import indaemon", "contract"),
    ("daemon/startup.py", "from gpuperf.prolog import affinityplan", "contract"),
    ("checks/builtin/gpu_probe.py", "from gpuperf.fleet import fingerprint", "contract"),
    ("env/report.py", "from gpuperf.prolog import envtask", "contract"),
    ("affinity/report.py", "from gpuperf.prolog import affinityplan", "contract"),
    ("prolog/affinityplan.py", "from gpuperf.wrappers import run", "contract"),
    ("prolog/envplan.py", "from gpuperf.prolog import envtask", "cycle"),
    ("checks/runner.py", "from gpuperf.checks import registry", "cycle"),
]


@pytest.mark.parametrize("where,statement,caught_by", BACK, ids=[f"{w}:{s.split()[-1]}" for w, s, _ in BACK])
def test_a_moved_piece_put_back_as_a_late_import_is_caught(tmp_path, where, statement, caught_by):
    shutil.copytree(REPO / "gpuperf", tmp_path / "gpuperf", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(CONTRACT, tmp_path / ".importlinter")
    target = tmp_path / "gpuperf" / where
    target.write_text(target.read_text() + f"\n\ndef _put_back() -> None:\n    {statement}  # noqa: F401\n")
    if caught_by == "contract":
        p = lint_imports(tmp_path)
        assert p.returncode != 0 and "BROKEN" in p.stdout, p.stdout + p.stderr
    else:
        modules, _ = cycles(path=tmp_path)
        assert modules, f"{statement} in {where} makes no cycle"
