"""The AdminComment codec: readable headline, full summary back after sacctmgr's lowercasing."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuperf.model import admincomment
from gpuperf.diagnosis import jobsummary as summary
from report_fixtures import aggregates, context


def _sacctmgr_22_05(text: str) -> str:
    """What sacctmgr 22.05 stores (FACTS.md): everything lowercased, quotes turned into backticks."""
    return text.lower().replace('"', "`").replace("'", "`")


def test_summary_survives_lowercasing_and_quote_mangling():
    s = summary.node_summary(aggregates(ngpus=8), context())
    text = admincomment.encode(s)
    assert admincomment.decode(_sacctmgr_22_05(text)) == s
    assert admincomment.decode(text.upper().replace("GPUPERF:V1", "gpuperf:v1")) == s


def test_headline_is_readable_lowercase_key_values():
    s = summary.node_summary(aggregates(ngpus=8, tensor_active_pct=91.0), context())
    text = admincomment.encode(s)
    assert text.startswith("gpuperf:v1 class=compute_bound gpus=8 ")
    assert text == text.lower()
    head = admincomment.decode_headline(text)
    assert head["tensor"] == f"{s['job']['tensor_active_pct']:.0f}"
    assert head["energy"] == f"{s['job']['energy_kwh']:.2f}kwh"
    assert set(head) >= {"class", "gpus", "tensor", "sm", "util", "mem", "power", "energy", "idle"}
    # the first 120 characters (sacct -o AdminComment%120) hold the class and the main figures
    assert "sm=" in text[:120] and "util=" in text[:120]


def test_partial_and_imbalanced_show_in_the_headline():
    n1 = summary.node_summary(aggregates(node="n1", sm_active_pct=90.0), context(node="n1"))
    n2 = summary.node_summary(aggregates(node="n2", sm_active_pct=20.0), context(node="n2"))
    head = admincomment.decode_headline(admincomment.encode(summary.merge([n1, n2], ["n1", "n2", "n3"])))
    assert head["partial"] == "1" and head["imbalanced"] == "1"


def test_one_8_gpu_node_fits_in_4_kib():
    s = summary.node_summary(aggregates(ngpus=8, seed=7), context())
    assert len(admincomment.encode(s).encode()) <= 4096


def test_too_large_drops_detail_and_says_so():
    s = summary.node_summary(aggregates(ngpus=8), context())
    full = admincomment.encode(s)
    small = admincomment.encode(s, max_bytes=len(full) - 1)
    d = admincomment.decode(small)
    assert len(small) < len(full)
    assert d["truncated"] and d["gpus"] is not None and d["diagnosis"] == s["diagnosis"]
    with pytest.raises(admincomment.AdminCommentError):
        admincomment.encode(s, max_bytes=100)


@pytest.mark.parametrize("text", ["", "JS1:abcd", "gpuperf:v1 class=idle", "gpuperf:v1 z=notbase32!!",
                                  "gpuperf:v1 z=mfrgg"])
def test_damaged_or_foreign_comments_raise_a_clear_error(text):
    with pytest.raises(admincomment.AdminCommentError):
        admincomment.decode(text)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=12),
                       st.one_of(st.none(), st.booleans(), st.integers(-10**9, 10**9), st.text(max_size=30),
                                 st.floats(allow_nan=False, allow_infinity=False)), max_size=12))
def test_any_json_payload_roundtrips_through_sacctmgr(extra):
    s = {"schema": summary.SCHEMA, "job": {"gpu_count": 1}, "extra": extra}
    assert admincomment.decode(_sacctmgr_22_05(admincomment.encode(s))) == s


def test_a_long_injected_env_drops_its_reasons_first_to_stay_within_4_kib():
    ctx = context()
    # reasons that do not compress (hex digests): the full summary no longer fits
    ctx["env"] = {"vars": {f"VAR_{i}": {"value": f"v{i}", "reason": hashlib.sha256(str(i).encode()).hexdigest()}
                           for i in range(40)}}
    s = summary.node_summary(aggregates(ngpus=8), ctx)
    text = admincomment.encode(s)
    d = admincomment.decode(text)
    assert len(text.encode()) <= 4096
    assert d["truncated"][0] == "env.reasons" and d["env"]["n1"]["vars"]["VAR_7"] == "v7"
    assert d["gpus"] == s["gpus"]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=5000))
def test_fast_base32_is_the_standard_librarys_lowercased_without_padding(data):
    import base64

    assert admincomment.b32_lower(data) == base64.b32encode(data).decode("ascii").rstrip("=").lower()
