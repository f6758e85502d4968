"""FlashAttention's GPT-3 training speed table (Dao-AILab/flash-attention training/, November 2022)."""

from __future__ import annotations

from validation_runs.models import gpt
from validation_runs.schema import Published, Source, TrainingRun

SOURCES = [Source(
    key="flash-attention", organisation="Stanford / Dao-AILab", title="FlashAttention training: GPT3 on The Pile",
    url="https://github.com/Dao-AILab/flash-attention/tree/4a6eaa9f/training", date="2022-11-29",
    where="training/README.md @4a6eaa9f 'Training speed' ('8 x A100 80GB SXM4 80GB (400W) with NVLink', sequence 2048, "
          "table Model / Batch size (tokens) / Through put (tokens/sec)); per-GPU batch and strategy from "
          "training/configs/experiment/pile/gpt3{s,m,l,xl}-flash.yaml and gpt3-2.7B-flash-hdim128.yaml at the same "
          "commit (gpu_mem = memory.total / 1000 = 82 on an 80 GB A100)")]

#: (name, heads, hidden, layers, tokens per batch, per-GPU batch, ZeRO stage, tokens/s on 8 GPUs)
_ROWS = [("125M", 12, 768, 12, 256, 32, 0, 1310e3), ("355M", 16, 1024, 24, 256, 32, 0, 503e3),
         ("760M", 16, 1536, 24, 256, 16, 1, 245e3), ("1.3B", 16, 2048, 24, 512, 8, 1, 169e3),
         ("2.7B", 20, 2560, 32, 512, 4, 1, 85e3)]

RUNS = [TrainingRun(
    id=f"flash-attn-gpt3-{name.lower()}-8xa100", source="flash-attention",
    where=f"README 'Training speed': GPT3-{name}, batch {'0.5M' if gbs == 256 else '1M'} tokens: "
          f"{tps / 1e3:.0f}k tokens/sec",
    model=gpt(f"gpt3-{name.lower()}", heads, hidden, layers, vocab=50264), hardware="8 × A100 SXM4 80GB (400 W), NVLink",
    device="A100-SXM4-80GB", num_devices=8, seq_len=2048, global_batch=gbs, precision="bf16",
    published=Published(kind="tokens_per_s_total", value=tps, text=f"{tps / 1e3:.0f}k tokens/sec"),
    micro_batch=mb, zero=zero, recompute="none",
    stack=dict(kernels="fused", attention="flash1", dropout=True, fused_loss=True),
    notes=("FlashAttention-1 (2022) kernels: planned as attention 'flash1' (FlashAttention-2's efficiency ÷ 2, the "
           "FA2 paper's measured speed-up)",
           "fused dense / fused MLP / fused dropout-add-LayerNorm, flash-attn's cross-entropy, vocabulary padded to a "
           "multiple of 8 (50264); DDP for 125M/355M, DDPStrategyZero1 above",))
    for name, heads, hidden, layers, gbs, mb, zero, tps in _ROWS]
