"""The AdminComment payload's zlib preset dictionary: the summary's vocabulary (keys, the estimates' and the
diagnosis' fixed texts), so the ``z=`` payload of an 8-GPU node pays for each key and text once less.

Made once from the summaries of two recorded H100 jobs (train_step, membound) and the GPU table's sources
(``benchmarks/report_sizes.py`` has the measure). **Never edit a dictionary**: a payload names the one it
was compressed with by its Adler-32 in the zlib header, and an edited one would make every AdminComment
already written undecodable; add a new one to ``BY_ID`` and make it ``CURRENT`` instead
(tests/unit/test_admincomment.py pins each one's Adler-32).
"""

from __future__ import annotations

import zlib

V1 = (
    b'NVIDIA A10 datasheet (nvidia.com/en-us/data-center/products/a10-gpu), sparse figures halvedNVIDI'
    b'A A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100), dense figuresNVIDIA GH200 '
    b'datasheet, sparse figures halvedNVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-cen'
    b'ter/h100), sparse figures halvedNVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-cen'
    b'ter/h200), sparse figures halvedNVIDIA HGX B200 datasheet (nvidia.com/en-us/data-center/hgx), pe'
    b'r GPU, sparse figures halvedNVIDIA L4 datasheet (nvidia.com/en-us/data-center/l4), sparse figure'
    b's halvedNVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s), sparse figures halvedNVIDIA V'
    b'100 datasheet (nvidia.com/en-us/data-center/v100){"imbalanced":false,"evidence":["DRAM active 73'
    b'%, tensor active 0%","estimated 2435 GB/s per GPU of 3350 GB/s peak (73% of the bandwidth roof, '
    b'\xc2\xb115%)"],"recommendations":["move fewer bytes: a narrower storage datatype where accuracy allows'
    b' (each halving of the element size halves the traffic), fewer passes over the data","fuse elemen'
    b'twise operations so intermediates stay on chip (torch.compile)","an algorithm with more reuse pe'
    b'r byte (tiling, blocking for cache)"],"notes":[],"confidence":"high","findings":[],"roofline":{"'
    b'tensor_tflops":0.0,"fp32_tflops":0.2,"fp64_tflops":0.0,"tflops":0.2,"dram_gbps":2435.4,"kinds":{'
    b'"fp32":[0.4,0.2],"tensor":[0.0,0.0]},"by_kind":false,"tflops_job":0.2,"kind":"fp32","kind_error_'
    b'pct":15.0,"compute_roof_pct":0.4,"tensor_peak_pct":0.0,"dram_roof_pct":72.7,"clock_scaled":true,'
    b'"model":"H100 SXM"},"unused":null,"busy_class":null,"phases":[],"class":"memory_bound"}{"schema"'
    b':"gpuperf.summary.v1","job_id":1,"user":"alice","uid":1000,"nodes":["n1"],"start":1763700000.0,"'
    b'end":1763700036.7019737,"wall_s":36.7,"gpus":[{"node":"n1","gpu":0,"name":"NVIDIA H100 80GB HBM3'
    b'","samples":38,"seconds":37.7,"sm_active_pct":44.1,"sm_occupancy_pct":21.4,"tensor_active_pct":1'
    b'4.4,"dram_active_pct":24.5,"fp16_active_pct":0.0,"fp32_active_pct":1.5,"fp64_active_pct":0.0,"in'
    b't_active_pct":null,"tensor_hmma_pct":null,"tensor_imma_pct":null,"tensor_dfma_pct":null,"tensor_'
    b'dmma_pct":null,"util_gpu_pct":52.4,"power_mean_w":364.3,"sm_clock_mhz":1608.6,"util_minus_sm_pct'
    b'":8.3,"mem_peak_mib":4883.0,"mem_total_mib":81559.0,"mem_peak_pct":6.0,"power_max_w":621.4,"powe'
    b'r_limit_w":700.0,"energy_j":13623.0,"energy_kwh":0.0038,"energy_source":"counter","nvlink_tx_byt'
    b'es":null,"nvlink_rx_bytes":null,"nvlink_bps":null,"pcie_tx_bytes":277123563.0,"pcie_rx_bytes":19'
    b'13944407.0,"pcie_bps":58115471.0,"throttle_s":{},"idle_s":15.7,"idle_pct":41.6,"temp_max_c":52.0'
    b'}],"job":{"gpu_count":1,"gpu_hours":0.01,"wasted_gpu_hours":0.006,"sm_active_pct":44.1,"sm_occup'
    b'ancy_pct":21.4,"tensor_active_pct":14.4,"dram_active_pct":24.5,"fp16_active_pct":0.0,"fp32_activ'
    b'e_pct":1.5,"fp64_active_pct":0.0,"int_active_pct":null,"tensor_hmma_pct":null,"tensor_imma_pct":'
    b'null,"tensor_dfma_pct":null,"tensor_dmma_pct":null,"util_gpu_pct":52.4,"sm_clock_mhz":1608.6,"ut'
    b'il_minus_sm_pct":8.3,"mem_peak_mib":4883.0,"mem_peak_pct":6.0,"power_mean_w":364.3,"power_max_w"'
    b':621.4,"power_limit_w":700.0,"power_mean_pct_of_limit":52.0,"energy_j":13623.0,"energy_kwh":0.00'
    b'38,"nvlink_tx_bytes":null,"nvlink_rx_bytes":null,"pcie_tx_bytes":277123563.0,"pcie_rx_bytes":191'
    b'3944407.0,"nvlink_bps":null,"pcie_bps":58115471.0,"throttle_s":{},"idle_s":15.7,"idle_pct":41.6,'
    b'"temp_max_c":52.0,"sm_active_spread_pct":null,"util_spread_pct":null},"hosts":{"n1":{"cpu_effici'
    b'ency_pct":null,"cpu_time_s":0.0,"cpu_source":"processes","cpus_allocated":null,"wall_s":36.7,"rs'
    b's_peak_mib":null,"iowait_pct":null}},"env":{"n1":{"NCCL_IB_HCA":{"value":"mlx5_0,mlx5_1,mlx5_2,m'
    b'lx5_3","reason":"ACTIVE IB ports"},"NCCL_SOCKET_IFNAME":{"value":"eth0","reason":"default route"'
    b'},"OMP_NUM_THREADS":{"value":"8","reason":"cpus per task"}}},"affinity":{"n1":{"0":{"gpu":0,"cpu'
    b's":[0,1,2,3,4,5,6,7],"mem_policy":"bind"}}},"estimates":{"label":"estimate: activity x its kind\''
    b's dense peak at the clock run, \xc2\xb115% (HMMA at bf16: TF32 half, FP8 2x)","model":"H100 SXM","sour'
    b'ce":"NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100), sparse figures h'
    b'alved","peak_tensor_tflops":989.5,"peak_fp32_tflops":67.0,"peak_mem_bw_gbps":3350.0,"fp8":true,"'
    b'ridge_flop_per_byte":295.4,"error_pct":15.0,"clock_scaled":true,"kind":"tensor","by_kind":false,'
    b'"tensor_tflops_est":125.2,"tflops_est_per_gpu":125.2,"tflops_est_job":125.2,"dram_gbps":820.8,"i'
    b'ntensity_flop_per_byte":152.6,"roofline_side":"memory","attainable_tflops":511.2,"roofline_pct":'
    b'24.5},"quality":{"samples":38,"gaps":0,"gap_s":0,"partial":false,"reasons":[],"nodes_expected":['
    b'"n1"],"nodes_missing":[]},"diagnosis":{"imbalanced":false,"evidence":["GPU utilization 52%: kern'
    b'els ran 52% of the time, SM active 44%","host CPU and I/O figures absent"],"recommendations":["f'
    b'eed the GPU faster: more DataLoader workers (num_workers), pin_memory=True, prefetching","move d'
    b'ecoding/augmentation to the GPU (NVIDIA DALI, torchvision v2 on CUDA)","overlap host work with G'
    b'PU work (non_blocking copies, CUDA streams)"],"notes":["tensor kind not measured: priced at bf16'
    b' (FP64 tensor reads up to 15x high, FP8 2x low)"],"confidence":"high","findings":[],"roofline":{'
    b'"tensor_tflops":125.2,"fp32_tflops":0.8,"fp64_tflops":0.0,"tflops":125.2,"dram_gbps":820.8,"kind'
    b's":{"fp32":[1.5,0.8],"tensor":[14.4,125.2]},"by_kind":false,"tflops_job":125.2,"kind":"tensor","'
    b'kind_error_pct":15.0,"bracket":[8.5,250.4],"compute_roof_pct":14.4,"tensor_peak_pct":12.7,"dram_'
    b'roof_pct":24.5,"clock_scaled":true,"model":"H100 SXM"},"unused":null,"busy_class":null,"phases":'
    b'[],"class":"input_bound"}}'
)

CURRENT = V1
BY_ID: dict[int, bytes] = {zlib.adler32(V1): V1}
