"""Allocated but idle: holds GPU memory and sleeps (the GPU runs nothing)."""

import time

import torch

from _common import args, report

a = args(__doc__, gib=(float, 20.0, "GPU memory to hold, GiB"))
buf = torch.empty(int(a.gib * 2**30), dtype=torch.uint8, device="cuda")
buf.fill_(1)
torch.cuda.synchronize()
time.sleep(a.seconds)
report("idle", held_gib=a.gib)
