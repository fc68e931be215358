"""Depthwise 3x3 convolution (groups = channels, MobileNet/EfficientNet style), bf16, channels-last, N=64
C=512 56x56 (cuDNN, autotuned).

Bytes per call: the input read once and the output written once (2 x N C H W x 2 bytes = 411 MB); the
3x3 halo re-reads come from cache and the 9 x C weights are negligible. FLOPs: 2 x 9 x N C H W (1.8 GFLOPs):
4.5 FLOPs a byte, no matrix product for tensor cores.
Start-up: cuDNN autotuning in the warm-up calls (~1 s).
"""

import torch
import torch.nn.functional as F

from _zoo import cli, timed, torch_sync

LABEL = {"class": "memory_bound", "dtype": "bf16", "kind": "depthwise_convolution", "framework": "torch",
         "rate": "gbps", "exact": True,
         "contradicts": ["dataloader", "tf32", "attention", "cuda_graphs", "math_roof", "fp8", "fused_optimizer"],
         "what": "a depthwise convolution: one pass over its activations at 4.5 FLOPs/byte, bandwidth-bound"}

torch.backends.cudnn.benchmark = True
a = cli(__doc__, n=(int, 64, "batch"), c=(int, 512, "channels"), hw=(int, 56, "height = width"))
x = torch.randn(a.n, a.c, a.hw, a.hw, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
w = torch.randn(a.c, 1, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
elems = a.n * a.c * a.hw * a.hw
timed("zoo_app_depthwise_conv_bf16", a.seconds, lambda: F.conv2d(x, w, padding=1, groups=a.c), torch_sync,
      nbytes=2 * 2 * elems, flops=2 * 9 * elems, batch=50, warm=3)
