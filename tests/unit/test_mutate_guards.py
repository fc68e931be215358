"""Every guard of docs/SECURITY.md's threat models, removed alone, makes its named test fail.

The mutations are ``tests/mutate_guards.py``'s list. Each is applied to a copy of the package in a
directory of its own (never to the checkout: the suite may run in parallel and from a read-only
checkout); its named test runs in a pytest of its own with that copy first on the path, two at a time
(one process per mutation: each mutation alone). A mutation passes here only if the named test itself
failed (or hung past the bound), and every gpuperf module that test imported came from the copy.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
import mutate_guards as mg  # noqa: E402

NAMES = [m[0] for m in mg.M]
WORKERS = int(os.environ.get("GPUPERF_MUTATE_WORKERS", "2"))


def test_the_mutation_list_is_current():
    assert len(set(NAMES)) == len(NAMES), "two mutations share a name"
    for name, path, old, new, test in mg.M:
        text = (REPO / path).read_text()
        # the guard's text occurs exactly once: a guard rewritten or moved fails here, not silently
        assert text.count(old) == 1, f"{name}: {path} holds the guard's text {text.count(old)} times"
        assert old != new, name
        file, _, func = test.partition("::")
        assert re.search(rf"^(async )?def {re.escape(func)}\(", (REPO / file).read_text(), re.M), f"{name}: no {test}"


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory) -> dict[str, mg.Outcome]:
    """Every selected mutation's outcome, run ``WORKERS`` at a time the first time one is asked for."""
    chosen = [item.callspec.params["name"] for item in request.session.items
              if item.module is request.module and item.originalname == "test_removing_the_guard_fails_its_test"]
    mutations = [m for m in mg.M if m[0] in chosen]
    return {o.name: o for o in mg.run_all(mutations, tmp_path_factory.mktemp("mutants"), WORKERS, REPO)}


@pytest.mark.parametrize("name", NAMES)
def test_removing_the_guard_fails_its_test(name, outcomes):
    o = outcomes[name]
    if o.skipped:   # e.g. a test that needs root or runuser: the guard cannot be tried on this machine
        pytest.skip(f"{o.test} is skipped here")
    assert o.executable == sys.executable or o.rc is None, (o.executable, o.tail)
    # the test ran on the mutant: its gpuperf came from the copy, no module of it from elsewhere
    assert o.rc is None or o.modules.get("gpuperf", "").startswith(str(o.work / "gpuperf") + os.sep), o.tail
    assert not o.foreign_modules(), o.foreign_modules()
    assert o.test_failed, f"{name}: {o.test} passes without its guard:\n{o.tail}"
