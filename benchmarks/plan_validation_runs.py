"""Published training and serving runs the planner is validated against (docs/validation.md).

Every run gives its source (repository path at a commit, or page), the table and row, the exact layout
as published, and the published figure. Where the source leaves a setting out, ``assumed`` says what the
planner was told and why; nothing here was read from memory. ``split`` is "calibration" for the runs the
free parameters (accelkit/plan/fitted.py) were fitted on and "holdout" for the others, which were never
used to set anything. The rule, fixed before any error was looked at: one source per GPU generation
calibrates that generation's factor (NVIDIA DGX Cloud for H100, torchtitan for A100); every other run, and
every run added later, is hold-out. A run's software stack (attention kernel, FSDP prefetch, overlap of
the gradient reduction, pipeline partition …) is part of its recipe and is read from its source.

Published figures are converted to tokens/s per device:

* ``step_time_s``: global batch × sequence length ÷ step time ÷ devices;
* ``tokens_per_s_per_device``: as published;
* ``tflops_per_device``: TFLOP/s ÷ the model FLOPs per token of accelkit's own convention (6·N + 12·L·h·s,
  full attention square) — the source's convention is not stated, which is noted per run;
* ``megatron_pflops_total``: aggregate PFLOP/s ÷ devices ÷ the FLOPs per token of Narayanan et al. 2021,
  Equation 3 (the convention the figure was computed with).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accelkit.core import ModelSpec
from accelkit.models import get_preset
from accelkit.plan import Layout

# ---- sources ----------------------------------------------------------------------------------------------
SOURCES: dict[str, dict[str, str]] = {
    "nvidia-dgxc": {
        "organisation": "NVIDIA",
        "name": "NVIDIA DGX Cloud benchmarking recipes (NeMo 24.09 on DGX H100)",
        "where": "github.com/NVIDIA/dgxc-benchmarking @143b90dd llama3.1/README_8b.md, README_70b.md, "
                 "README_405b.md ('Expected Performance' tables, BF16 rows); configure.sh sets NVTE_FUSED_ATTN=1",
    },
    "torchtitan": {
        "organisation": "Meta (PyTorch)",
        "name": "PyTorch torchtitan performance tables (FSDP2 on 64 × A100 80GB)",
        "where": "github.com/pytorch/torchtitan @04133643 docs/performance.md ('Llama 3 performance numbers', "
                 "'Llama 2 performance numbers'); model sizes from torchtrain's llama_configs (13B: dim 5120, "
                 "40 layers, 40 heads; 70B: dim 8192, 80 layers, 64 heads, 8 KV heads, ffn_dim_multiplier 1.3, "
                 "multiple_of 4096)",
    },
    "llm-foundry": {
        "organisation": "MosaicML (Databricks)",
        "name": "MosaicML llm-foundry MPT training benchmarks (Composer FSDP FULL_SHARD)",
        "where": "github.com/mosaicml/llm-foundry @061f2c7c scripts/train/benchmarking/README.md ('H100 80GB BF16', "
                 "'A100 80GB with 1600 Gbps node-node interconnect (RoCE)'); MPT dims from "
                 "scripts/train/yamls/pretrain/mpt-7b.yaml and mpt-70b.yaml (d_model, n_layers, expansion 4, "
                 "vocab 50368), the other sizes checked against the table's NumParams; submit_benchmarks.py sets "
                 "low_precision_layernorm and attn_impl triton; the stack: setup.py @061f2c7c (mosaicml>=0.16.3,<0.17, "
                 "triton-pre-mlir), llmfoundry/models/layers/flash_attn_triton.py (FlashAttention in pre-MLIR "
                 "Triton), github.com/mosaicml/composer v0.16.3 composer/trainer/mosaic_fsdp_utils.py "
                 "(mixed_precision DEFAULT: param_dtype = buffer_dtype = bf16, reduce_dtype None) and "
                 "dist_strategy.py (backward_prefetch default BACKWARD_POST), llmfoundry/models/mpt/modeling_mpt.py "
                 "(loss_fn default fused_crossentropy)",
    },
    "megatron-sc21": {
        "organisation": "NVIDIA",
        "name": "Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters Using "
                "Megatron-LM (SC21, NVIDIA ADLR; A100 Selene)",
        "where": "the paper (arXiv 2104.04473) Table 1 'Weak-scaling throughput for GPT models ranging from 1 billion "
                 "to 1 trillion parameters' (heads, hidden, layers, TP, PP, GPUs, batch, achieved aggregate "
                 "petaFLOP/s) with FLOPs per iteration by its Equation 3, F = 96·B·s·l·h²·(1 + s/6h + V/16lh) "
                 "(activation recomputation included); micro-batch, virtual stages, recompute and DDP per row from "
                 "github.com/NVIDIA/Megatron-LM examples/sc21/run_table_1.sh; Megatron's train_step all-reduces the "
                 "gradients after the backward when DDP_impl is 'local' (megatron/training.py)",
    },
    "megatron-2022": {
        "organisation": "NVIDIA",
        "name": "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer Models (NVIDIA "
                "ADLR; A100 Selene)",
        "where": "the paper (arXiv 2205.05198): Table 3 (heads, hidden, layers, TP, PP, GPUs, global and micro batch), "
                 "§6 (interleaved schedule m = 3 for 175B and 530B, s = 2048, V = 51200, 8 × 200 Gb/s HDR "
                 "InfiniBand per 8-GPU node, no data parallelism), Table 5 (iteration time with full recompute "
                 "without sequence parallelism, and with sequence parallelism + selective recompute), §6.3 (530B "
                 "at 8-way data parallelism on 2240 GPUs: 39.15 s, gradient all-reduce not overlapped), §6.2 "
                 "(backward tensor-parallel all-reduce overlapped with the weight-gradient matmuls)",
    },
    "bigscience": {
        "organisation": "BigScience (Hugging Face, Microsoft DeepSpeed, IDRIS)",
        "name": "BigScience BLOOM 176B training (Megatron-DeepSpeed on 384 A100 80GB, Jean Zay)",
        "where": "github.com/bigscience-workshop/bigscience train/tr11-176B-ml/tr11-176B-ml.slurm (TP 4, PP 12, 48 "
                 "nodes × 8 GPUs, MBS 2, GBS 2048, seq 2048, hidden 14336, 70 layers, 112 heads, vocabulary padded "
                 "to 250880, bf16, ALiBi, --checkpoint-activations, pp partition 'type:transformer|embedding', "
                 "DeepSpeed BF16_Optimizer = ZeRO-1) and README.md (log line at iteration 85376: 104.70 s per "
                 "iteration at global batch 2048; 8 GPUs per node on NVLink, 4 Omni-Path 100 Gb/s links per node; "
                 "Megatron-LM dropout defaults 0.1 inherited; CUDA_LAUNCH_BLOCKING=1 'makes a tiny impact or no "
                 "impact at all to the throughput')",
    },
    "llama3": {
        "organisation": "Meta",
        "name": "Meta, The Llama 3 Herd of Models (2024), Table 4 (as shown in Balaji, SC'24)",
        "where": "glennklockwood.com/garden/llama-3.1 (GPUs, TP, CP, PP, tokens/batch, TFLOPS/GPU); "
                 "ai-papers.xuzou.cn/papers/llama3_2024 (H100 700 W 80 GB HBM3, 8 GPUs per server on NVLink, "
                 "400 Gbps between GPUs, initial 8K-context pre-training)",
    },
}

# ---- models -------------------------------------------------------------------------------------------
_MPT_DIMS = {  # d_model, n_layers (n_heads = d_model / 128: it does not enter an FSDP-only plan)
    "1b": (2048, 24), "3b": (2560, 32), "7b": (4096, 32), "13b": (5120, 40), "30b": (7168, 48), "70b": (8192, 80),
}


def mpt(size: str, seq: int) -> ModelSpec:
    """MPT as benchmarked: LayerNorm without bias, learned positions (NumParams grows with seq), GELU MLP ×4,
    tied embeddings, vocab 50368."""
    d, layers = _MPT_DIMS[size]
    return ModelSpec(name=f"mpt-{size}", kind="decoder", family="gpt2", num_layers=layers, hidden_size=d,
                     num_heads=d // 128, ffn_hidden_size=4 * d, vocab_size=50368, max_seq_len=seq, norm="layernorm",
                     position="learned", tied_embeddings=True, linear_bias=False)


def llama2(size: str) -> ModelSpec:
    """Llama 2 as torchtrain's llama_configs define it (vocab 32000, context 4096)."""
    base = get_preset("llama-3.1-8b").replace(vocab_size=32000, max_seq_len=4096, rope_theta=10000.0,
                                              rope_scaling=None)
    if size == "13b":  # ffn = 256·ceil(int(8·5120/3)/256) = 13824
        return base.replace(name="llama-2-13b", num_layers=40, hidden_size=5120, num_heads=40, num_kv_heads=40,
                            ffn_hidden_size=13824)
    # ffn = 4096·ceil(1.3·int(8·8192/3)/4096) = 28672
    return base.replace(name="llama-2-70b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8,
                        ffn_hidden_size=28672)


@dataclass(frozen=True)
class Run:
    """One published training run and everything the planner needs to predict it."""

    id: str
    source: str
    row: str
    split: str  # "calibration", "holdout", or "not-counted" (shown, kept out of the statistics: see ``why``)
    model: ModelSpec
    device: str
    num_devices: int
    seq_len: int
    layout: Layout
    published: tuple[str, float]  # (kind, value): step_time_s | tokens_per_s_per_device | tflops_per_device
    options: dict[str, Any] = field(default_factory=dict)
    scaleout_gbps: float = 400.0  # per GPU, Gb/s
    precision: str = "bf16"
    assumed: tuple[str, ...] = ()
    why: str = ""  # why a "not-counted" run is not counted

    @property
    def global_batch(self) -> int:
        lay = self.layout
        return lay.dp * lay.micro_batch * lay.grad_accum


def _lay(dp: int, mb: int, ga: int, *, tp: int = 1, pp: int = 1, cp: int = 1, vp: int = 1, zero: int = 3,
         recompute: str = "none", sp: bool = False) -> Layout:
    return Layout(dp=dp, tp=tp, pp=pp, zero=zero, micro_batch=mb, grad_accum=ga, recompute=recompute,
                  sequence_parallel=sp, cp=cp, vp=vp)


_NEMO = dict(kernels="fused", attention="flash", tp_comm_overlap=True, dropout=False)
_NEMO_ASSUMED = ("NeMo 24.09 launcher config llama3.1_*.yaml is not in the source: assumed its defaults — no "
                 "activation recompute, sequence parallelism with TP, distributed optimizer (ZeRO-1), TP "
                 "communication overlap, fused (Transformer Engine) kernels",
                 "DGX H100: 8 GPUs per node on NVLink4, 400 Gb/s InfiniBand per GPU (the nccl recipe's system)")
_TT = dict(kernels="eager", attention="flash", dropout=False)
_TT_ASSUMED = ("torchtitan at the time ran eager (no torch.compile) with SDPA flash attention (FlashAttention-2 on "
               "A100); 8 GPUs per node; the inter-node network is not stated: 200 Gb/s per GPU assumed",)
# The stack of both llm-foundry tables (PR #543, Oct 2023): llm-foundry @061f2c7c setup.py pins mosaicml (Composer)
# >=0.16.3,<0.17 and triton-pre-mlir; the MPT yamls set attn_impl: triton (flash_attn_triton.py); Composer
# 0.16.3 mosaic_fsdp_utils.get_mixed_precision maps DEFAULT to param_dtype = buffer_dtype = the autocast dtype
# and leaves reduce_dtype None, which FSDP takes as param_dtype (torch.distributed.fsdp.MixedPrecision): bf16
# gathers and reduce-scatters, no per-forward weight cast; Composer 0.16.3 dist_strategy.py defaults
# backward_prefetch to BACKWARD_POST; MPT's loss_fn defaults to fused_crossentropy (flash-attn xentropy).
_MPT = dict(kernels="eager", attention="flash-triton", dropout=False, autocast_fp32_params=False,
            fsdp_backward_prefetch="post", fused_loss=True)
_MPT_ASSUMED = ("Composer FSDP FULL_SHARD = ZeRO-3 over all GPUs; eager PyTorch modules (low-precision LayerNorm, "
                "GELU); 8 GPUs per node",
                "stack read from the sources, not assumed: attn_impl triton = FlashAttention in pre-MLIR Triton "
                "(yamls/pretrain/mpt-*.yaml, setup.py triton-pre-mlir); Composer 0.16.3 (setup.py) maps FSDP mixed "
                "precision DEFAULT and PURE to bf16 parameters, gathers and reduce-scatters (mosaic_fsdp_utils.py) "
                "and defaults backward_prefetch to BACKWARD_POST (dist_strategy.py); loss_fn fused_crossentropy "
                "(models/mpt/modeling_mpt.py)")
_MPT_H100_NET = ("the H100 cluster's network is not stated: 400 Gb/s per GPU assumed",)
_MPT_A100_NET = ("1600 Gbps node-node interconnect (the table's title) = 200 Gb/s per GPU",)


def _mpt(gpu: str, size: str, seq: int, n: int, mb: int, ga: int, ac: bool, tps: float, *, pure: bool) -> Run:
    """One row of an llm-foundry table; ``pure``: Precision bf16 with MP Mode PURE, else amp_bf16 with MP Mode
    DEFAULT (in Composer 0.16 both gather and reduce in bf16: _MPT)."""
    h100 = gpu == "h100"
    table = "H100 80GB BF16" if h100 else "A100 80GB"
    mode = "bf16 PURE" if pure else "amp_bf16 DEFAULT"
    return Run(id=f"mpt-{size}-s{seq}-{n}x{gpu}", source="llm-foundry", split="holdout",
               row=f"{table}: {size} SeqLen {seq} #GPUs {n} MicroBatch {mb} GradAccum {ga} AC {ac} {mode}",
               model=mpt(size, seq), device="H100-SXM5-80GB" if h100 else "A100-SXM4-80GB", num_devices=n,
               seq_len=seq, layout=_lay(n, mb, ga, recompute="full" if ac else "none"),
               published=("tokens_per_s_per_device", tps),
               options=dict(_MPT),
               scaleout_gbps=400.0 if h100 else 200.0,
               assumed=_MPT_ASSUMED + (_MPT_H100_NET if h100 else _MPT_A100_NET))


def _mpt_h100(size: str, seq: int, n: int, mb: int, ga: int, ac: bool, tps: float, pure: bool = False) -> Run:
    return _mpt("h100", size, seq, n, mb, ga, ac, tps, pure=pure)


def _mpt_a100(size: str, seq: int, n: int, mb: int, ga: int, ac: bool, tps: float, pure: bool = False) -> Run:
    return _mpt("a100", size, seq, n, mb, ga, ac, tps, pure=pure)


def gpt(name: str, heads: int, hidden: int, layers: int) -> ModelSpec:
    """A GPT-3-style model as Megatron-LM builds it: LayerNorm, GELU MLP 4h, learned positions, biases, tied
    embeddings, vocabulary 51200, context 2048 (the papers' s and V)."""
    return get_preset("gpt3-175b").replace(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads,
                                           ffn_hidden_size=4 * hidden, vocab_size=51200, max_seq_len=2048)


#: Narayanan et al. 2021 Table 1 + examples/sc21/run_table_1.sh: (size, heads, hidden, layers, TP, PP, GPUs, GBS,
#: MBS, layers per virtual stage or None, DDP_impl, aggregate PFLOP/s)
_SC21_TABLE_1 = [
    ("1.7b", 24, 2304, 24, 1, 1, 32, 512, 16, None, "torch", 4.4),
    ("3.6b", 32, 3072, 30, 2, 1, 64, 512, 16, None, "torch", 8.8),
    ("7.5b", 32, 4096, 36, 4, 1, 128, 512, 16, None, "torch", 18.2),
    ("18b", 48, 6144, 40, 8, 1, 256, 1024, 8, None, "torch", 34.6),
    ("39b", 64, 8192, 48, 8, 2, 512, 1536, 4, None, "local", 70.8),
    ("76b", 80, 10240, 60, 8, 4, 1024, 1792, 2, 5, "local", 143.8),
    ("145b", 96, 12288, 80, 8, 8, 1536, 2304, 2, 5, "local", 227.1),
    ("310b", 128, 16384, 96, 8, 16, 1920, 2160, 1, 3, "local", 297.4),
    ("530b", 128, 20480, 105, 8, 35, 2520, 2520, 1, 1, "local", 410.2),
    ("1t", 160, 25600, 128, 8, 64, 3072, 3072, 1, None, "local", 502.0),
]
_MEGATRON_2021 = ("Megatron-LM 2021 stack: unfused (math) attention with the fused scale-mask-softmax, fused "
                  "LayerNorm and bias-GeLU kernels, dropout 0.1; tensor-parallel all-reduces exposed; pipeline "
                  "sends between nodes use the scatter/gather optimization (on by default, §4.1)",
                  "Selene: 8 A100 per node on NVSwitch, 8 × 200 Gb/s HDR InfiniBand per node (Korthikanti et al. "
                  "2022 §6) = 200 Gb/s per GPU")


def _sc21(size: str, heads: int, hidden: int, layers: int, tp: int, pp: int, gpus: int, gbs: int, mbs: int,
          per_virtual: int | None, ddp: str, pflops: float) -> Run:
    dp = gpus // (tp * pp)
    vp = 1 if per_virtual is None else layers // pp // per_virtual
    return Run(id=f"megatron-{size}-{gpus}xa100", source="megatron-sc21", split="holdout",
               row=f"Table 1: {size} ({layers} layers, h {hidden}, {heads} heads), TP {tp}, PP {pp}, {gpus} GPUs, "
                   f"batch {gbs}: {pflops} PFLOP/s; run_table_1.sh MBS {mbs}"
                   + (f", {per_virtual} layers per virtual stage" if per_virtual else "") + f", DDP {ddp}",
               model=gpt(f"gpt-{size}", heads, hidden, layers), device="A100-SXM4-80GB", num_devices=gpus,
               seq_len=2048, layout=_lay(dp, mbs, gbs // (dp * mbs), tp=tp, pp=pp, vp=vp, zero=0, recompute="full"),
               published=("megatron_pflops_total", pflops), scaleout_gbps=200.0,
               options=dict(kernels="fused", attention="math", dropout=True, pp_scatter_gather=True,
                            grad_reduce_overlap=ddp == "torch"),
               assumed=(*_MEGATRON_2021, "DDP torch overlaps the gradient all-reduce with the last backward (buckets); "
                        "DDP local all-reduces after it", "plain 1F1B where run_table_1.sh sets no virtual stages"))


#: Korthikanti et al. 2022 Table 3 + Table 5: (size, heads, hidden, layers, PP, GPUs, interleaving m, iteration s
#: with full recompute, iteration s with sequence parallelism + selective recompute); TP 8, MBS 1 (22B: 4),
#: global batch = GPUs (22B: 4), no data parallelism
_K22_TABLE_5 = [
    ("22b", 64, 6144, 48, 1, 8, 1, 1.42, 1.10),
    ("175b", 96, 12288, 96, 8, 64, 3, 18.13, 13.75),
    ("530b", 128, 20480, 105, 35, 280, 3, 49.05, 37.83),
    ("1t", 160, 25600, 128, 64, 512, 1, 94.42, 71.49),
]


def _k22(size: str, heads: int, hidden: int, layers: int, pp: int, gpus: int, vp: int, seconds: float, *,
         present: bool, dp: int = 1) -> Run:
    mbs = 4 if size == "22b" else 1
    gbs = 4 if size == "22b" else gpus  # per model replica
    how = "sequence parallelism + selective recompute" if present else "full recompute, no sequence parallelism"
    row = (f"Table 3/5: {size}, TP 8, PP {pp}, {gpus} GPUs, global batch {gbs}, micro-batch {mbs}"
           + (f", interleaved m = {vp}" if vp > 1 else "") + f", {how}: {seconds} s/iteration")
    if dp > 1:
        row = (f"§6.3: {size} at {dp}-way data parallelism on {gpus * dp} GPUs, batch {gbs * dp} per iteration "
               f"({how}, gradient all-reduce not overlapped): {seconds} s/iteration")
    return Run(id=f"korthikanti-{size}-{'sp-sel' if present else 'full'}-{gpus * dp}xa100", source="megatron-2022",
               split="holdout", row=row, model=gpt(f"gpt-{size}", heads, hidden, layers), device="A100-SXM4-80GB",
               num_devices=gpus * dp, seq_len=2048,
               layout=_lay(dp, mbs, gbs // mbs, tp=8, pp=pp, vp=vp, zero=0, recompute="selective" if present else "full",
                           sp=present),
               published=("step_time_s", seconds), scaleout_gbps=200.0,
               options=dict(kernels="fused", attention="math", dropout=True, tp_backward_overlap=True,
                            pp_scatter_gather=True, grad_reduce_overlap=False),
               assumed=("Megatron-LM 2022 stack: unfused (math) attention with the fused softmax, fused LayerNorm/"
                        "bias-GeLU/bias-dropout-add, dropout 0.1; selective recompute = the attention core (§5)",
                        _MEGATRON_2021[1]))


_LLAMA3_WHY = ("the layout is incomplete in our sources: the pipeline schedule (virtual stages, the uneven split of "
               "126 layers over 16 stages) and the FSDP/ZeRO stage are not given, and the 1F1B bubble this leaves "
               "open is most of the error; shown for transparency, not counted")

TRAINING: list[Run] = [
    # ---- NVIDIA DGX Cloud (calibration)
    Run(id="nemo-llama3.1-8b-8xh100", source="nvidia-dgxc", split="calibration",
        row="README_8b.md BF16 (TP=1, PP=1, CP=2, MBS=1, GA=32), 8x H100, GBS 128: 12.91 s/step",
        model=get_preset("llama-3.1-8b"), device="H100-SXM5-80GB", num_devices=8, seq_len=8192,
        layout=_lay(4, 1, 32, cp=2, zero=1), published=("step_time_s", 12.91), options=_NEMO, assumed=_NEMO_ASSUMED),
    Run(id="nemo-llama3.1-8b-128xh100", source="nvidia-dgxc", split="calibration",
        row="README_8b.md BF16 (TP=1, PP=1, CP=2, MBS=1, GA=32), 128x H100, GBS 2048: 13.10 s/step",
        model=get_preset("llama-3.1-8b"), device="H100-SXM5-80GB", num_devices=128, seq_len=8192,
        layout=_lay(64, 1, 32, cp=2, zero=1), published=("step_time_s", 13.10), options=_NEMO, assumed=_NEMO_ASSUMED),
    Run(id="nemo-llama3.1-70b-64xh100", source="nvidia-dgxc", split="calibration",
        row="README_70b.md BF16 (TP=4, PP=4, CP=2, VP=5, MBS=1, GA=64), 64x H100, GBS 128: 14.72 s/step",
        model=get_preset("llama-3.1-70b"), device="H100-SXM5-80GB", num_devices=64, seq_len=8192,
        layout=_lay(2, 1, 64, tp=4, pp=4, cp=2, vp=5, zero=1, sp=True), published=("step_time_s", 14.72),
        options=_NEMO, assumed=_NEMO_ASSUMED),
    Run(id="nemo-llama3.1-70b-2048xh100", source="nvidia-dgxc", split="calibration",
        row="README_70b.md BF16 (TP=4, PP=4, CP=2, VP=5, MBS=1, GA=64), 2048x H100, GBS 4096: 14.98 s/step",
        model=get_preset("llama-3.1-70b"), device="H100-SXM5-80GB", num_devices=2048, seq_len=8192,
        layout=_lay(64, 1, 64, tp=4, pp=4, cp=2, vp=5, zero=1, sp=True), published=("step_time_s", 14.98),
        options=_NEMO, assumed=_NEMO_ASSUMED),
    Run(id="nemo-llama3.1-405b-576xh100", source="nvidia-dgxc", split="calibration",
        row="README_405b.md BF16 (TP=8, PP=9, CP=2, VP=7, MBS=1, GA=63), 576x H100, GBS 252: 17.20 s/step",
        model=get_preset("llama-3.1-405b").replace(vocab_size=50257), device="H100-SXM5-80GB", num_devices=576,
        seq_len=8192, layout=_lay(4, 1, 63, tp=8, pp=9, cp=2, vp=7, zero=1, sp=True), published=("step_time_s", 17.20),
        options=_NEMO, assumed=(*_NEMO_ASSUMED, "vocab 50257: the README says 405B uses the GPT2BPETokenizer as a proxy")),
    Run(id="nemo-llama3.1-405b-2304xh100", source="nvidia-dgxc", split="calibration",
        row="README_405b.md BF16 (TP=8, PP=9, CP=2, VP=7, MBS=1, GA=63), 2304x H100, GBS 1008: 17.62 s/step",
        model=get_preset("llama-3.1-405b").replace(vocab_size=50257), device="H100-SXM5-80GB", num_devices=2304,
        seq_len=8192, layout=_lay(16, 1, 63, tp=8, pp=9, cp=2, vp=7, zero=1, sp=True),
        published=("step_time_s", 17.62),
        options=_NEMO, assumed=(*_NEMO_ASSUMED, "vocab 50257: the README says 405B uses the GPT2BPETokenizer as a proxy")),
    # ---- torchtitan, 64 × A100 80GB, FSDP2 (calibration)
    Run(id="torchtitan-llama3-8b-64xa100", source="torchtitan", split="calibration",
        row="Llama 3 8B, batch size 1, selective op AC: 2973 WPS (58.2% MFU)",
        model=get_preset("llama-3.1-8b"), device="A100-SXM4-80GB", num_devices=64, seq_len=8192,
        layout=_lay(64, 1, 1, recompute="selective"), published=("tokens_per_s_per_device", 2973), options=_TT,
        scaleout_gbps=200.0, assumed=(*_TT_ASSUMED, "selective op AC recomputes the cheap (non-matmul) ops: "
                                      "modelled as 'selective' (no extra matmul FLOPs)")),
    Run(id="torchtitan-llama3-70b-64xa100", source="torchtitan", split="calibration",
        row="Llama 3 70B, batch size 1, full AC: 331 WPS (51.7% MFU)",
        model=get_preset("llama-3.1-70b"), device="A100-SXM4-80GB", num_devices=64, seq_len=8192,
        layout=_lay(64, 1, 1, recompute="full"), published=("tokens_per_s_per_device", 331), options=_TT,
        scaleout_gbps=200.0, assumed=_TT_ASSUMED),
    Run(id="torchtitan-llama2-13b-64xa100", source="torchtitan", split="calibration",
        row="Llama 2 13B, batch size 2, no AC: 2162 WPS (61.1% MFU)",
        model=llama2("13b"), device="A100-SXM4-80GB", num_devices=64, seq_len=4096,
        layout=_lay(64, 2, 1), published=("tokens_per_s_per_device", 2162), options=_TT, scaleout_gbps=200.0,
        assumed=_TT_ASSUMED),
    Run(id="torchtitan-llama2-70b-64xa100", source="torchtitan", split="calibration",
        row="Llama 2 70B, batch size 2, full AC: 353 WPS (50.5% MFU)",
        model=llama2("70b"), device="A100-SXM4-80GB", num_devices=64, seq_len=4096,
        layout=_lay(64, 2, 1, recompute="full"), published=("tokens_per_s_per_device", 353), options=_TT,
        scaleout_gbps=200.0, assumed=_TT_ASSUMED),
    # ---- MosaicML llm-foundry (holdout)
    _mpt_h100("70b", 2048, 64, 8, 4, True, 1039),
    _mpt_h100("30b", 8192, 8, 1, 21, True, 1384),
    _mpt_h100("30b", 2048, 32, 14, 3, True, 2308),
    _mpt_h100("13b", 4096, 8, 10, 3, True, 4717),
    _mpt_h100("13b", 2048, 64, 2, 1, False, 4800),
    _mpt_h100("7b", 8192, 8, 8, 2, True, 6935),
    _mpt_h100("7b", 2048, 8, 6, 1, False, 10643),
    _mpt_h100("3b", 8192, 8, 3, 6, False, 16578),
    _mpt_h100("1b", 8192, 8, 3, 4, False, 29157),
    _mpt_h100("1b", 2048, 64, 20, 1, False, 44402),
    _mpt_a100("70b", 2048, 64, 8, 4, True, 410, pure=True),
    _mpt_a100("30b", 2048, 8, 3, 21, True, 916),
    _mpt_a100("13b", 2048, 8, 2, 3, False, 2262),
    _mpt_a100("7b", 8192, 8, 8, 2, True, 3206),
    _mpt_a100("7b", 2048, 8, 6, 2, False, 4641),
    _mpt_a100("1b", 2048, 8, 14, 4, False, 20513),
    # ---- Megatron-LM SC21 Table 1 and Korthikanti et al. 2022 (holdout)
    *[_sc21(*row) for row in _SC21_TABLE_1],
    *[_k22(*row[:7], row[7 + present], present=present) for row in _K22_TABLE_5 for present in (False, True)],
    _k22("530b", 128, 20480, 105, 35, 280, 3, 39.15, present=True, dp=8),
    # ---- BigScience BLOOM 176B (holdout)
    Run(id="bloom-176b-384xa100", source="bigscience", split="holdout",
        row="tr11-176B-ml: TP 4, PP 12, DP 8, MBS 2, GBS 2048, iteration 85376: 104.70 s/iteration (149.77 TFLOPs)",
        model=get_preset("gpt3-175b").replace(name="bloom-176b", num_layers=70, hidden_size=14336, num_heads=112,
                                              ffn_hidden_size=4 * 14336, vocab_size=250880, max_seq_len=2048),
        device="A100-SXM4-80GB", num_devices=384, seq_len=2048,
        layout=_lay(8, 2, 128, tp=4, pp=12, zero=1, recompute="full"), published=("step_time_s", 104.70),
        scaleout_gbps=50.0,
        options=dict(kernels="fused", attention="math", dropout=True, pp_embedding_as_layer=True,
                     grad_reduce_overlap=False),
        assumed=("Megatron-DeepSpeed 2022 stack: unfused (math) attention with the fused softmax, fused LayerNorm and "
                 "bias-GeLU kernels; tensor-parallel all-reduces exposed; DeepSpeed's pipeline engine reduces the "
                 "gradients after the last micro-batch (not overlapped); no pipeline scatter/gather",
                 "ALiBi modelled as learned positions (2048·h = 0.02% more parameters; ALiBi's bias add is inside "
                 "the fused softmax); the embedding LayerNorm is left out (one norm per sequence position)",
                 "4 × 100 Gb/s Omni-Path per 8-GPU node = 50 Gb/s per GPU")),
    # ---- Llama 3 paper, Table 4 (holdout)
    Run(id="llama3-405b-8192xh100", source="llama3", split="not-counted", why=_LLAMA3_WHY,
        row="8,192 GPUs, TP 8, CP 1, PP 16, 16M tokens/batch: 430 TFLOPS/GPU",
        model=get_preset("llama-3.1-405b"), device="H100-SXM5-80GB", num_devices=8192, seq_len=8192,
        layout=_lay(64, 1, 32, tp=8, pp=16, zero=2, sp=True), published=("tflops_per_device", 430),
        options=dict(kernels="fused", attention="flash", dropout=False),
        assumed=("DP = 8192 / (8·16) = 64; 16M tokens at seq 8192 = 2048 sequences = 32 per DP rank, micro-batch 1",
                 "FSDP without resharding after forward = ZeRO-2; sequence parallel with TP; fused kernels; the "
                 "pipeline schedule's virtual stages are not in the source: plain 1F1B (vp 1)",
                 "TFLOPS/GPU converted with accelkit's FLOPs per token (the source's convention is not stated; "
                 "attention is 8% of the FLOPs at 8K, so a causal-halving convention would move the figure 4%)")),
    Run(id="llama3-405b-16384xh100", source="llama3", split="not-counted", why=_LLAMA3_WHY,
        row="16,384 GPUs, TP 8, CP 1, PP 16, 16M tokens/batch: 400 TFLOPS/GPU",
        model=get_preset("llama-3.1-405b"), device="H100-SXM5-80GB", num_devices=16384, seq_len=8192,
        layout=_lay(128, 1, 16, tp=8, pp=16, zero=2, sp=True), published=("tflops_per_device", 400),
        options=dict(kernels="fused", attention="flash", dropout=False),
        assumed=("DP = 16384 / (8·16) = 128; 2048 sequences = 16 per DP rank, micro-batch 1",
                 "FSDP without resharding after forward = ZeRO-2; sequence parallel with TP; fused kernels; the "
                 "pipeline schedule's virtual stages are not in the source: plain 1F1B (vp 1)",
                 "TFLOPS/GPU converted with accelkit's FLOPs per token (convention not stated in the source)")),
]


# ---- serving (prefill and decode) ---------------------------------------------------------------------------
SOURCES["nim"] = {
    "organisation": "NVIDIA",
    "name": "NVIDIA NIM LLM benchmarking (TensorRT-LLM engine), AIPerf client",
    "where": "docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance (.md): Llama-3.3-70b-instruct, Version 1.8.0, "
             "2 x H100 80G, fp8 TP2, '5000 Input Tokens / 500 Output Tokens' and '500 Input Tokens / 2000 Output "
             "Tokens' tables (Concurrency, TTFT (ms), ITL (ms))",
}


@dataclass(frozen=True)
class ServingRun:
    """One row of a serving table: the time to first token at concurrency 1 (prefill of one prompt) or the
    inter-token latency at a concurrency below saturation (continuous batching: a decode step of
    ``concurrency`` sequences plus the prefills that arrive per step)."""

    id: str
    source: str
    row: str
    metric: str  # "ttft_s" or "itl_s"
    published_s: float
    model: ModelSpec
    device: str
    tp: int
    prompt_len: int
    output_len: int
    concurrency: int
    quantization: str | None = None
    assumed: tuple[str, ...] = ()


_NIM_ASSUMED = ("fp8 weights and fp8 matmuls (TensorRT-LLM fp8 profile); the KV cache is not stated: bf16 assumed",
                "TTFT at concurrency 1 is one prompt's prefill; ITL averages decode steps and the interleaved "
                "prefills of arriving requests (rows past saturation, where TTFT grows with queueing, are not used)")


def _nim(prompt: int, out: int, conc: int, metric: str, ms: float) -> ServingRun:
    return ServingRun(id=f"nim-llama3.3-70b-fp8-tp2-{prompt}in{out}out-c{conc}-{metric.split('_')[0]}", source="nim",
                      row=f"{prompt} in / {out} out, concurrency {conc}: {metric.split('_')[0].upper()} {ms} ms",
                      metric=metric, published_s=ms / 1e3, model=get_preset("llama-3.1-70b").replace(name="llama-3.3-70b"),
                      device="H100-SXM5-80GB", tp=2, prompt_len=prompt, output_len=out, concurrency=conc,
                      quantization="fp8-dynamic", assumed=_NIM_ASSUMED)


SERVING: list[ServingRun] = [
    _nim(5000, 500, 1, "ttft_s", 406.77),
    _nim(5000, 500, 1, "itl_s", 18.58),
    _nim(5000, 500, 5, "itl_s", 21.83),
    _nim(5000, 500, 25, "itl_s", 38.75),
    _nim(5000, 500, 50, "itl_s", 59.73),
    _nim(500, 2000, 1, "ttft_s", 47.77),
    _nim(500, 2000, 1, "itl_s", 18.91),
]
