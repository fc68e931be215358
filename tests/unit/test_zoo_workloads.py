"""The zoo's workload scripts, read without running them (issues 30 and 35): each says what it is in a LABEL the
matrix can judge it by, counts the work its label's rate names, reports its timed window, and uses the framework
its label names (the "framework in evidence" a report's advice is judged against)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from gpuperf.diagnosis import CLASSES

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / "benchmarks" / "workloads"
NEW_CLASSES = {"transfer_bound", "latency_bound", "underfilled"}
KEYS = {"class", "dtype", "kind", "framework", "rate", "exact", "contradicts", "what"}
# the rate a label names -> what the script passes to _zoo.timed or reports itself
COUNTS = {"tflops": ("flops=", "tflops="), "gbps": ("nbytes=", "gbps="), "pcie_gbps": ("pcie_bytes=", "pcie_gbps="),
          "busbw_gbps": ("busbw_gbps",), "p2p_gbps": ("p2p_gbps",)}
FRAMEWORK_IMPORT = {"torch": r"^\s*import torch\b", "jax": r"^\s*import jax\b", "cupy": r"^\s*import cupy\b"}
sys.path.insert(0, str(ROOT / "benchmarks"))

import zoo_matrix as zm  # noqa: E402

LABELS = zm.labels()
APP = {n: lab for n, lab in LABELS.items() if zm.is_app(n)}


def _source(name: str) -> str:
    return (WORKLOADS / f"{name}.py").read_text()


def _order(script: str) -> set[str]:
    text = (ROOT / "benchmarks" / "device" / script).read_text()
    return set(re.findall(r"\bzoo_[a-z0-9_]+\b", text.split('ORDER="')[1].split('"')[0]))


@pytest.mark.parametrize("name", sorted(LABELS))
def test_every_zoo_script_labels_itself_counts_its_rate_and_reports_its_window(name):
    lab, src = LABELS[name], _source(name)
    assert KEYS <= set(lab), f"{name}: LABEL lacks {KEYS - set(lab)}"
    assert lab["class"] in set(CLASSES) | NEW_CLASSES, name
    assert set(lab["contradicts"]) <= set(zm.CONTRADICTS), name
    assert lab["what"].strip() and isinstance(lab["exact"], bool), name
    doc = ast.get_docstring(ast.parse(src))
    assert doc and len(doc) > 40, f"{name}: no docstring saying what it computes"
    if re.search(r"^from _comm import", src, re.M):      # the 2-GPU workloads count and report in _comm.py
        src += (WORKLOADS / "_comm.py").read_text()
    if lab["rate"] is not None:
        assert lab["rate"] in COUNTS, name
        assert any(k in src for k in COUNTS[lab["rate"]]), f"{name}: counts nothing for its rate {lab['rate']}"
    # the timed window: through _zoo.timed, or reported with _common.window
    assert "timed(" in src or "window(" in src or "t_start" in src, name


@pytest.mark.parametrize("name", sorted(APP))
def test_each_application_workload_uses_the_framework_its_label_names_and_no_other(name):
    lab, src = APP[name], _source(name)
    fw = lab["framework"]
    assert re.search(FRAMEWORK_IMPORT[fw], src, re.M), f"{name}: label says {fw}, script does not import it"
    for other, rx in FRAMEWORK_IMPORT.items():
        if other != fw:
            assert not re.search(rx, src, re.M), f"{name}: imports {other} too"
    # a job with no PyTorch in it is judged for PyTorch-only advice; a PyTorch job never is
    assert ("pytorch_only" in lab["contradicts"]) == (fw != "torch"), name
    assert "start-up" in _source(name).lower(), f"{name}: the docstring states no start-up cost"


def test_the_application_zoo_covers_real_jobs_and_its_script_records_each_of_them():
    assert len(APP) >= 16
    kinds = {lab["kind"] for lab in APP.values()}
    assert {"transformer_prefill", "transformer_decode", "transformer_training", "vision_transformer",
            "cnn_training", "optimizer", "attention_decode", "depthwise_convolution", "elementwise_fused", "nbody",
            "stencil", "pointer_chase", "factorization", "spmv", "dataloader", "multi_phase"} <= kinds
    assert {"torch", "jax", "cupy"} <= {lab["framework"] for lab in APP.values()}
    assert {"compute_bound", "memory_bound", "latency_bound", "input_bound"} <= {lab["class"] for lab in APP.values()}
    assert _order("zoo_app_record.sh") == set(APP)
    # the issue-30 zoo's script records the rest; together they record every single-GPU workload
    single = {n for n, lab in LABELS.items() if lab.get("gpus", 1) == 1}
    assert _order("zoo_record.sh") | _order("zoo_app_record.sh") == single


def test_a_non_pytorch_job_told_pytorch_remedies_is_contradicted_even_when_hedged():
    lab = {"contradicts": ["pytorch_only", "fused_optimizer"]}
    hedged = ("the counters cannot tell FP32 matrix products from other FP32 math; Nsight Compute's sm__inst "
              "counters tell them apart; if they are matrix products, bf16 autocast could help")
    diag = {"recommendations": ["fewer, larger kernels: fuse small operations (torch.compile, fused optimizers such as "
                                "fused AdamW)", hedged],
            "findings": [{"fix": "feed the GPU faster: more DataLoader workers (num_workers)"}]}
    got = zm.contradictions(lab, diag)
    assert sorted({c.split(":")[0] for c in got}) == ["fused_optimizer", "pytorch_only"]
    assert any(hedged in c for c in got) and not zm.hedged_advice(lab, diag)
    neutral = {"recommendations": ["fuse elementwise kernels so intermediates stay on chip (XLA fusion, a custom kernel)"]}
    assert zm.contradictions(lab, neutral) == []


def test_a_multi_phase_jobs_window_ends_after_its_last_working_phase():
    assert zm.job_end({"t_start": 1.0, "t_end": 5.0}) == 5.0
    assert zm.job_end({"t_end": 5.0, "t_idle_end": 9.0}) == 9.0
    assert zm.job_end({"t_end": 5.0, "t_job_end": 12.5}) == 12.5
    assert zm.is_app("zoo_app_llama_prefill_bf16") and not zm.is_app("zoo_gemm_fp16")
