"""Hugging Face BERT-base training step (BertForSequenceClassification from a BertConfig, random weights):
fp32 master weights under autocast bf16, fused AdamW, batch 32 of 512-token sequences already on the GPU,
sdpa attention (the library's default).

FLOPs per step, counted from the config (2 per multiply-add, x3 for forward and backward): per layer and
token 3 x 2 x 12 hidden^2 (QKV, output projection, the 4x MLP) plus attention 3 x 4 x seq x hidden (QK^T and
PV): 12 layers x 16384 tokens x (72 x 768^2 + 12 x 512 x 768) = 9.3 TFLOPs. Embeddings, LayerNorm, GELU,
softmax, the pooler and classifier (< 0.2 %) and the optimizer are not counted.
Start-up: importing transformers (~5-10 s), the model build (~2 s).
"""

import time

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "transformer_training", "framework": "torch",
         "rate": "tflops", "exact": True,
         "contradicts": ["dataloader", "tf32", "bf16", "attention", "fp8", "fused_optimizer"],
         "what": "an encoder fine-tuning step in mixed precision: tensor-core GEMMs, fused attention, "
                 "fused AdamW already"}

a = cli(__doc__, batch=(int, 32, "sequences"), seq=(int, 512, "tokens per sequence"))
import torch  # noqa: E402
from transformers import BertConfig, BertForSequenceClassification  # noqa: E402

cfg = BertConfig(max_position_embeddings=max(512, a.seq), num_labels=2)
model = BertForSequenceClassification(cfg).to("cuda").train()
opt = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=True)
ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda")
labels = torch.randint(0, 2, (a.batch,), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    opt.step()
    return loss


D, L = cfg.hidden_size, cfg.num_hidden_layers
flops = L * a.batch * a.seq * (72 * D * D + 12 * a.seq * D)
t_switch = time.time()
timed("zoo_app_bert_train_bf16", a.seconds, step, torch_sync, flops=flops, batch=5, t_switch=round(t_switch, 3))
