"""MosaicML llm-foundry's MPT training benchmark tables (Composer FSDP FULL_SHARD)."""

from __future__ import annotations

from validation_runs.models import mpt
from validation_runs.schema import Published, Source, TrainingRun

SOURCES = [Source(
    key="llm-foundry", organisation="MosaicML (Databricks)", title="MPT training benchmarks",
    url="https://github.com/mosaicml/llm-foundry/blob/061f2c7c/scripts/train/benchmarking/README.md", date="2023-10-19",
    where="scripts/train/benchmarking/README.md @061f2c7c (PR #543): tables 'H100 80GB BF16', 'H100 80GB FP8', "
          "'A100 80GB with 1600 Gbps node-node interconnect (RoCE)', 'A100 40GB with 1600 Gbps ...' (MicroBatchSize, "
          "GradAccum, GlobalBatchSize, Throughput (T/s/GPU), Precision, MP Mode, Sharding Strategy, Activation "
          "Checkpointing per row); MPT dims from yamls/pretrain/mpt-*.yaml; the stack from setup.py, "
          "flash_attn_triton.py, modeling_mpt.py and Composer v0.16.3 mosaic_fsdp_utils.py, dist_strategy.py")]

# The stack of every table (PR #543, Oct 2023): llm-foundry @061f2c7c setup.py pins mosaicml (Composer) >=0.16.3,<0.17
# and triton-pre-mlir; the MPT yamls set attn_impl: triton (flash_attn_triton.py); Composer 0.16.3
# mosaic_fsdp_utils.get_mixed_precision maps DEFAULT to param_dtype = buffer_dtype = the autocast dtype and leaves
# reduce_dtype None, which FSDP takes as param_dtype: bf16 gathers and reduce-scatters, no per-forward weight cast;
# Composer 0.16.3 dist_strategy.py defaults backward_prefetch to BACKWARD_POST; MPT's loss_fn defaults to
# fused_crossentropy (flash-attn xentropy).
_STACK = dict(kernels="eager", attention="flash-triton", dropout=False, autocast_fp32_params=False,
              fsdp_backward_prefetch="post", fused_loss=True)
_NOTES = ("Composer FSDP FULL_SHARD = ZeRO-3 over all GPUs; eager PyTorch modules (low-precision LayerNorm, GELU); "
          "8 GPUs per node",
          "stack read from the sources: attn_impl triton = FlashAttention in pre-MLIR Triton (yamls, setup.py "
          "triton-pre-mlir); Composer 0.16.3 maps FSDP mixed precision DEFAULT and PURE to bf16 parameters, gathers "
          "and reduce-scatters and defaults backward_prefetch to BACKWARD_POST; loss_fn fused_crossentropy",
          "amp_fp8 (the FP8 table): Transformer Engine linears in FP8, the rest as above")
_TABLES = {"h100": "H100 80GB BF16", "h100fp8": "H100 80GB FP8", "a100": "A100 80GB", "a100-40": "A100 40GB"}
_DEVICES = {"h100": "H100-SXM5-80GB", "h100fp8": "H100-SXM5-80GB", "a100": "A100-SXM4-80GB", "a100-40": "A100-SXM4-40GB"}


def _row(table: str, size: str, seq: int, n: int, mb: int, ga: int, ac: bool, tps: float, *, pure: bool = False) -> TrainingRun:
    """One row of an llm-foundry table; ``pure``: Precision bf16 with MP Mode PURE, else amp_bf16 (amp_fp8) with MP
    Mode DEFAULT (in Composer 0.16 both gather and reduce in bf16)."""
    h100 = table.startswith("h100")
    fp8 = table == "h100fp8"
    mode = "bf16 PURE" if pure else ("amp_fp8" if fp8 else "amp_bf16") + " DEFAULT"
    gpu = {"h100": "h100", "h100fp8": "h100", "a100": "a100", "a100-40": "a100-40gb"}[table]
    a100_40 = table == "a100-40"
    return TrainingRun(
        id=f"mpt-{size}-s{seq}-{'fp8-' if fp8 else ''}{n}x{gpu}", source="llm-foundry",
        where=f"{_TABLES[table]}: {size} SeqLen {seq} #GPUs {n} MicroBatchSize {mb} GradAccum {ga} "
              f"GlobalBatchSize {n * mb * ga} AC {ac} {mode} FULL_SHARD: {tps} T/s/GPU",
        model=mpt(size, seq), hardware=("H100 80GB" if h100 else "A100 40GB" if a100_40 else "A100 80GB")
        + ("" if h100 else ", 1600 Gbps node-node RoCE"), device=_DEVICES[table], num_devices=n, seq_len=seq,
        global_batch=n * mb * ga, precision="fp8" if fp8 else "bf16",
        published=Published(kind="tokens_per_s_per_device", value=tps, text=f"{tps} Throughput (T/s/GPU)"),
        micro_batch=mb, zero=3, recompute="full" if ac else "none", stack=_STACK,
        scaleout_gbps=None if h100 else 200.0,
        unknown={"scaleout_gbps": (200.0, 400.0)} if h100 and n > 8 else {},
        notes=(*_NOTES, "the H100 cluster's network is not published: evaluated at 200 and 400 Gb/s per GPU" if h100
               else "1600 Gbps node-node interconnect (the table's title) = 200 Gb/s per GPU"))


RUNS = [
    _row("h100", "70b", 2048, 64, 8, 4, True, 1039),
    _row("h100", "30b", 8192, 8, 1, 21, True, 1384),
    _row("h100", "30b", 2048, 32, 14, 3, True, 2308),
    _row("h100", "13b", 4096, 8, 10, 3, True, 4717),
    _row("h100", "13b", 2048, 64, 2, 1, False, 4800),
    _row("h100", "7b", 8192, 8, 8, 2, True, 6935),
    _row("h100", "7b", 2048, 8, 6, 1, False, 10643),
    _row("h100", "3b", 8192, 8, 3, 6, False, 16578),
    _row("h100", "1b", 8192, 8, 3, 4, False, 29157),
    _row("h100", "1b", 2048, 64, 20, 1, False, 44402),
    _row("a100", "70b", 2048, 64, 8, 4, True, 410, pure=True),
    _row("a100", "30b", 2048, 8, 3, 21, True, 916),
    _row("a100", "13b", 2048, 8, 2, 3, False, 2262),
    _row("a100", "7b", 8192, 8, 8, 2, True, 3206),
    _row("a100", "7b", 2048, 8, 6, 2, False, 4641),
    _row("a100", "1b", 2048, 8, 14, 4, False, 20513),
    # every row of the H100 FP8 table
    _row("h100fp8", "3b", 32768, 8, 3, 6, True, 5856),
    _row("h100fp8", "3b", 8192, 8, 3, 6, False, 19146),
    _row("h100fp8", "3b", 2048, 8, 10, 6, False, 30586),
    _row("h100fp8", "3b", 512, 8, 40, 6, False, 36527),
    _row("h100fp8", "1b", 32768, 8, 1, 4, False, 12580),
    _row("h100fp8", "1b", 8192, 8, 2, 4, False, 32010),
    _row("h100fp8", "1b", 512, 8, 56, 4, False, 70315),
    _row("h100fp8", "350m", 32768, 8, 1, 4, False, 24439),
    _row("h100fp8", "350m", 16384, 8, 2, 4, False, 42929),
    _row("h100fp8", "350m", 512, 8, 56, 4, False, 154420),
    # A100 40GB: the largest-scale row of each model at 2048, and the one 8K row
    _row("a100-40", "70b", 2048, 128, 4, 1, True, 376, pure=True),
    _row("a100-40", "30b", 2048, 128, 6, 1, True, 865, pure=True),
    _row("a100-40", "13b", 2048, 128, 16, 1, True, 1972, pure=True),
    _row("a100-40", "13b", 8192, 8, 1, 16, True, 1407, pure=True),
]
