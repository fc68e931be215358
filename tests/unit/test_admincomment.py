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


@pytest.mark.parametrize("ref, shown", [("8_3", "8_3"), ("10+1", "10+1"), ("12", None), (None, None),
                                        ("8_3.batch", None), ("8_3 z=aaaa", None), ("x", None)])
def test_an_array_task_or_het_component_ends_the_headline_with_its_name(ref, shown):
    s = summary.node_summary(aggregates(ngpus=2), context())
    text = admincomment.encode(s, name=ref)
    head = text.split(" z=")[0]
    assert head.startswith("gpuperf:v1 class=")  # the class stays first, as readers of %120 expect
    if shown:
        assert head.endswith(f" job={shown}") and admincomment.decode_headline(text.lower())["job"] == shown
    else:
        assert "job=" not in head and text.count(" z=") == 1
    assert admincomment.decode(text.lower()) == s  # the payload is the summary's, name or none
    assert text.split(" z=")[1] == admincomment.encode(s).split(" z=")[1]


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


KINDS = {"int_active_pct": 30.0, "tensor_hmma_pct": 70.0, "tensor_imma_pct": 4.0, "tensor_dfma_pct": 1.0,
         "tensor_dmma_pct": 2.0}
MARGIN = 0.10   # headroom kept under the 4 KiB of one 8-GPU node: the next fields must not drop the env's reasons


def _full_8_gpu_node() -> dict:
    """An 8-GPU node's summary with every field the diagnosis added filled: per-kind tensor and integer
    activity, each GPU's PCIe link, GPUDirect, and phases from a recorded job's series."""
    from gpuperf.report import fromrecording

    ctx = context(gpu_links={str(i): {"gen": 5, "width": 16} for i in range(8)}, gpudirect_rdma=True,
                  gpudirect_storage=True)
    _, series = fromrecording.replay_job("tests/data/recordings/phases-h100-80gb-hbm3.jsonl.gz", gpus=8,
                                         with_series=True)
    s = summary.node_summary(aggregates(ngpus=8, seed=7, **KINDS), dict(ctx, series=series))
    assert s["diagnosis"]["phases"] and s["diagnosis"]["roofline"]["by_kind"]
    assert all(g.get(k) is not None for g in s["gpus"] for k in KINDS)
    return s


def test_a_full_8_gpu_node_keeps_a_tenth_of_its_4_kib_free():
    s = summary.merge([_full_8_gpu_node()], ["n1"])     # what the controller writes
    text = admincomment.encode(s)
    assert len(text.encode()) <= admincomment.NODE_BUDGET_BYTES * (1 - MARGIN), len(text.encode())
    assert admincomment.decode(text) == s and "truncated" not in admincomment.decode(text)


def test_payloads_written_before_the_preset_dictionary_still_decode():
    # an AdminComment the codec wrote before acvocab (plain zlib), kept verbatim
    import json

    text = open("tests/data/admincomment_plain_zlib.txt").read()
    s = admincomment.decode(_sacctmgr_22_05(text))
    assert s["job_id"] == 42 and len(s["gpus"]) == 1 and s["diagnosis"]["class"]
    assert hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest() == \
        "481621a47540208b0b474bd4308e0f161006afd260e1802ecde6d3623577c126"


def test_the_preset_dictionaries_are_never_edited():
    import zlib

    from gpuperf.model import acvocab

    # a payload names its dictionary by Adler-32: an edited one would leave every written AdminComment unreadable
    assert {k: zlib.adler32(v) for k, v in acvocab.BY_ID.items()} == {1365325987: 1365325987}
    assert acvocab.CURRENT in acvocab.BY_ID.values()
    blob = admincomment.compressed({"a": 1})
    assert blob[1] & 0x20 and int.from_bytes(blob[2:6], "big") == zlib.adler32(acvocab.CURRENT)


def test_a_payload_with_an_unknown_dictionary_is_a_clear_error():
    import zlib

    z = zlib.compressobj(6, zdict=b"some other vocabulary")
    blob = z.compress(b'{"a":1}') + z.flush()
    with pytest.raises(admincomment.AdminCommentError, match="dictionary"):
        admincomment.decode("gpuperf:v1 z=" + admincomment.b32_lower(blob))


def test_the_cluster_stores_job_blobs_read_in_both_forms():
    import zlib

    from gpuperf.controller import clusterstore
    from gpuperf.files import jsoncodec

    s = summary.node_summary(aggregates(ngpus=2), context())
    # rows written before the preset dictionary (plain zlib JSON) and rows written now (the payload's bytes)
    assert clusterstore._unpack(zlib.compress(jsoncodec.dumps(s), 6)) == s
    assert clusterstore._unpack(admincomment.compressed(s)) == s


def _nodes_job(n: int) -> dict:
    parts = []
    for i in range(n):
        node = f"gpu{i:05d}"
        parts.append(summary.node_summary(aggregates(ngpus=8, seed=i % 7, node=node), context(node=node)))
    return summary.merge(parts, [p["nodes"][0] for p in parts] + ["gpu99999"])


def test_every_job_size_gets_one_admincomment_of_at_most_4_kib():
    # the budget was 4 KiB a node up to sacct's 64 KiB: 4,096 nodes did not fit at all (AdminCommentError);
    # now a large job keeps its least busy GPUs by name, every GPU's spread and the diagnosis, in 4 KiB
    import copy

    for n in (2, 96):
        s = _nodes_job(n)
        before = copy.deepcopy(s)
        text = admincomment.encode(s, raw=admincomment.compressed(s))
        d = admincomment.decode(text)
        assert len(text.encode()) <= 4096 and s == before, (n, len(text.encode()))
        assert d["diagnosis"]["class"] == s["diagnosis"]["class"] and d["job"] == s["job"]
        if n == 96:
            by_activity = sorted(g["sm_active_pct"] for g in s["gpus"])
            assert d["gpus_total"] == 8 * n and len(d["gpus"]) == admincomment.WORST_GPUS
            assert [g["sm_active_pct"] for g in d["gpus"]] == by_activity[:admincomment.WORST_GPUS]
            assert d["gpus_dist"]["sm_active_pct"][0] == round(by_activity[0], 1)
            assert d["gpus_dist"]["sm_active_pct"][-1] == round(by_activity[-1], 1)
            assert d["nodes_total"] == n and len(d["nodes"]) <= admincomment.LIST_MAX
            assert d["quality"]["nodes_missing"] == ["gpu99999"] and d["quality"]["nodes_expected_total"] == n + 1
            assert "gpus.worst" in d["truncated"]


def test_a_summary_too_large_for_every_level_is_written_in_its_reduced_form():
    s = _nodes_job(2)
    s["diagnosis"] = dict(s["diagnosis"], evidence=[hashlib.sha256(str(i).encode()).hexdigest() for i in range(200)])
    d = admincomment.decode(admincomment.encode(s))
    assert d["truncated"][-1] == "reduced" and d["diagnosis"]["class"] == s["diagnosis"]["class"]
