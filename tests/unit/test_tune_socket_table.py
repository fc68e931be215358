"""benchmarks/tune_socket_table.py (issue 29): the socket-path tune table and its check against the acceptance
rule, on the recorded 2x H200 runs (benchmarks/results/h200x2/tune-socket.json, every size 8 KiB-256 MiB; the
superseded 5-size table it replaced, tune-socket-superseded.json) and variants of them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import tune_socket_table as tst  # noqa: E402

RECORDED = REPO / "benchmarks" / "results" / "h200x2" / "tune-socket-superseded.json"
COMMITTED = REPO / "benchmarks" / "results" / "h200x2" / "tune-socket.json"
TWO = "NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=2"


def test_the_old_table_accepted_a_setting_the_rule_rejects(tmp_path, capsys):
    assert tst.main(["--from-json", str(RECORDED), "--out", str(tmp_path)]) == 1
    md = (tmp_path / "tune-socket.md").read_text()
    assert f"FAILED: {TWO}: the file says accepted, the rule says rejected" in md
    assert "accepted although allreduce 8 KiB 0.622 [0.276, 1.400] (may lose)" in md
    rows = [l for l in md.splitlines() if l.startswith("| allreduce ")]
    assert len(rows) == 5 and rows[0].startswith("| allreduce 8 KiB | 0.289 [0.114, 0.729] loss | 0.622")
    assert "unsettled !" in rows[0]


def test_the_committed_table_measures_every_size_and_follows_the_rule(tmp_path):
    """The table the lent 2x H200 made on 2026-11-26: 16 sizes, queued, and no accepted setting that may lose."""
    assert tst.main(["--from-json", str(COMMITTED), "--out", str(tmp_path)]) == 0
    md = (tmp_path / "tune-socket.md").read_text()
    rows = [l for l in md.splitlines() if l.startswith("| allreduce ")]
    assert len(rows) == 16 and rows[0].startswith("| allreduce 8 KiB") and rows[-1].startswith("| allreduce 256 MiB")
    assert "Rule check: ok" in md and "Timing: queued; transport: socket" in md
    rec = json.loads(COMMITTED.read_text())
    assert not any(v["accepted"] for v in rec["verdicts"])
    # the committed rendering is what the check renders from the record
    assert (COMMITTED.parent / "tune-socket.md").read_text() == md


def test_a_record_that_follows_the_rule_passes(tmp_path):
    rec = json.loads(RECORDED.read_text())
    for v in rec["verdicts"]:
        v["accepted"] = False
    src = tmp_path / "t.json"
    src.write_text(json.dumps(rec))
    assert tst.main(["--from-json", str(src), "--out", str(tmp_path)]) == 0
    assert "Rule check: ok" in (tmp_path / "tune-socket.md").read_text()


def test_a_rejection_the_rule_would_accept_is_named_too(tmp_path):
    rec = json.loads(RECORDED.read_text())
    base = rec["sets"]["baseline"]["rounds"]
    # the 2x2 candidate made twice as fast as the baseline at every size, in every round
    rec["sets"][TWO]["rounds"] = [{c: {s: [x * 2 for x in xs] for s, xs in per.items()} for c, per in r.items()}
                                  for r in base]
    rec["verdicts"][1]["accepted"] = False
    rows, bad = tst.check(rec)
    assert rows[1]["accepted_by_rule"] and bad == [f"{TWO}: the file says rejected, the rule says accepted "
                                                   f"({rows[1]['reason']})"]


def test_measures_every_size_from_8_kib_to_256_mib_queued_on_the_socket_path(tmp_path):
    argv = tst.tune_argv(tmp_path / "t.toml", 3, 200.0, 5)
    assert argv[argv.index("--transport") + 1] == "socket" and argv[argv.index("--timing") + 1] == "queued"
    assert int(argv[argv.index("--min-size") + 1]) == 8192 and int(argv[argv.index("--max-size") + 1]) == 256 << 20
    from gpuperf.env import ncclbench as nb

    assert len(nb.sizes(tst.MIN_SIZE, tst.MAX_SIZE)) == 16


def test_not_a_record_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    assert tst.main(["--from-json", str(bad), "--out", str(tmp_path)]) == 2
    assert "is not a gpuperf tune record" in capsys.readouterr().err
