"""An input-bound training job: a torch DataLoader with 4 CPU worker processes decodes JPEGs with PIL and
augments them (RandomResizedCrop to 224, flip) for a ResNet-18 training step (AMP fp16, channels-last,
batch 32, uint8 batches pinned and normalised on the GPU). Each image is the same 500x375 noise JPEG (made
once), decoded anew each time: ~3-5 ms of CPU an image, ~30-40 ms a batch over 4 workers, against a GPU
step of a few ms: the GPU waits for its input most of the time.

Counted per step (reported, not a rate judged against an estimate): the step's model FLOPs (3 x 2 x the
forward's Conv2d/Linear multiply-adds, by forward hooks) and the batch's host-to-device bytes (uint8).
Start-up: importing torchvision, forking 4 workers, the first batches (~3-5 s).
"""

import io

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from PIL import Image
from torchvision.transforms import v2

from _zoo import cli, module_macs, timed, torch_sync

LABEL = {"class": "input_bound", "dtype": "fp16", "kind": "dataloader", "framework": "torch", "rate": None,
         "exact": True, "contradicts": ["cuda_graphs", "tf32", "fp8", "bf16", "attention", "math_roof"],
         "what": "a training step starved by CPU JPEG decoding in DataLoader workers: more workers would help, "
                 "graphs or precision would not"}


class Jpegs(torch.utils.data.Dataset):
    """One noise JPEG, decoded and augmented on every access (what an ImageNet loader does per sample)."""

    def __init__(self) -> None:
        buf = io.BytesIO()
        Image.fromarray(np.random.default_rng(0).integers(0, 256, (375, 500, 3), dtype=np.uint8)).save(
            buf, format="JPEG", quality=90)
        self.jpeg = buf.getvalue()
        self.tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(), v2.PILToTensor()])

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int):
        return self.tf(Image.open(io.BytesIO(self.jpeg)).convert("RGB")), i % 1000


a = cli(__doc__, batch=(int, 32, "images per step"), workers=(int, 4, "DataLoader workers"))
loader = torch.utils.data.DataLoader(Jpegs(), batch_size=a.batch, num_workers=a.workers, pin_memory=True,
                                     prefetch_factor=2, persistent_workers=True)
batches = iter(loader)
model = torchvision.models.resnet18().to("cuda", memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scaler = torch.amp.GradScaler("cuda")
mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1) * 255
macs = module_macs(model, torch.zeros(1, 3, 224, 224, device="cuda"))


def step():
    imgs, labels = next(batches)
    x = ((imgs.to("cuda", non_blocking=True).float() - mean) / std).contiguous(memory_format=torch.channels_last)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(model(x), labels.to("cuda", non_blocking=True))
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss


timed("zoo_app_dataloader_resnet18_fp16", a.seconds, step, torch_sync, batch=1, warm=3,
      step_gflops=round(6 * macs * a.batch / 1e9, 1), h2d_mb_per_step=round(a.batch * 3 * 224 * 224 / 1e6, 2))
