"""gpuperf.files.jsoncodec: the controller's JSON reads and writes what the standard library does, faster."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuperf.model import admincomment
from gpuperf.files import jsoncodec

finite = st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | st.text()
values = st.recursive(finite, lambda kids: st.lists(kids, max_size=5)
                      | st.dictionaries(st.text() | st.integers(-1000, 1000), kids, max_size=5), max_leaves=30)


@given(values)
def test_dumps_reads_back_as_the_standard_librarys(v):
    # integer keys become strings in both, as a summary's per-GPU maps do
    assert json.loads(jsoncodec.dumps(v)) == json.loads(json.dumps(v))


@given(values)
def test_loads_reads_the_standard_librarys_output(v):
    text = json.dumps(v, separators=(",", ":"))
    assert jsoncodec.loads(text) == json.loads(text)
    assert jsoncodec.loads(text.encode()) == json.loads(text)


def test_what_orjson_refuses_goes_to_the_standard_library():
    big = {"bytes": 2**70, "n": [1, 2]}   # beyond 64 bits: orjson raises, the codec falls back
    assert json.loads(jsoncodec.dumps(big)) == big
    # a record written by the standard library with NaN/Infinity in it still reads
    got = jsoncodec.loads(json.dumps({"x": float("nan"), "y": float("inf")}))
    assert math.isnan(got["x"]) and got["y"] == math.inf


@pytest.mark.parametrize("bad", [b"", b"{", b"{\"a\":}", b"\xff\xfe", "[1,"])
def test_malformed_raises_valueerror(bad):
    with pytest.raises(ValueError):
        jsoncodec.loads(bad)


def test_admincomment_round_trip_through_the_codec():
    s = {"schema": "gpuperf.summary.v1", "job_id": 7, "nodes": ["n1"], "gpus": [{"gpu": 0, "energy_j": 1.5e6}],
         "quality": {"partial": False, "reasons": []}, "diagnosis": {"class": "compute_bound"}}
    assert admincomment.decode(admincomment.encode(s)) == s


def test_orjson_is_not_imported_until_used():
    """The hooks import admincomment's neighbours: importing the codec must not load orjson (~18 ms)."""
    code = ("import sys, gpuperf.files.jsoncodec, gpuperf.model.admincomment; a = 'orjson' in sys.modules; "
            "gpuperf.files.jsoncodec.dumps({}); print(a, 'orjson' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]
