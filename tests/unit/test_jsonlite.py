"""gpuperf.files.jsonlite gives json's output and json's values: the hooks' records and messages stay the same."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuperf.files import jsonlite

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(), kids, max_size=5),
                      max_leaves=30)
OPTIONS = [{}, {"sort_keys": True}, {"separators": (",", ":")},
           {"separators": (",", ":"), "allow_nan": False, "default": str}]


def _or_error(fn, *a, **kw):
    try:
        return fn(*a, **kw)
    except TypeError:
        return "TypeError"
    except ValueError:
        return "ValueError"


@given(values)
def test_dumps_is_json_dumps(v):
    for kw in OPTIONS:
        assert _or_error(jsonlite.dumps, v, **kw) == _or_error(json.dumps, v, **kw)


@given(values)
def test_loads_reads_what_json_reads(v):
    text = json.dumps(v)
    assert json.dumps(jsonlite.loads(text)) == json.dumps(json.loads(text))
    assert json.dumps(jsonlite.loads(text.encode())) == text


def test_other_types_and_keys_as_json_handles_them():
    v = {1: (1, 2), True: None, 2.5: "é\u2028", None: float("inf")}
    assert jsonlite.dumps(v) == json.dumps(v)
    assert jsonlite.dumps({"s": {1}}, default=str) == json.dumps({"s": {1}}, default=str)
    with pytest.raises(TypeError):
        jsonlite.dumps({"s": {1}})
    with pytest.raises(ValueError):
        jsonlite.dumps(float("nan"), allow_nan=False)


@pytest.mark.parametrize("text", ["", "  ", "{", "[1,]", "1 2", "nul", '"\\x"', '{"a":1}x', "\ufeff{}", b"\xff"])
def test_what_json_refuses_is_a_value_error(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        jsonlite.loads(text)
