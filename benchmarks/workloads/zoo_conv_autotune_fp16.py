"""fp16 convolutions with cudnn.benchmark: autotunes 16 layer shapes first (start-up), then trains one.

The timed work (t_switch..t_end) is the 3x3 convolution N=64 C=K=256 56x56, 2 N K C H W 9 FLOPs per call.
"""

import time

import torch
import torch.nn.functional as F

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "fp16", "kind": "convolution", "framework": "torch", "rate": "tflops",
         "exact": True, "startup": "cudnn autotune",
         "contradicts": ["tf32", "bf16", "attention", "dataloader", "cuda_graphs"],
         "what": "a compute-bound fp16 convolution whose first seconds are cuDNN's autotuning of many shapes"}

torch.backends.cudnn.benchmark = True
a = cli(__doc__, n=(int, 64, "batch"), c=(int, 256, "channels"), hw=(int, 56, "height = width"))
t_tune = time.time()
for i, (c, hw, k) in enumerate([(c, hw, k) for c in (64, 128, 192, 320) for hw in (28, 56) for k in (1, 3)]):
    xi = torch.randn(32, c, hw, hw, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    wi = torch.randn(c, c, k, k, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
    F.conv2d(xi, wi, padding=k // 2)
torch_sync()
x = torch.randn(a.n, a.c, a.hw, a.hw, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
w = torch.randn(a.c, a.c, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)
t_switch = time.time()
timed("zoo_conv_autotune_fp16", a.seconds, lambda: F.conv2d(x, w, padding=1), torch_sync,
      flops=2 * a.n * a.c * a.c * a.hw * a.hw * 9, batch=20, warm=3, t_tune=round(t_tune, 3),
      t_switch=round(t_switch, 3))
