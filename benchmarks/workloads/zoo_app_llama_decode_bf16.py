"""Hugging Face ``generate`` (greedy) at batch 4 with a bf16 Llama of random weights: 8 decoder layers of
the 70B shape (hidden 8192, 64 heads / 8 KV heads, MLP 28672, vocab 32000, untied head; 7.4B parameters,
14.9 GB), built on the GPU in bf16 from a LlamaConfig. Each step is one ``generate`` call: a 32-token prompt
and 64 new tokens (min = max, so random weights never stop early), KV cache (DynamicCache) on.

Each new token reads every weight once at batch 4 (GEMV-like products, M = 4): small-batch decode is bound
by streaming the weights from DRAM. The layers are large (~1.7 GB each, ~0.6 ms of DRAM time) so that HF's
per-token Python and launch work (~2-4 ms a token, overlapped with the GPU) stays below the GPU's share.

Bytes per step, counted from the config: 64 forward passes x (every Linear weight, LM head included, in bf16)
+ the KV cache read by each pass (2 x layers x B x context x KV-dim x 2 bytes, context 32..95) and written
once. Activations (a few MB a pass) and the embedding rows gathered are not counted.
Start-up: importing transformers (~5-10 s), building on the GPU (~2-5 s), two warm-up calls (~1 s).
"""

import time

from _zoo import cli, timed, torch_sync

LABEL = {"class": "memory_bound", "dtype": "bf16", "kind": "transformer_decode", "framework": "torch",
         "rate": "gbps", "exact": True,
         "contradicts": ["dataloader", "tf32", "fp8", "bf16", "attention", "math_roof", "fused_optimizer"],
         "what": "small-batch LLM decode through HF generate: every token streams the weights from DRAM"}

a = cli(__doc__, batch=(int, 4, "sequences"), prompt=(int, 32, "prompt tokens"), new=(int, 64, "new tokens"),
        layers=(int, 8, "decoder layers"))
import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

H, I, V, HEADS, KV = 8192, 28672, 32000, 64, 8
cfg = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=a.layers,
                  num_attention_heads=HEADS, num_key_value_heads=KV, max_position_embeddings=4096,
                  tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).eval()
torch.set_default_dtype(torch.float32)
ids = torch.randint(3, V, (a.batch, a.prompt), device="cuda")
mask = torch.ones_like(ids)


@torch.inference_mode()
def step():
    return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=a.new, min_new_tokens=a.new,
                          do_sample=False, pad_token_id=0)


kv = H * KV // HEADS
weights = 2 * (a.layers * (2 * H * H + 2 * H * kv + 3 * H * I) + H * V)      # bf16 bytes, LM head included
ctx = sum(a.prompt + i for i in range(a.new))                                 # context each pass attends over
cache = 2 * a.layers * a.batch * kv * 2 * (ctx + a.prompt + a.new)             # KV read per pass, written once
t_switch = time.time()
timed("zoo_app_llama_decode_bf16", a.seconds, step, torch_sync, nbytes=a.new * weights + cache, batch=1,
      tokens_per_step=a.batch * a.new, t_switch=round(t_switch, 3))
