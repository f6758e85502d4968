"""Megatron-LM and Megatron-DeepSpeed papers and logs on A100 (Selene, Jean Zay): Narayanan et al. 2021,
Korthikanti et al. 2022, MT-NLG 530B, BLOOM 176B."""

from __future__ import annotations

from accelkit.models import get_preset
from validation_runs.models import gpt
from validation_runs.schema import Published, Source, TrainingRun

SOURCES = [
    Source(key="megatron-sc21", organisation="NVIDIA",
           title="Narayanan et al., Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM (SC21)",
           url="https://arxiv.org/abs/2104.04473", date="2021-04",
           where="Table 1 (heads, hidden, layers, TP, PP, GPUs, batch, achieved aggregate petaFLOP/s) with FLOPs per "
                 "iteration by Equation 3; micro-batch, virtual stages, recompute and DDP per row from "
                 "github.com/NVIDIA/Megatron-LM examples/sc21/run_table_1.sh"),
    Source(key="megatron-2022", organisation="NVIDIA",
           title="Korthikanti et al., Reducing Activation Recomputation in Large Transformer Models",
           url="https://arxiv.org/abs/2205.05198", date="2022-05",
           where="Table 3 (layouts), Table 5 (iteration time: full recompute; sequence parallelism + selective "
                 "recompute), §6 (m = 3 interleaving for 175B/530B, s 2048, V 51200, 8 × 200 Gb/s HDR per node), "
                 "§6.2 (backward TP all-reduce overlapped), §6.3 (530B at 8-way data parallelism)"),
    Source(key="mt-nlg", organisation="Microsoft and NVIDIA",
           title="Smith et al., Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B",
           url="https://arxiv.org/abs/2201.11990", date="2022-01",
           where="§2.4 as quoted in github.com/cli99/llm-analysis examples/megatron-turing-nlg/README.md @d841e40 "
                 "(global batch 1920 on 280, 350 and 420 DGX A100 servers: 60.1, 50.2 and 44.4 s per iteration, "
                 "126, 121 and 113 TFLOP/s per GPU; 105 layers, h 20480, 128 heads, vocabulary 50272, sequence "
                 "2048); the Microsoft Research announcement (Selene: DGX A100 with 80 GB A100s, HDR InfiniBand "
                 "full fat tree); tensor 8 × pipeline 35 slicing"),
    Source(key="bigscience", organisation="BigScience (Hugging Face, Microsoft DeepSpeed, IDRIS)",
           title="BLOOM 176B training (Megatron-DeepSpeed on 384 A100 80GB, Jean Zay)",
           url="https://github.com/bigscience-workshop/bigscience/tree/master/train/tr11-176B-ml", date="2022-07",
           where="train/tr11-176B-ml/tr11-176B-ml.slurm (TP 4, PP 12, 48 nodes × 8 GPUs, MBS 2, GBS 2048, seq 2048, "
                 "hidden 14336, 70 layers, 112 heads, vocabulary 250880, bf16, --checkpoint-activations, partition "
                 "'type:transformer|embedding', BF16_Optimizer = ZeRO-1) and README.md (iteration 85376: 104.70 s "
                 "per iteration at global batch 2048; 4 × 100 Gb/s Omni-Path per 8-GPU node)"),
]

_A100 = "DGX A100 (8 × A100 SXM4 80GB, NVSwitch), Selene"
_MEGATRON_2021 = ("Megatron-LM 2021 stack: unfused (math) attention with the fused scale-mask-softmax, fused "
                  "LayerNorm and bias-GeLU kernels, dropout 0.1; tensor-parallel all-reduces exposed; pipeline "
                  "sends between nodes use the scatter/gather optimization (on by default, §4.1)",
                  "Selene: 8 A100 per node on NVSwitch, 8 × 200 Gb/s HDR InfiniBand per node (Korthikanti et al. "
                  "2022 §6) = 200 Gb/s per GPU")

#: Table 1 + run_table_1.sh: (size, heads, hidden, layers, TP, PP, GPUs, GBS, MBS, layers per virtual stage or None,
#: DDP_impl, aggregate PFLOP/s)
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


def _sc21(size: str, heads: int, hidden: int, layers: int, tp: int, pp: int, gpus: int, gbs: int, mbs: int,
          per_virtual: int | None, ddp: str, pflops: float) -> TrainingRun:
    vp = 1 if per_virtual is None else layers // pp // per_virtual
    return TrainingRun(
        id=f"megatron-{size}-{gpus}xa100", source="megatron-sc21",
        where=f"Table 1: {size} ({layers} layers, h {hidden}, {heads} heads), TP {tp}, PP {pp}, {gpus} GPUs, batch "
              f"{gbs}: {pflops} PFLOP/s; run_table_1.sh MBS {mbs}"
              + (f", {per_virtual} layers per virtual stage" if per_virtual else "") + f", DDP {ddp}",
        model=gpt(f"gpt-{size}", heads, hidden, layers), hardware=_A100, device="A100-SXM4-80GB", num_devices=gpus,
        seq_len=2048, global_batch=gbs, precision="bf16",
        published=Published(kind="megatron_pflops_total", value=pflops, text=f"{pflops} petaFLOP/s aggregate"),
        tp=tp, pp=pp, vp=vp, micro_batch=mbs, zero=0, recompute="full", scaleout_gbps=200.0,
        stack=dict(kernels="fused", attention="math", dropout=True, pp_scatter_gather=True,
                   grad_reduce_overlap=ddp == "torch"),
        notes=(*_MEGATRON_2021, "DDP torch overlaps the gradient all-reduce with the last backward (buckets); DDP "
               "local all-reduces after it", "plain 1F1B where run_table_1.sh sets no virtual stages"))


#: Table 3 + Table 5: (size, heads, hidden, layers, PP, GPUs, interleaving m, iteration s with full recompute,
#: iteration s with sequence parallelism + selective recompute); TP 8, MBS 1 (22B: 4), global batch = GPUs (22B: 4)
_K22_TABLE_5 = [
    ("22b", 64, 6144, 48, 1, 8, 1, 1.42, 1.10),
    ("175b", 96, 12288, 96, 8, 64, 3, 18.13, 13.75),
    ("530b", 128, 20480, 105, 35, 280, 3, 49.05, 37.83),
    ("1t", 160, 25600, 128, 64, 512, 1, 94.42, 71.49),
]


def _k22(size: str, heads: int, hidden: int, layers: int, pp: int, gpus: int, vp: int, seconds: float, *,
         present: bool, dp: int = 1) -> TrainingRun:
    mbs = 4 if size == "22b" else 1
    gbs = 4 if size == "22b" else gpus  # per model replica
    how = "sequence parallelism + selective recompute" if present else "full recompute, no sequence parallelism"
    where = (f"Table 3/5: {size}, TP 8, PP {pp}, {gpus} GPUs, global batch {gbs}, micro-batch {mbs}"
             + (f", interleaved m = {vp}" if vp > 1 else "") + f", {how}: {seconds} s/iteration")
    if dp > 1:
        where = (f"§6.3: {size} at {dp}-way data parallelism on {gpus * dp} GPUs, batch {gbs * dp} per iteration "
                 f"({how}, gradient all-reduce not overlapped): {seconds} s/iteration")
    return TrainingRun(
        id=f"korthikanti-{size}-{'sp-sel' if present else 'full'}-{gpus * dp}xa100", source="megatron-2022",
        where=where, model=gpt(f"gpt-{size}", heads, hidden, layers), hardware=_A100, device="A100-SXM4-80GB",
        num_devices=gpus * dp, seq_len=2048, global_batch=gbs * dp, precision="bf16",
        published=Published(kind="step_time_s", value=seconds, text=f"{seconds} s per iteration"),
        tp=8, pp=pp, vp=vp, micro_batch=mbs, zero=0, recompute="selective" if present else "full",
        sequence_parallel=present, scaleout_gbps=200.0,
        stack=dict(kernels="fused", attention="math", dropout=True, tp_backward_overlap=True, pp_scatter_gather=True,
                   grad_reduce_overlap=False),
        notes=("Megatron-LM 2022 stack: unfused (math) attention with the fused softmax, fused LayerNorm/bias-GeLU/"
               "bias-dropout-add, dropout 0.1; selective recompute = the attention core (§5)", _MEGATRON_2021[1]))


_MTNLG = [(280, 60.1, 126), (350, 50.2, 121), (420, 44.4, 113)]
MT_NLG = [
    TrainingRun(
        id=f"mt-nlg-530b-{nodes * 8}xa100", source="mt-nlg",
        where=f"§2.4: global batch 1920 on {nodes} DGX A100 servers: {seconds} s per iteration ({tflops} TFLOP/s per GPU)",
        model=gpt("mt-nlg-530b", 128, 20480, 105, vocab=50272), hardware=f"{nodes} × DGX A100 80GB (Selene)",
        device="A100-SXM4-80GB", num_devices=nodes * 8, seq_len=2048, global_batch=1920, precision="bf16",
        published=Published(kind="step_time_s", value=seconds, text=f"{seconds} s per iteration"),
        tp=8, pp=35, vp=1, micro_batch=None, zero=None, recompute=None, scaleout_gbps=200.0,
        stack=dict(kernels="fused", attention="math", dropout=True, grad_reduce_overlap=False),
        unknown={"micro_batch": (1, 2, 4), "zero": (0, 1), "recompute": ("selective", "full")},
        notes=("Megatron-DeepSpeed 2021: DeepSpeed's pipeline engine (plain 1F1B, gradients reduced after the last "
               "micro-batch), Megatron's fused kernels with the unfused attention core, dropout 0.1",
               "micro-batch, ZeRO stage and recompute are not in the quoted text: evaluated over {1, 2, 4}, {0, 1} "
               "and {selective, full}", _MEGATRON_2021[1]))
    for nodes, seconds, tflops in _MTNLG
]

BLOOM = [TrainingRun(
    id="bloom-176b-384xa100", source="bigscience",
    where="tr11-176B-ml: TP 4, PP 12, DP 8, MBS 2, GBS 2048, iteration 85376: 104.70 s/iteration (149.77 TFLOPs)",
    model=get_preset("gpt3-175b").replace(name="bloom-176b", num_layers=70, hidden_size=14336, num_heads=112,
                                          ffn_hidden_size=4 * 14336, vocab_size=250880, max_seq_len=2048),
    hardware="48 nodes × 8 A100 SXM4 80GB (Jean Zay)", device="A100-SXM4-80GB", num_devices=384, seq_len=2048,
    global_batch=2048, precision="bf16", published=Published(kind="step_time_s", value=104.70, text="104.70 s per iteration"),
    tp=4, pp=12, micro_batch=2, zero=1, recompute="full", scaleout_gbps=50.0,
    stack=dict(kernels="fused", attention="math", dropout=True, pp_embedding_as_layer=True, grad_reduce_overlap=False),
    notes=("Megatron-DeepSpeed 2022 stack: unfused (math) attention with the fused softmax, fused LayerNorm and "
           "bias-GeLU kernels; tensor-parallel all-reduces exposed; DeepSpeed's pipeline engine reduces the gradients "
           "after the last micro-batch (not overlapped); no pipeline scatter/gather",
           "ALiBi modelled as learned positions (2048·h = 0.02% more parameters; ALiBi's bias add is inside the fused "
           "softmax); the embedding LayerNorm is left out (one norm per sequence position)",
           "4 × 100 Gb/s Omni-Path per 8-GPU node = 50 Gb/s per GPU"))]

RUNS = [*[_sc21(*row) for row in _SC21_TABLE_1],
        *[_k22(*row[:7], row[7 + present], present=present) for row in _K22_TABLE_5 for present in (False, True)],
        _k22("530b", 128, 20480, 105, 35, 280, 3, 39.15, present=True, dp=8), *MT_NLG, *BLOOM]
