"""Hugging Face Llama prefill, bf16, random weights: a ~1.1B-parameter LlamaForCausalLM (hidden 2048,
16 layers, 32 heads / 8 KV heads, MLP 8192, vocab 32000, untied head) built from a LlamaConfig on the CPU
in fp32 (as ``from_pretrained`` would materialise it) and moved to the GPU in bf16; then --seconds of
prefill: the decoder over 4 prompts of 2048 tokens (no grad, no KV cache kept), and the LM head over
each prompt's last position (the logits a generation needs).

Start-up: importing transformers and building and initialising 1.1B fp32 parameters on the CPU before any
GPU work (on a 2-core VM, one thread: import 12.6 s, build 22.6 s, bf16 cast 3.5 s): tens of seconds, most of
a 5 s run; t_switch marks the first timed step.

FLOPs per step, counted from the config: 2 x tokens x (the decoder's Linear weights: q, k, v, o, gate,
up, down) + causal attention 2 x B x S^2 x hidden per layer (QK^T and PV, 4 B S^2 hidden, halved by the
causal mask) + the LM head over the last positions 2 x B x hidden x vocab. Norms, RoPE, SiLU and the
embedding lookup are not counted (< 1 %).
"""

import time

from _zoo import cli, timed, torch_sync

LABEL = {"class": "compute_bound", "dtype": "bf16", "kind": "transformer_prefill", "framework": "torch",
         "rate": "tflops", "exact": True, "startup": "model build ~50%+",
         "contradicts": ["dataloader", "tf32", "bf16", "attention", "cuda_graphs", "fused_optimizer"],
         "what": "LLM prefill (Hugging Face Llama, sdpa attention) after a long model build: GEMM-bound work, "
                 "the build is start-up, not input"}

a = cli(__doc__, batch=(int, 4, "prompts"), seq=(int, 2048, "prompt length"), layers=(int, 16, "decoder layers"))
import torch  # noqa: E402  (the imports are part of the start-up)
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

H, I, V, HEADS, KV = 2048, 8192, 32000, 32, 8
cfg = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=a.layers,
                  num_attention_heads=HEADS, num_key_value_heads=KV, max_position_embeddings=max(4096, a.seq),
                  tie_word_embeddings=False)
model = LlamaForCausalLM(cfg).eval()           # fp32 on the CPU: the long part of the start-up
model = model.to("cuda", torch.bfloat16)
ids = torch.randint(0, V, (a.batch, a.seq), device="cuda")


@torch.inference_mode()
def step():
    h = model.model(input_ids=ids, use_cache=False).last_hidden_state
    return model.lm_head(h[:, -1:, :])


kv = H * KV // HEADS
linear = a.layers * (2 * H * H + 2 * H * kv + 3 * H * I)
tokens = a.batch * a.seq
flops = 2 * tokens * linear + a.layers * 2 * a.batch * a.seq**2 * H + 2 * a.batch * H * V
step()
torch_sync()
t_switch = time.time()
timed("zoo_app_llama_prefill_bf16", a.seconds, step, torch_sync, flops=flops, batch=5,
      params=sum(p.numel() for p in model.parameters()), t_switch=round(t_switch, 3))
