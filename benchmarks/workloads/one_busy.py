"""One busy GPU of two: bf16 8192^3 products on GPU 0 only; GPU 1 is allocated to the job and left untouched."""

import sys

import torch

from _common import args
from _gemm import run

a = args(__doc__, n=(int, 8192, "matrix size"))
if torch.cuda.device_count() < 2:
    print(f"one_busy: needs 2 GPUs, found {torch.cuda.device_count()}", file=sys.stderr)
    sys.exit(2)
run("one_busy", "bf16", a.n, a.seconds, "cuda:0")
