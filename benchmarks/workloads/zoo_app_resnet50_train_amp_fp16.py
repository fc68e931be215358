"""torchvision ResNet-50 training step with automatic mixed precision (autocast fp16 + GradScaler), fp32
master weights, SGD with momentum, channels-last, batch 128 of synthetic 224x224 images already on the GPU
(no data loading), cuDNN autotuning on.

FLOPs per step: 3 x 2 x the forward's multiply-adds of every Conv2d and Linear (counted by forward hooks on
one image: 4.09 GMACs) x batch (forward, and backward for activations and weights). The first convolution's
input gradient, which is not computed, is counted (~2 % over); BatchNorm, ReLU, the residual adds, the loss
and the optimizer are not.
Start-up: importing torchvision (~3 s), cuDNN autotuning in the warm-up steps (~2-5 s).
"""

import torch
import torch.nn.functional as F
import torchvision

from _zoo import cli, module_macs, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "fp16", "kind": "cnn_training", "framework": "torch",
         "rate": "tflops", "exact": True, "startup": "cudnn autotune",
         "contradicts": ["dataloader", "tf32", "bf16", "attention", "fp8", "cuda_graphs"],
         "what": "a CNN training step under AMP: convolutions on tensor cores are most of the time, with "
                 "memory-bound BatchNorm/ReLU stretches inside each step"}

torch.backends.cudnn.benchmark = True
a = cli(__doc__, batch=(int, 128, "images per step"))
model = torchvision.models.resnet50().to("cuda", memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scaler = torch.amp.GradScaler("cuda")
x = torch.randn(a.batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (a.batch,), device="cuda")
macs = module_macs(model, x[:1])


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss


timed("zoo_app_resnet50_train_amp_fp16", a.seconds, step, torch_sync, flops=6 * macs * a.batch, batch=5, warm=3,
      images_per_step=a.batch)
