"""The zoo's communication workloads (benchmarks/workloads/zoo_comm_*.py, issue 29): ranks, rendezvous, bus
bandwidth and labels without a GPU; with a CPU PyTorch (``GPUPERF_TORCH_CPU_PYTHON``, else one that imports
torch) each runs on the gloo backend, spawned and as srun's two tasks would start it."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WL = REPO / "benchmarks" / "workloads"
sys.path[:0] = [str(WL), str(REPO / "benchmarks")]

import _comm  # noqa: E402
from record_workloads import parse_reports  # noqa: E402

from gpuperf.diagnosis import CLASSES  # noqa: E402

COMM = sorted(p.stem for p in WL.glob("zoo_comm_*.py"))


def test_there_are_the_four_kinds_of_communication():
    kinds = {_label(n)["kind"] for n in COMM}
    assert {"allreduce_nvlink", "allreduce_sockets", "allreduce_imbalance", "transfer_p2p"} <= kinds, kinds


def test_srun_task_is_a_rank_batch_script_and_lone_process_are_not():
    assert _comm.slurm_rank({}) is None
    # the batch script of an -n2 job has SLURM_NTASKS=2 but is no rank: it would wait for a peer forever
    assert _comm.slurm_rank({"SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_JOB_ID": "5"}) is None
    assert _comm.slurm_rank({"SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0"}) is None
    assert _comm.slurm_rank({"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1"}) == (1, 2, 1)
    assert _comm.slurm_rank({"SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "3", "SLURM_LOCALID": "1"}) == (3, 4, 1)
    assert _comm.slurm_rank({"SLURM_STEP_NUM_TASKS": "x", "SLURM_PROCID": "0"}) is None


def test_both_tasks_of_a_step_meet_at_one_port_and_steps_differ():
    e0 = {"SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0"}
    e1 = dict(e0, SLURM_PROCID="1")
    assert _comm.rendezvous(e0) == _comm.rendezvous(e1)
    port = int(_comm.rendezvous(e0).rsplit(":", 1)[1])
    assert 20000 <= port < 40000
    assert _comm.rendezvous(dict(e0, SLURM_STEP_ID="1")) != _comm.rendezvous(e0)
    assert _comm.rendezvous(dict(e0, MASTER_ADDR="10.0.0.1", MASTER_PORT="29500")) == "tcp://10.0.0.1:29500"


def test_a_later_rank_waits_for_rank_zeros_store_to_listen_then_goes_on_at_once():
    import socket
    import threading
    import time

    port = _comm.free_port()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later():
        time.sleep(0.3)
        srv.bind(("127.0.0.1", port))
        srv.listen()

    t = threading.Thread(target=listen_later)
    t.start()
    try:
        waited = _comm.wait_listening(f"tcp://127.0.0.1:{port}", timeout_s=10)
        t.join()
        # it waited for the listener, and polled finely: not a whole back-off second past it
        assert 0.25 <= waited < 0.8, waited
        assert _comm.wait_listening(f"tcp://127.0.0.1:{port}", timeout_s=10) < 0.2  # listening: at once
    finally:
        srv.close()
    assert _comm.wait_listening("file:///tmp/x") == 0.0  # not a TCP store: nothing to wait for
    assert 0.1 <= _comm.wait_listening(f"tcp://127.0.0.1:{_comm.free_port()}", timeout_s=0.15) < 1.0  # gives up


def test_bus_bandwidth_uses_nccl_tests_factors():
    # 1 GB in 1 s on 2 ranks: all-reduce moves 2(n-1)/n = 1x, on 8 ranks 1.75x; all-gather (n-1)/n
    assert _comm.busbw("allreduce", 10**9, 1.0, 2) == pytest.approx(1.0)
    assert _comm.busbw("allreduce", 10**9, 1.0, 8) == pytest.approx(1.75)
    assert _comm.busbw("allgather", 10**9, 0.5, 4) == pytest.approx(1.5)
    with pytest.raises(KeyError):
        _comm.busbw("broadcastish", 1, 1.0, 2)


def _label(name: str) -> dict:
    tree = ast.parse((WL / f"{name}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "LABEL" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} has no LABEL")


@pytest.mark.parametrize("name", COMM)
def test_label_in_the_zoos_convention_and_its_rate_is_reported(name):
    label = _label(name)
    assert label["class"] in CLASSES and label["gpus"] == 2
    assert {"dtype", "kind", "framework", "rate", "contradicts", "what"} <= set(label)
    assert label["contradicts"] and set(label["contradicts"]) <= set(_zoo_matrix().CONTRADICTS), label["contradicts"]
    src = (WL / f"{name}.py").read_text() + (WL / "_comm.py").read_text()
    assert f"{label['rate']}=" in src or f'"{label["rate"]}"' in src, label["rate"]


def _zoo_matrix():
    import zoo_matrix

    return zoo_matrix


def test_the_zoo_matrix_reads_the_comm_labels_and_diagnoses_them_on_their_two_gpus(tmp_path):
    """zoo_matrix.py (issue 30) takes the 2-GPU workloads into the confusion matrix: a recording named as
    record_workloads would name it is replayed on the LABEL's 2 GPUs (here the recorded 2x H200 socket run)."""
    zm = _zoo_matrix()
    labels = zm.labels()
    assert {n for n in labels if labels[n].get("gpus") == 2} == set(COMM)
    rec = REPO / "tests" / "data" / "recordings" / "allreduce_sockets-h200.jsonl.gz"
    copy = tmp_path / "zoo_comm_allreduce_sockets_fp32-h200.jsonl.gz"
    copy.write_bytes(rec.read_bytes())
    from record_workloads import add_to_header

    add_to_header(copy, {"workload": "zoo_comm_allreduce_sockets_fp32"})  # as record_workloads names it
    rows = zm.run(str(tmp_path))
    assert [r["workload"] for r in rows] == ["zoo_comm_allreduce_sockets_fp32"]
    assert rows[0]["class"] == "communication_bound" == rows[0]["label"], rows[0]
    assert rows[0]["achieved"] == pytest.approx(4.1) and rows[0]["estimate"] is None  # its own bus bandwidth


def _torch_python() -> str | None:
    for py in (os.environ.get("GPUPERF_TORCH_CPU_PYTHON", ""), shutil.which("python3") or "", sys.executable):
        if py and subprocess.run([py, "-c", "import torch.distributed"], capture_output=True).returncode == 0:
            return py
    return None


@pytest.fixture(scope="module")
def torch_py():
    py = _torch_python()
    if not py:
        pytest.skip("no Python with PyTorch here (GPUPERF_TORCH_CPU_PYTHON): the CPU (gloo) runs are skipped")
    return py


ARGS = {"zoo_comm_allreduce_nvlink_bf16": ["--mib", "1"], "zoo_comm_allreduce_sockets_fp32": ["--mib", "1"],
        "zoo_comm_imbalance_bf16": ["--n", "64", "--gemms", "1", "--grad-mib", "1"], "zoo_comm_p2p_copy": ["--mib", "4"]}


@pytest.mark.parametrize("name", COMM)
def test_runs_on_cpu_and_counts_its_bytes(torch_py, name):
    p = subprocess.run([torch_py, f"{name}.py", "--seconds", "0.5", "--device", "cpu", *ARGS[name]], cwd=WL,
                       capture_output=True, text=True, timeout=180, env=_clean_env())
    assert p.returncode == 0, p.stderr[-2000:]
    got = parse_reports(p.stdout)
    fig = got[name]
    assert fig[_label(name)["rate"]] > 0 and fig["t_end"] > fig["t_start"], fig
    if name != "zoo_comm_p2p_copy":
        assert {"rank0", "rank1"} <= set(got), got
        assert fig["busbw_gbps"] == pytest.approx(fig["algbw_gbps"], rel=0.02)  # 2 ranks: factor 1
        if "sockets" in name:
            assert "NCCL_P2P_DISABLE=1" in got["rank1"]["nccl"] and "NCCL_SHM_DISABLE=1" in got["rank1"]["nccl"]


def test_two_srun_tasks_find_each_other(torch_py):
    """As srun starts them: two processes, SLURM_PROCID 0 and 1, one rendezvous from the job and step ids."""
    procs = []
    for r in (0, 1):
        env = dict(_clean_env(), SLURM_JOB_ID=str(40000 + os.getpid() % 1000), SLURM_STEP_ID="0",
                   SLURM_STEP_NUM_TASKS="2", SLURM_PROCID=str(r), SLURM_LOCALID=str(r))
        procs.append(subprocess.Popen([torch_py, "zoo_comm_allreduce_nvlink_bf16.py", "--seconds", "0.5", "--device",
                                       "cpu", "--mib", "1"], cwd=WL, env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "zoo_comm_allreduce_nvlink_bf16" in parse_reports(outs[0])
    assert "zoo_comm_allreduce_nvlink_bf16" not in parse_reports(outs[1])  # rank 0 alone reports the figures
    assert "rank1" in parse_reports(outs[1])


def test_refuses_a_wrong_device_and_too_few_gpus(torch_py):
    p = subprocess.run([torch_py, "zoo_comm_allreduce_nvlink_bf16.py", "--seconds", "1", "--device", "tpu"], cwd=WL,
                       capture_output=True, text=True, timeout=120, env=_clean_env())
    assert p.returncode == 2 and "cuda or cpu" in p.stderr


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NCCL_", "MASTER_"))}


def test_zoo_rows_from_the_recorded_4x_h200_allreduce_against_the_nvlink_label(tmp_path):
    """The rows' code on a real recording (tests/data/recordings/allreduce-h200.jsonl.gz: 256 MiB all-reduce,
    4x H200): classed communication_bound as the NVLink workload's label says, its bus bandwidth read."""
    import comm_zoo_rows as czr

    rec = REPO / "tests" / "data" / "recordings" / "allreduce-h200.jsonl.gz"
    r = czr.row(rec, czr.label_of("zoo_comm_allreduce_nvlink_bf16"))
    assert r["class"] == "communication_bound" and r["ok"] and r["gpus"] == 4, r
    assert r["achieved"] is None  # recorded before the workloads' own figures went into the header
    # under another name, as record_workloads would write a zoo_comm recording, the CLI finds and tables it
    (tmp_path / "zoo_comm_allreduce_nvlink_bf16-h200.jsonl.gz").write_bytes(rec.read_bytes())
    assert czr.main([str(tmp_path), "--md", str(tmp_path / "rows.md")]) == 0
    assert "| zoo_comm_allreduce_nvlink_bf16-h200.jsonl.gz | communication_bound | communication_bound |" in \
        (tmp_path / "rows.md").read_text()
    # a label the diagnosis does not meet is named WRONG and fails the run
    assert czr.row(rec, dict(czr.label_of("zoo_comm_p2p_copy")))["ok"] is False
    assert czr.main([str(tmp_path / "none")]) == 2


def test_importing_the_workloads_helpers_changes_no_environment():
    """The NVLS-off variables are the ranks' (set by run()); set at import they reached every job the
    test cluster ran later in the same pytest process (test_env_slurm saw NCCL_NVLS_ENABLE=0 'injected')."""
    import importlib

    keys = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
    saved = {k: os.environ.pop(k) for k in keys if k in os.environ}
    try:
        before = dict(os.environ)
        importlib.reload(_comm)
        assert dict(os.environ) == before
    finally:
        os.environ.update(saved)
    assert _comm.NO_MULTICAST["NCCL_NVLS_ENABLE"] == "0"
