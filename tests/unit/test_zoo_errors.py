"""The stated error of each datatype's estimate is derived from the zoo's table, not chosen: the largest
judged error there (benchmarks/results/zoo/estimates.md, written by benchmarks/zoo_matrix.py) of the rate the
job's report gives for the working phase over the workload's timed work (issue 35: the rate while the job did
that work, labelled as the phase's), rounded up to the next 5%, never under the ground truth's bound
(gpuperf.diagnosis.roofline.ERROR_PCT)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from gpuperf.diagnosis import roofline

TABLE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "zoo" / "estimates.md"


def table() -> dict[str, float]:
    """datatype -> max abs judged error (%) of the job report's working phase, from the committed table's summary
    rows (timed work | working phase | job average | stated)."""
    rows = re.findall(r"^\| (\w+) \| \d+ \| [\d.]+% \| ([\d.]+)% \| [\d.]+% \| ±[\d.]+% \|$", TABLE.read_text(), re.M)
    return {d: float(r) for d, r in rows}


def test_each_datatypes_stated_error_is_its_largest_error_in_the_table_rounded_up():
    got = table()
    assert {"bf16", "fp16", "fp8", "tf32", "fp32", "fp64", "int8", "int32"} <= set(got)
    for dtype, err in got.items():
        want = max(roofline.ERROR_PCT, 5.0 * math.ceil(err / 5.0))
        assert roofline.ERROR_PCT_BY_DTYPE[dtype] == want, (dtype, err)


def test_each_kind_states_the_largest_error_of_the_datatypes_it_covers():
    by = roofline.ERROR_PCT_BY_DTYPE
    assert roofline.ERROR_BY_KIND["hmma"] == max(by[d] for d in ("bf16", "fp16", "fp8", "tf32"))
    assert roofline.ERROR_BY_KIND["imma"] == by["int8"] and roofline.ERROR_BY_KIND["int"] == by["int32"]
    assert roofline.ERROR_BY_KIND["dmma"] == by["fp64"]
