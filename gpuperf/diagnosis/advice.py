"""What to change: recommendations per class that depend on the distance to the roofline and on the kind
of math the job does, and the findings that stand beside the class (tensor cores unused, SMs
underfilled, host<->device copies).

Every recommendation rests on a figure the job's evidence names; none is one the job already follows
(no precision advice stated as a fact to tensor work whose datatype the counters do not give: HMMA
activity counts FP8, fp16/bf16 and TF32 alike; no TF32 without FP32 math at high intensity, no pinned
memory to copies already at the pinned rate); where the figures cannot tell two causes apart the text
says so and names the measurement that would.
"""

from __future__ import annotations

from typing import Any

from gpuperf.model import gpuspecs
from gpuperf.diagnosis.signals import Signals, pct

_BALANCE = "balance the work across GPUs (some GPUs far less busy than others: stragglers, uneven stages)"
_NSYS = "an Nsight Systems trace (nsys profile) shows which"


def framework(s: Signals) -> str | None:
    """The framework whose own terms the advice may use: one the job's CUDA processes mapped (``frameworks.py``),
    PyTorch first; None where none was read or none is named (plain CUDA): framework-neutral wording."""
    for fw in ("torch", "jax", "cupy", "tensorflow"):
        if s.frameworks and fw in s.frameworks:
            return fw
    return None


# advice in each framework's own terms; the neutral form (None) where no framework is in evidence
_FUSE = {"torch": "torch.compile", "jax": "jax.jit over the whole step (XLA fuses what it sees at once)",
         "cupy": "cupy.fuse or one ElementwiseKernel/RawKernel", "tensorflow": "tf.function(jit_compile=True)",
         None: "a compiler that fuses them, or one hand-written kernel"}
_LOADER = {"torch": "more DataLoader workers (num_workers), pin_memory=True, prefetching",
           "jax": "a loader with parallel workers that prefetches, and jax.device_put of the next batch while this "
                  "one runs",
           "tensorflow": "tf.data with num_parallel_calls and prefetch(tf.data.AUTOTUNE)",
           None: "more loader processes or threads, prefetching the next batch while this one runs"}
_PINNED = {"torch": "pin_memory=True, non_blocking=True, a side CUDA stream",
           "cupy": "cupyx.empty_pinned host buffers, copies on a side cupy.cuda.Stream",
           None: "page-locked host buffers (cudaHostAlloc), cudaMemcpyAsync on a side stream"}
_MULTI = {"torch": "torchrun --nproc-per-node, DistributedDataParallel",
          "jax": "jax.sharding over all local devices",
          None: "one process per GPU, or the program's multi-GPU mode"}
_SEES = {"torch": "torch.cuda.is_available(), device placement", "jax": "jax.devices(), the arrays' device",
         "cupy": "cupy.cuda.runtime.getDeviceCount(), CUDA_VISIBLE_DEVICES",
         None: "nvidia-smi inside the job, CUDA_VISIBLE_DEVICES, the program's device selection"}
_TF32 = {"torch": "torch.backends.cuda.matmul.allow_tf32 = True, or bf16 autocast",
         "jax": "jax.default_matmul_precision('tensorfloat32'), or bf16 inputs",
         "cupy": "CUPY_TF32=1", "tensorflow": "tf.config.experimental.enable_tensor_float_32_execution(True)",
         None: "cuBLAS's TF32 math mode (CUBLAS_TF32_TENSOR_OP_MATH), or bf16 inputs"}
_CACHE = {"torch": "torch.compile's kernels (TORCHINDUCTOR_CACHE_DIR on node-local disk)",
          "jax": "XLA's compiled programs (jax's persistent compilation cache, jax_compilation_cache_dir)",
          None: "compiled kernels (the framework's persistent compilation cache)"}
_OVERLAP_COMM = {"torch": "DDP bucket_cap_mb, FSDP forward/backward prefetch", None: "gradient bucketing, prefetching "
                 "the next layer's parameters"}


def _in(table: dict, s: Signals) -> str:
    return table.get(framework(s), table[None])


def findings(s: Signals, th: dict[str, float]) -> list[dict[str, str]]:
    """Findings that hold whatever the class: each {"kind", "text", "fix"}."""
    out = []
    busy = s.sm is not None and s.sm >= 50.0
    # FP32 math at high intensity: the FP32 pipe, past its bar, is a larger share of its threshold than
    # DRAM of its own (elementwise FP32 kernels are DRAM-bound and must not be told to use TF32), with
    # no tensor work of any kind and no FP64
    fp32_leads = (s.fp32 is not None and s.fp32 >= th["fp32_busy_pct"]
                  and (s.dram is None or s.fp32 / th["compute_pipe_pct"] > s.dram / th["memory_dram_pct"]))
    no_tensor = (s.tensor is not None and s.tensor < th["tensor_unused_pct"]
                 and all(x is None or x < th["tensor_unused_pct"] for x in (s.hmma, s.imma, s.dmma)))
    tiled = s.occupancy is not None and s.occupancy < th["matrix_occupancy_pct"]
    if busy and fp32_leads and no_tensor and tiled and (s.fp64 is None or s.fp64 < th["tensor_unused_pct"]):
        out.append({"kind": "tensor_cores_unused",
                    "text": f"tensor cores unused: tensor active {pct(s.tensor)} while the FP32 pipe is "
                            f"{pct(s.fp32)} busy, DRAM {pct(s.dram)}, {pct(s.occupancy)} of warp slots occupied "
                            "(FP32 math at low occupancy, as tiled matrix kernels run)",
                    "fix": "FP32 matrix products cannot be told from other FP32 math (n-body, stencils) by the "
                           "counters; kernel names in an Nsight Systems trace tell (gemm, sgemm or cutlass in them); "
                           f"only if they are matrix products: TF32 ({_in(_TF32, s)}) runs them on the tensor cores "
                           "several times faster"})
    quiet = ((s.pipes is not None and s.pipes < th["compute_pipe_pct"])
             and (s.dram is not None and s.dram < th["memory_dram_pct"]))
    if busy and quiet and s.occupancy is not None and s.occupancy < th["underfilled_occupancy_pct"]:
        out.append({"kind": "sms_underfilled",
                    "text": f"SMs underfilled: SM active {pct(s.sm)} but only {pct(s.occupancy)} of warp slots "
                            f"occupied, with math pipes at {pct(s.pipes)} and DRAM at {pct(s.dram)}",
                    "fix": "give each kernel more parallel work: larger batches, larger thread blocks/grids, "
                           "fewer registers or shared memory per block"})
    link = s.link_pct
    if link is not None and link >= th["transfer_link_pct"] and s.sm is not None and s.sm >= link:
        out.append({"kind": "host_copies",
                    "text": f"host<->device copies: PCIe {s.pcie_dir_gbps:.1f} GB/s in the busier direction, "
                            f"{link:.0f}% of the link ({s.pcie_link_from})",
                    "fix": f"overlap the copies with compute ({_in(_PINNED, s)}), prefetch the next batch while "
                           "this one runs"})
    return out


def recommend(cls: str, s: Signals, spec: gpuspecs.GpuSpec | None, roof: dict[str, Any] | None,
              found: list[dict[str, str]], imbalanced: bool, th: dict[str, float]) -> list[str]:
    """One to three recommendations, each naming the evidence it rests on; findings' fixes come first, imbalance
    last."""
    r = [_cite(f["fix"], f["text"].split(" (")[0]) for f in found]
    r += [_cite(x, basis(cls, s)) for x in _by_class(cls, s, spec, roof, th)]
    if imbalanced and cls not in ("unused_gpus", "no_data"):
        r = r[:2] + [_cite(_BALANCE, "SM activity or utilization differs across GPUs by the imbalance bar")]
    out: list[str] = []
    for x in r:
        if x not in out:
            out.append(x)
    return out[:3]


def _cite(text: str, evidence: str) -> str:
    return f"{text} [evidence: {evidence}]" if evidence else text


def basis(cls: str, s: Signals) -> str:
    """The figures a class's recommendations rest on, short (the evidence list has them in full)."""
    fw = f"; framework: {', '.join(s.frameworks) or 'none named'}" if s.frameworks is not None else ""
    if cls == "no_data":
        return "no GPU activity sampled"
    if cls in ("idle", "unused_gpus"):
        return f"GPU utilization {pct(s.util)}, SM active {pct(s.sm)}, no kernel {pct(s.idle_share)} of the time"
    if cls == "startup":
        return f"no GPU work, host CPUs {pct(s.cpu_eff)} busy" + fw
    if cls == "busy_unprofiled":
        return f"GPU utilization {pct(s.util)}; no SM, pipe or DRAM activity measured"
    if cls == "input_bound":
        return f"GPU utilization {pct(s.util)}, SM active {pct(s.sm)}, host CPUs {pct(s.cpu_eff)} busy" + fw
    if cls in ("launch_bound", "underfilled"):
        return f"GPU utilization {pct(s.util)}, SM active {pct(s.sm)}" + fw
    if cls == "transfer_bound":
        return f"PCIe {pct(s.link_pct)} of the link, SM active {pct(s.sm)}"
    if cls == "communication_bound":
        nv = "n/a" if s.nvlink_gbps is None else f"{s.nvlink_gbps:.1f} GB/s"
        return f"NVLink {nv} per GPU, tensor {pct(s.tensor)}, SM active {pct(s.sm)}" + fw
    if cls in ("memory_bound", "latency_bound"):
        return f"DRAM {pct(s.dram)}, SM active {pct(s.sm)}, math pipes {pct(s.pipes)}, integer {pct(s.int_pipe)}" + fw
    if cls == "compute_bound":
        return f"tensor {pct(s.tensor)}, FP pipes {pct(s.fp_max)}, integer {pct(s.int_pipe)}, DRAM {pct(s.dram)}" + fw
    return f"hardware/thermal throttling {pct(s.hw_throttle_share)} of the GPU time"


def kind_of(s: Signals, roof: dict[str, Any] | None) -> str | None:
    """The kind of math the job mostly did: the roofline's dominant kind, else from the pipes measured."""
    if roof and roof.get("kind"):
        return roof["kind"]
    acts = {"hmma": s.hmma, "imma": s.imma, "dmma": s.dmma, "fp16": s.fp16, "fp32": s.fp32, "fp64": s.fp64,
            "tensor": None if s.by_kind else s.tensor}
    known = {k: v for k, v in acts.items() if v is not None}
    return max(known, key=known.get) if known else None


def _near_roof(kind: str | None, s: Signals, spec: gpuspecs.GpuSpec | None, roof_pct: float) -> list[str]:
    """Advice at the math roof, worded for the datatype the job computes in."""
    head = f"near the math roof ({pct(roof_pct)} activity of its busiest pipe): only less math per result helps"
    cheaper = "a cheaper algorithm (fewer FLOPs: sparsity, smaller models, distillation)"
    int_pipe = s.int_pipe is not None and s.int_pipe >= roof_pct
    if int_pipe:
        return [f"the integer pipe is the busiest ({pct(s.int_pipe)}): fewer integer operations per element "
                "(32-bit instead of 64-bit indices, simpler index arithmetic, CUB/Thrust primitives)"]
    if kind == "dmma":
        return [head + " (FP64 on the tensor cores, already the fastest FP64 path)",
                "mixed-precision iterative refinement (cuSOLVER's IRS solvers) where the numerics allow FP32 or "
                "lower inner steps", "a cheaper algorithm (fewer FLOPs)"]
    if kind == "imma":
        return [head + " (INT8 on the tensor cores)", "2:4 structured sparsity on the tensor cores, or a smaller model"]
    if kind == "fp64":
        if spec is not None and spec.tensor_fp64_tflops:
            return [head + " (FP64 on CUDA cores)", f"if this FP64 math is matrix products: cuBLAS/cuSOLVER run "
                    f"them on the {spec.model}'s FP64 tensor cores ({spec.tensor_fp64_tflops:.0f} TFLOP/s, "
                    f"{spec.tensor_fp64_tflops / spec.fp64_tflops:.0f}x this pipe's peak)"]
        return [head + " (FP64 on CUDA cores)", "a cheaper algorithm (fewer FLOPs)"]
    if kind == "fp16":
        return [head + " (half precision on CUDA cores)", "if this is matrix products: run them on the tensor cores "
                "(cuBLAS" + (", torch.matmul in fp16/bf16)" if framework(s) == "torch" else " in fp16/bf16)")]
    if kind == "fp32":
        # FP32 matrix math gets the tensor-cores finding; any FP32 math: fewer or cheaper operations
        return [head + " (FP32 on CUDA cores)", "fewer or cheaper operations per element: algebraic "
                "simplification, fused multiply-adds, fast intrinsics (__expf) where accuracy allows"]
    # tensor work: HMMA (fp16/bf16, TF32 or FP8 alike), or a tensor share whose kind was not measured: the
    # datatype is not in evidence, so no precision is recommended (``notes`` says what a narrower one gives)
    return [head, "the tensor datatype is not measured: kernel names in an Nsight Systems trace show it (see notes)",
            cheaper]


def _dtype_measure(fp8: bool, fw: str | None = None) -> str:
    """What tells the datatype of tensor work: Nsight Compute's tensor-path operations by source datatype, or the
    code's matmul inputs (FP8 named only on a GPU that has it; PyTorch's names only where PyTorch is in evidence)."""
    if fp8:
        return ("Nsight Compute's tensor operations by source datatype (its sm__ops_path_tensor_src_fp8, _bf16, "
                "_fp16 and _tf32 metrics) or the dtype of the code's matmul inputs ("
                + ("torch.float8_e4m3fn or a Transformer Engine fp8_autocast region is FP8)" if fw == "torch"
                   else "a float8 e4m3/e5m2 input is FP8)"))
    return ("Nsight Compute's tensor operations by source datatype (its sm__ops_path_tensor_src_bf16, _fp16 and "
            "_tf32 metrics) or the dtype of the code's matmul inputs")


def notes(cls: str, s: Signals, spec: gpuspecs.GpuSpec | None, roof: dict[str, Any] | None,
          th: dict[str, float]) -> list[str]:
    """What the figures cannot decide but a user may: which peak tensor work is priced at, and the precision
    question of tensor work at its roof."""
    out = []
    fp8 = spec is not None and spec.fp8
    if roof is not None and not roof.get("by_kind") and (s.tensor or 0.0) >= th["tensor_unused_pct"]:
        out.append("tensor kind not measured: priced at bf16 (FP64 tensor reads up to 15x high" + (", FP8 2x low)" if fp8
                                                                                                 else ")"))
    kind = kind_of(s, roof)
    roof_pct = (roof or {}).get("compute_roof_pct", s.pipes)
    if cls != "compute_bound" or kind not in ("hmma", "tensor") or roof_pct is None or roof_pct < th["roof_near_pct"]:
        return out
    # the datatype is not in evidence: what a narrower one would give is said only under the condition, with what
    # tells it (an FP8 job must not read that FP8 would double it; issue 30)
    counts = (f"HMMA activity counts {'FP8, ' if fp8 else ''}fp16/bf16 and TF32 tensor work alike" if kind == "hmma"
              else "tensor activity without per-kind figures counts every tensor datatype alike")
    tell = _dtype_measure(fp8, framework(s))
    if fp8:
        out.append(f"tensor datatype not measured: {counts}, so whether this job already computes in FP8 cannot be "
                   f"told from it; {tell} tell. Only if they show bf16/fp16: FP8 (Transformer Engine) can nearly "
                   f"double the tensor rate on this {spec.model}; if TF32: bf16/fp16 doubles it where accuracy allows")
    else:
        out.append(f"tensor datatype not measured: {counts}, so which of them this job computes in cannot be told "
                   f"from it; {tell} tell. Only if they show TF32: bf16/fp16 doubles the tensor rate where accuracy "
                   "allows")
    return out


def _fewer_bytes(s: Signals) -> str:
    """Advice at the bandwidth roof to move fewer bytes, for the datatype in evidence (none named where none is in
    evidence: HMMA activity is no evidence of 16-bit data, it counts FP8 and TF32 tensor work alike; the FP16
    pipe's is), under its condition: DRAM activity counts the bytes moved, not the bytes the job needs, so whether
    fewer would do (an already fused, one-pass kernel needs them all) takes a measurement."""
    if (s.fp64 or 0.0) >= 1.0 or (s.dmma or 0.0) >= 1.0:
        how = "FP32 storage with FP64 accumulation where the numerics allow, fewer passes over the data"
    elif (s.fp16 or 0.0) >= 1.0:
        how = "8-bit storage for 16-bit data where accuracy allows (FP8 activations, quantised weights)"
    else:
        how = ("a narrower storage datatype where accuracy allows (each halving of the element size halves the "
               "traffic), fewer passes over the data")
    return ("near the bandwidth roof only fewer bytes help, but whether the job moves more than it needs cannot be "
            "told from the counters (they count bytes moved, not bytes needed); Nsight Compute's dram__bytes_read.sum "
            f"against the data's own size tells; if it does, or the data could be narrower: {how}")


def _by_class(cls: str, s: Signals, spec: gpuspecs.GpuSpec | None, roof: dict[str, Any] | None,
              th: dict[str, float]) -> list[str]:
    near = th["roof_near_pct"]
    if cls == "no_data":
        return ["check the gpuperf daemon ran on the job's nodes for the whole job (systemctl status gpuperfd, "
                "its log) and that its sampler covers the allocated GPUs"]
    if cls == "unused_gpus":
        return ["request only the GPUs the job uses (--gres=gpu:N), or make the program use all of them "
                f"({_in(_MULTI, s)})"]
    if cls == "startup":
        return ["the job ended before its GPU work began: if it was meant to reach it, give it a longer --time, or time "
                "its start-up (imports, model build, compilation, data loading) to find what it waits on (py-spy dump "
                "of the running process shows where it is)",
                f"keep what every run rebuilds: {_in(_CACHE, s)}, the pre-processed data on node-local storage"]
    if cls == "idle":
        return ["request only the GPUs the job uses (--gres=gpu:N), or none for CPU-only work",
                f"check the program sees and uses the GPU ({_in(_SEES, s)})",
                "end interactive sessions when done; use a shorter --time for them"]
    if cls == "busy_unprofiled":
        return ["enable profiling metrics (GPM on Hopper and later through the nvml backend, or DCGM) to tell "
                "compute-, memory- and launch-bound apart"]
    if cls == "input_bound":
        busy_host = s.cpu_eff is not None and s.cpu_eff >= th["input_host_cpu_pct"] * 4
        feed = f"feed the GPU faster: {_in(_LOADER, s)}"
        if not busy_host:
            # the GPU waits, but on what is not in evidence without the host's figures (a loader, the program's own
            # Python between steps, a lock): the trace shows it, and the loader advice is under its condition
            feed = ("what the GPU waits on cannot be told from its counters" + (" (host CPU figures absent)"
                    if s.cpu_eff is None else f" (host CPUs {pct(s.cpu_eff)} busy)") + "; an Nsight Systems trace "
                    "(nsys profile) shows the host threads in the gaps; if it is data loading: " + feed.split(": ", 1)[1])
        r = [feed]
        r.append("stage the dataset on node-local NVMe or a faster filesystem (high I/O wait)"
                 if s.iowait is not None and s.iowait >= 10 else
                 "if the host decodes or augments data: move that to the GPU (NVIDIA DALI"
                 + (", torchvision v2 on CUDA)" if framework(s) == "torch" else ")"))
        r.append("overlap host work with GPU work (asynchronous copies, CUDA streams)")
        return r
    if cls == "transfer_bound" and (s.link_pct is None or s.link_pct < th["transfer_link_pct"]) and \
            (s.nvlink_gbps or 0.0) >= th["comm_nvlink_gbps"]:
        return ["keep each GPU's data on it: partition the work so a GPU reads what it holds, not its peers' memory",
                "overlap the peer copies with compute (cudaMemcpyPeerAsync on a side stream) or move fewer bytes"]
    if cls == "transfer_bound":
        r = ["keep the data on the GPU: copy it once and reuse it across steps instead of moving it every step"]
        if (s.link_pct or 0.0) >= near:
            r.append(f"the link runs near its rate ({pct(s.link_pct)} of it): only fewer bytes help (a narrower "
                     "datatype or compressed data before the copy, fewer round trips)")
        else:
            r.append("copy from pinned (page-locked) host memory, asynchronously and overlapped with compute "
                     f"({_in(_PINNED, s)}): pageable copies go through a staging buffer at a fraction of the link's rate")
        # GPUDirect only where the node's topology found its module (three recommendations at most: one line)
        direct = (["GPUDirect RDMA (nvidia_peermem): data that arrives over the network can land in GPU memory "
                   "directly (NCCL, UCX, storage clients that use it)"] if s.gdr else []) + \
                 (["GPUDirect Storage (nvidia_fs): file data (NVMe, parallel file systems) can move between storage "
                   "and GPU memory directly (cuFile, KvikIO, DALI's GDS reader)"] if s.gds else [])
        if direct:
            r.append("this node has " + "; and ".join(direct) + ", without the copy through host memory")
        elif s.gds is False:
            r.append("fewer, larger transfers: batch many small copies into one; for file data GPUDirect Storage "
                     "would skip the host bounce, but this node lacks it (nvidia_fs not loaded: an admin's install)")
        else:
            r.append("fewer, larger transfers: batch many small copies into one")
        return r
    if cls == "launch_bound":
        gaps = 100.0 - s.util if s.util is not None else None
        graphs = {"torch": "capture the step in CUDA graphs or use torch.compile(mode='reduce-overhead')",
                  "jax": "jit the whole step, so XLA launches it as one program",
                  None: "capture the step in CUDA graphs"}
        return [f"fewer, larger kernels: fuse small operations ({_in(_FUSE, s)}) and batch work so each kernel fills "
                "the GPU",
                f"if the trace shows gaps between short kernels: {_in(graphs, s)}; that wins back at most the "
                f"{pct(gaps)} of the time with no kernel ({_NSYS})"]
    if cls == "underfilled":
        return ["give each kernel more blocks: larger batches or problem sizes per launch, or split the work so the "
                "grid covers every SM (CUDA graphs would not help: a kernel is running nearly all the time)",
                "run independent work side by side (CUDA streams, or several processes through MPS) to fill idle SMs",
                "Nsight Compute's launch statistics (grid size, waves per SM) show how far each grid falls short"]
    if cls == "latency_bound":
        return ["make memory accesses coalesced and local: contiguous layouts, indices sorted or bucketed before a "
                "gather/scatter, transposes tiled through shared memory",
                "use library kernels (CUB/Thrust sort and scan, cuBLAS/cuTENSOR transposes, fused framework ops) and "
                "replace contended global atomics with per-block reductions",
                "profile one kernel with Nsight Compute (ncu --set full): its warp-stall reasons tell memory latency, "
                "atomics and synchronisation apart"]
    if cls == "memory_bound":
        dram = (roof or {}).get("dram_roof_pct") if roof else s.dram
        # whether the kernels are already fused (a fused optimizer step, an XLA-fused chain) the counters cannot tell
        fuse = ("whether these kernels are already fused cannot be told from the counters; kernel names in an Nsight "
                "Systems trace tell (several elementwise kernels in a row over the same data); if they are not: "
                f"fuse them ({_in(_FUSE, s)})")
        if dram is not None and dram >= near:
            # at the bandwidth roof only less traffic helps
            return [_fewer_bytes(s), fuse, "an algorithm with more reuse per byte (tiling, blocking for cache)"]
        return [fuse, "larger, contiguous accesses: bigger batches, contiguous arrays"]
    if cls == "compute_bound":
        roof_pct = (roof or {}).get("compute_roof_pct")
        if roof_pct is None:
            roof_pct = s.pipes
        if s.int_pipe is not None and (roof_pct is None or s.int_pipe > roof_pct):
            roof_pct = s.int_pipe
        if roof_pct is not None and roof_pct >= near:
            return _near_roof(kind_of(s, roof), s, spec, roof_pct)
        return [f"far from the math roof ({pct(roof_pct)} tensor/FP pipe activity): raise the work per kernel: larger "
                "batch or micro-batch, longer sequences per step",
                f"if an Nsight Systems trace shows short kernels with gaps between them: fuse them ({_in(_FUSE, s)})"]
    if cls == "communication_bound":
        r = [f"overlap communication with compute ({_in(_OVERLAP_COMM, s)})"]
        if s.nccl_on_tcp:
            r.append("check NCCL uses InfiniBand, not TCP sockets (NCCL_DEBUG=INFO shows NET/IB vs NET/Socket)")
        elif s.gpu_count >= 2 and (s.nvlink_gbps is None or s.nvlink_gbps < 1.0) and s.nodes == 1:
            r.insert(0, "check NCCL_P2P_DISABLE, NCCL_SHM_DISABLE and NCCL_NET are unset: NCCL_DEBUG=INFO should show "
                        "P2P/NVLink between the GPUs of a node, not NET/Socket")
        else:
            r.append("keep tensor parallelism inside one NVLink domain, data parallelism across nodes")
        r.append("larger gradient buckets or gradient accumulation to communicate less often")
        return r
    return ["tell the cluster admins: GPUs throttled by hardware/thermal limits (cooling, power delivery)",
            "compare with a run on another node; the node may need service"]
