"""NVIDIA's published NeMo / Megatron-Core throughput: DGX Cloud benchmarking recipes, the NeMo and Megatron Bridge
performance summaries, and the MLPerf Training v3.1 GPT-3 logs."""

from __future__ import annotations

from typing import Any

from accelkit.models import get_preset
from validation_runs.models import gpt, llama2, llama3, nemotron
from validation_runs.schema import Published, Source, TrainingRun

SOURCES = [
    Source(key="nvidia-dgxc", organisation="NVIDIA", title="DGX Cloud benchmarking recipes (NeMo 24.09/24.11 on DGX H100)",
           url="https://github.com/NVIDIA/dgxc-benchmarking", date="2025-05-21",
           where="@143b90dd: llama3.1/README_{8b,70b,405b}.md, nemotron/README_{15b,340b}.md, "
                 "nemo_megatron/README_175b.md ('Training step time (seconds per step)' rows, BF16 and FP8 tables); "
                 "the recipes' own configs in the same commit: llama3.1/llama3.1_*.yaml, nemotron/nemotron4-*-synth.yaml, "
                 "nemo_megatron/gpt3_175b_hydra.yaml, */configure.sh (NVTE_FUSED_ATTN)"),
    Source(key="nemo-perf", organisation="NVIDIA", title="NeMo Framework performance summary",
           url="https://github.com/NVIDIA/NeMo/blob/8e3d65dcfe/docs/source/performance/performance_summary.md",
           date="2024-09-09",
           where="NeMo @8e3d65dcfe docs/source/performance/performance_summary.md (container NeMo 24.07, DGX-H100, FP8: "
                 "'Pretraining' and 'Finetuning' tables, Tokens / sec / GPU); docs.nvidia.com/nemo-framework/user-guide/"
                 "latest/performance/performance_summary.html as stored (container NeMo 25.02, 'System: DGX-B200', FP8 "
                 "pre-training table); model sizes from NeMo's nemo/collections/llm/gpt/model/{base,llama,nemotron}.py"),
    Source(key="megatron-bridge", organisation="NVIDIA", title="Megatron Bridge performance summary (NeMo 25.11 container)",
           url="https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/4ab94dfad/docs/performance-summary-archive.md",
           date="2025-12-04", where="docs/performance-summary-archive.md '25.11 NeMo Container', 'System: DGX-H100' table"),
    Source(key="mlperf-v3.1", organisation="NVIDIA",
           title="MLPerf Training v3.1, NVIDIA GPT-3 175B closed-division results (NeMo 23.09, Eos DGX H100)",
           url="https://github.com/mlcommons/training_results_v3.1", date="2023-11-08",
           where="@f33f9444 NVIDIA/results/eos*_n{64,512,768,1024,1280,1344}_ngc23.09_nemo/gpt3/result_0.txt "
                 "(median of the logged 'train_step_timing' tracked_stats; 'global_batch_size', "
                 "'gradient_accumulation_steps'); NVIDIA/benchmarks/gpt3/implementations/pytorch/config_DGXH100_*.sh, "
                 "config_fp8.sh, conf/custom.yaml, run_and_time.sh (layout and stack)"),
]

_DGX_H100 = "DGX H100 (8 × H100 SXM5 80GB on NVLink4)"
#: DGX H100 and DGX B200 carry 8 × 400 Gb/s ConnectX-7, one per GPU (their datasheets; the systems the tables name)
_DGX_NET = 400.0
_NEMO_STACK: dict[str, Any] = dict(kernels="fused", dropout=False)


def _dgxc(rid: str, table: str, cols: str, model: Any, n: int, gbs: int, seconds: float, precision: str, *,
          seq: int, tp: int, pp: int, cp: int = 1, vp: int = 1, mb: int, recompute: str, stack: dict[str, Any],
          notes: tuple[str, ...], shipped: bool = False) -> TrainingRun:
    return TrainingRun(
        id=rid, source="nvidia-dgxc", where=f"{table}: column '{cols}', row 'Training step time': {seconds} s",
        model=model, hardware=_DGX_H100, device="H100-SXM5-80GB", num_devices=n, seq_len=seq, global_batch=gbs,
        precision=precision, published=Published(kind="step_time_s", value=seconds, text=f"{seconds} s per step"),
        tp=tp, pp=pp, cp=cp, vp=vp, micro_batch=mb, zero=1, recompute=recompute, sequence_parallel=tp > 1,
        stack=stack, scaleout_gbps=_DGX_NET, shipped_calibration=shipped,
        notes=("distributed_fused_adam with overlap_grad_sync/overlap_param_sync = ZeRO-1 (the recipe yaml)", *notes))


_L31_NOTES = ("llama3.1_{8b,70b,405b}.yaml: activations_checkpoint_granularity null, sequence_parallel with TP, "
              "ub_tp_comm_overlap with TP, dropout 0, transformer_engine; configure.sh NVTE_FUSED_ATTN=1 (cuDNN "
              "fused attention: the Hopper kernel)",)
_L31 = dict(_NEMO_STACK, attention="flash", tp_comm_overlap=True)


def _llama31(size: str, dtype: str, n: int, gbs: int, seconds: float, cols: str, *, shipped: bool = False) -> TrainingRun:
    lay = {"8b": dict(tp=1, pp=1, cp=2, vp=1), "70b": dict(tp=4, pp=4, cp=2, vp=5), "405b": dict(tp=8, pp=9, cp=2, vp=7)}
    mb_ga = {"8b": "GA=32", "70b": "GA=64", "405b": "GA=63"}[size]
    model = llama3(size)
    notes = _L31_NOTES
    if size == "405b":  # llama3.1_405b.yaml: tokenizer type 'GPT2BPETokenizer', library 'megatron'
        model = model.replace(vocab_size=50257)
        notes = (*notes, "405B vocabulary 50257: llama3.1_405b.yaml uses the GPT2BPETokenizer as a proxy")
    table = f"llama3.1/README_{size}.md 'Llama 3.1 {size} 24.09 {dtype.upper()} (... MBS=1, {mb_ga})'"
    return _dgxc(f"nemo-llama3.1-{size}-{dtype}-{n}xh100" if dtype == "fp8" else f"nemo-llama3.1-{size}-{n}xh100",
                 table, cols, model, n, gbs, seconds, dtype, seq=8192, mb=1, recompute="none", stack=_L31,
                 notes=notes, shipped=shipped, **lay[size])


_NEMOTRON_NOTES = ("nemotron4-{15b,340b}-synth.yaml: sequence_parallel true, dropout 0, tokenizer "
                   "nemotron_2_256k.model (vocabulary 256000); 15B: no activation recompute, ub_tp_comm_overlap True, "
                   "configure.sh NVTE_FUSED_ATTN=1; 340B: activations_checkpoint_granularity selective (Megatron's "
                   "selective = the attention core, which a flash kernel never stores), ub_tp_comm_overlap False, "
                   "NVTE_FUSED_ATTN=0 (Transformer Engine then runs the flash-attn package: FlashAttention-2)",
                   "optimizer: 15B mcore_distributed_optim (fp32 states); 340B distributed_fused_adam with dtype bf16 "
                   "and grad_sync_dtype bf16 (Apex DistributedFusedAdam: m, v and its weight copy in bf16, sharded "
                   "over dp)",)


def _nemotron_dgxc(size: str, dtype: str, n: int, gbs: int, seconds: float) -> TrainingRun:
    big = size == "340b"
    stack = dict(_NEMO_STACK, attention="flash2" if big else "flash", tp_comm_overlap=not big,
                 **({"optimizer_states": "bf16"} if big else {}))
    header = ("Nemotron4 340b 24.11 {} (TP=8, PP=8, MBS=1, GA=16, VP=12)" if big
              else "Nemotron4 15b 24.11 {} (TP=4, PP=1, MBS=4, GA=4)").format(dtype.upper())
    lay = dict(tp=8, pp=8, vp=12, mb=1) if big else dict(tp=4, pp=1, vp=1, mb=4)
    return _dgxc(f"nemo-nemotron4-{size}-{dtype}-{n}xh100", f"nemotron/README_{size}.md '{header}'",
                 f"{n}x H100 GPUs (GBS={gbs})", nemotron(size), n, gbs, seconds, dtype, seq=4096,
                 recompute="selective" if big else "none", stack=stack, notes=_NEMOTRON_NOTES, **lay)


def _gpt175_dgxc(dtype: str, n: int, gbs: int, seconds: float) -> TrainingRun:
    return _dgxc(f"nemo-gpt3-175b-{dtype}-{n}xh100",
                 f"nemo_megatron/README_175b.md 'NeMo Megatron 24.11 {dtype.upper()} (TP=4,PP=8, MBS=1, VP=12, SEQ=2048)'",
                 f"{n}x H100 GPUs (GBS={gbs})", gpt("gpt3-175b", 96, 12288, 96, vocab=50257), n, gbs, seconds, dtype,
                 seq=2048, tp=4, pp=8, vp=12, mb=1, recompute="none",
                 stack=dict(_NEMO_STACK, attention="flash2", tp_comm_overlap=True, dropout=True),
                 notes=("gpt3_175b_hydra.yaml: no activation recompute, sequence_parallel, ub_tp_comm_overlap, "
                        "hidden and attention dropout 0.1, GPT2BPETokenizer (vocabulary 50257); configure.sh "
                        "NVTE_FUSED_ATTN=0 (the flash-attn package: FlashAttention-2)",))


DGXC = [
    _llama31("8b", "bf16", 8, 128, 12.91, "8x H100 GPUs (GBS=128)", shipped=True),
    _llama31("8b", "bf16", 128, 2048, 13.10, "128x H100 GPUs (GBS=2048)", shipped=True),
    _llama31("70b", "bf16", 64, 128, 14.72, "64x H100 GPUs (GBS=128)", shipped=True),
    _llama31("70b", "bf16", 2048, 4096, 14.98, "2048x H100 GPUs (GBS=4096)", shipped=True),
    _llama31("405b", "bf16", 576, 252, 17.20, "576x H100 GPUs (GBS 252)", shipped=True),
    _llama31("405b", "bf16", 2304, 1008, 17.62, "2304x H100 GPUs (GBS 1008)", shipped=True),
    _llama31("8b", "fp8", 8, 128, 9.67, "8x H100 GPUs (GBS=128)"),
    _llama31("8b", "fp8", 128, 2048, 9.82, "128x H100 GPUs (GBS=2048)"),
    _llama31("70b", "fp8", 64, 128, 11.01, "64x H100 GPUs (GBS=128)"),
    _llama31("70b", "fp8", 2048, 4096, 11.39, "2048x H100 GPUs (GBS=4096)"),
    _llama31("405b", "fp8", 576, 252, 11.24, "576x H100 GPUs (GBS 252)"),
    _llama31("405b", "fp8", 2304, 1008, 12.35, "2304x H100 GPUs (GBS 1008)"),
    _nemotron_dgxc("15b", "bf16", 16, 64, 2.83),
    _nemotron_dgxc("15b", "bf16", 2048, 8192, 2.96),
    _nemotron_dgxc("15b", "fp8", 16, 64, 2.08),
    _nemotron_dgxc("15b", "fp8", 2048, 8192, 2.18),
    _nemotron_dgxc("340b", "bf16", 128, 32, 4.61),
    _nemotron_dgxc("340b", "bf16", 2048, 512, 4.84),
    _nemotron_dgxc("340b", "fp8", 128, 32, 3.16),
    _nemotron_dgxc("340b", "fp8", 2048, 512, 3.49),
    _gpt175_dgxc("bf16", 128, 256, 8.91),
    _gpt175_dgxc("bf16", 2048, 4096, 9.02),
    _gpt175_dgxc("fp8", 128, 256, 5.92),
    _gpt175_dgxc("fp8", 2048, 4096, 6.24),
]

# ---- NeMo / Megatron Bridge performance summaries: layouts and Tokens/sec/GPU only; the rest is a band ----------
#: NVIDIA's perf recipes of the same period (the dgxc yamls above) use no recompute or Megatron's selective one,
#: a distributed optimizer or none, sequence parallelism and TP overlap on or off: the plausible values
_RECIPE_UNKNOWN: dict[str, tuple[Any, ...]] = {"recompute": ("none", "selective"), "zero": (0, 1)}
_TP_UNKNOWN: dict[str, tuple[Any, ...]] = {"sequence_parallel": (False, True), "tp_comm_overlap": (False, True)}
_PERF_NOTES = ("the table gives the layout and Tokens / sec / GPU; recompute, the distributed optimizer, sequence "
               "parallelism and TP-communication overlap are not published: evaluated over {none, selective}, "
               "ZeRO {0, 1}, SP and overlap {off, on} (the choices NVIDIA's recipes of the period make)",
               "Transformer Engine kernels and fused attention (the Hopper/Blackwell kernel); FP8 as the table says")


def _perf(rid: str, source: str, where: str, model: Any, n: int, gbs: int, mb: int, seq: int, tps: float, *,
          device: str = "H100-SXM5-80GB", hardware: str = _DGX_H100, tp: int = 1, pp: int = 1, cp: int = 1,
          vp: int = 1, ep: int = 1, zero: int | None = None, extra: dict[str, tuple[Any, ...]] | None = None,
          stack: dict[str, Any] | None = None, not_expressible: str = "", unlocks: str = "",
          notes: tuple[str, ...] = ()) -> TrainingRun:
    unknown = dict(_RECIPE_UNKNOWN, **(_TP_UNKNOWN if tp > 1 else {}), **(extra or {}))
    if zero is not None:
        del unknown["zero"]
    return TrainingRun(
        id=rid, source=source, where=where, model=model, hardware=hardware, device=device, num_devices=n,
        seq_len=seq, global_batch=gbs, precision="fp8",
        published=Published(kind="tokens_per_s_per_device", value=tps, text=f"{tps:g} Tokens / sec / GPU"),
        tp=tp, pp=pp, cp=cp, vp=vp, ep=ep, micro_batch=mb, zero=zero, recompute=None,
        sequence_parallel=False if tp == 1 else None,
        stack={k: v for k, v in dict(_NEMO_STACK, attention="flash", **(stack or {})).items() if k not in unknown},
        scaleout_gbps=_DGX_NET, unknown=unknown, not_expressible=not_expressible, unlocks=unlocks,
        notes=(*_PERF_NOTES, *notes))


#: Llama 3.1 405B's 126 layers over pp·vp = 64 chunks: NVIDIA's 405B recipes set Megatron-Core's
#: account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split (the NeMo 2 performance script for
#: llama3 405B; Megatron Bridge's llama3 recipe for its large models), i.e. (126 + 2) / 64 = 2 blocks a chunk, the
#: embedding and the loss one block each: the planner's pp_embedding_as_layer
_UNEVEN_405B_STACK: dict[str, Any] = {"pp_embedding_as_layer": True}
_UNEVEN_405B_NOTE = ("126 layers over pp 8 × vp 8 = 64 chunks: uneven stages, the embedding and the loss counted as one "
                     "block each (account_for_embedding/loss_in_pipeline_split in NVIDIA's 405B recipes)",)
_GPT3_DROPOUT = {"dropout": (False, True)}  # NeMo's GPT-3 configs have carried 0.1 (dgxc yaml) and 0.0 (NeMo 2)
_NEMOTRON_VOCAB = {"vocab_size": (50257, 256000)}  # the tokenizer is not stated: GPT-2 BPE proxy or the 256k model


def _nemo2407(model: Any, name: str, n: int, gbs: int, mb: int, seq: int, tp: int, pp: int, cp: int, vp: int,
              tps: float, extra: dict[str, tuple[Any, ...]] | None = None, task: str = "Pretraining") -> TrainingRun:
    rid = f"nemo2407-{name.lower()}{'-sft' if task != 'Pretraining' else ''}-{n}xh100"
    where = (f"NeMo 24.07 DGX-H100 FP8 '{task}' table: {name}, {n} GPUs, GBS {gbs}, MBS {mb}, seq {seq}, TP {tp}, "
             f"PP {pp}" + ("" if task != "Pretraining" else f", CP {cp}, VP {vp}") + f": {tps} Tokens / sec / GPU")
    return _perf(rid, "nemo-perf", where, model, n, gbs, mb, seq, tps, tp=tp, pp=pp, cp=cp, vp=vp, extra=extra)


_GPT = gpt
NEMO_PERF = [
    _nemo2407(_GPT("gpt3-5b", 32, 4096, 24, vocab=50257), "GPT3-5B", 64, 2048, 4, 2048, 1, 1, 1, 1, 23406, _GPT3_DROPOUT),
    _nemo2407(_GPT("gpt3-20b", 48, 6144, 44, vocab=50257), "GPT3-20B", 64, 256, 2, 2048, 2, 1, 1, 1, 5851, _GPT3_DROPOUT),
    _nemo2407(_GPT("gpt3-175b", 96, 12288, 96, vocab=50257), "GPT3-175B", 128, 256, 1, 2048, 4, 8, 1, 6, 716,
              _GPT3_DROPOUT),
    _nemo2407(_GPT("gpt3-175b", 96, 12288, 96, vocab=50257), "GPT3-175B", 512, 2048, 2, 2048, 4, 8, 1, 6, 825,
              _GPT3_DROPOUT),
    _nemo2407(llama2("7b"), "LLAMA2-7B", 8, 128, 1, 4096, 1, 1, 1, 1, 16934),
    _nemo2407(llama2("13b"), "LLAMA2-13B", 16, 128, 1, 4096, 1, 4, 1, 10, 8715),
    _nemo2407(llama2("70b"), "LLAMA2-70B", 64, 128, 1, 4096, 4, 4, 1, 20, 1728),
    _nemo2407(nemotron("8b"), "Nemotron-8B", 64, 256, 4, 4096, 2, 1, 1, 1, 12507, _NEMOTRON_VOCAB),
    _nemo2407(nemotron("22b"), "Nemotron-22B", 64, 256, 2, 4096, 2, 4, 1, 10, 4312, _NEMOTRON_VOCAB),
    _nemo2407(nemotron("340b"), "Nemotron-340B", 128, 32, 1, 4096, 8, 8, 1, 12, 326, _NEMOTRON_VOCAB),
    _nemo2407(llama3("8b"), "LLAMA3-8B", 8, 128, 1, 8192, 1, 1, 2, 1, 12273),
    _nemo2407(llama3("70b"), "LLAMA3-70B", 64, 128, 1, 8192, 4, 4, 2, 5, 1524),
    # full fine-tuning (SFT) on SQuAD packed to 4096 tokens: the same training step as pre-training
    _nemo2407(llama2("7b"), "LLAMA2-7B", 8, 32, 1, 4096, 1, 1, 1, 1, 16891, task="Finetuning (SFT)"),
    _nemo2407(llama2("13b"), "LLAMA2-13B", 8, 32, 1, 4096, 1, 4, 1, 1, 10176, task="Finetuning (SFT)"),
    _nemo2407(llama2("70b"), "LLAMA2-70B", 16, 32, 1, 4096, 4, 4, 1, 1, 1816, task="Finetuning (SFT)"),
]
for _name, _n, _tp, _pp, _tps in (("LLAMA2-7B", 8, 1, 1, 24824), ("LLAMA2-13B", 8, 1, 1, 14629),
                                  ("LLAMA2-70B", 8, 2, 4, 2621)):
    NEMO_PERF.append(_perf(
        f"nemo2407-{_name.lower()}-lora-{_n}xh100", "nemo-perf",
        f"NeMo 24.07 DGX-H100 FP8 'Finetuning' table: {_name} LoRA, {_n} GPUs, GBS 32, MBS 1, packed 4096, TP {_tp}, "
        f"PP {_pp}: {_tps} Tokens / sec / GPU", llama2(_name.split("-")[1].lower()), _n, 32, 1, 4096, _tps,
        tp=_tp, pp=_pp, stack={"frozen_weights": True},
        notes=("LoRA: the base weights are frozen (no weight gradients, optimizer states or gradient reduction for "
               "them): planned with frozen_weights; NeMo's adapters (rank 32 on the attention projections by default) "
               "are not counted",)))

_B200 = "DGX B200 (8 × B200 on NVLink5)"


def _nemo2502(model: Any, name: str, n: int, gbs: int, mb: int, seq: int, tp: int, pp: int, cp: int, vp: int, ep: int,
              tps: float, extra: dict[str, tuple[Any, ...]] | None = None, **kw: Any) -> TrainingRun:
    where = (f"NeMo 25.02 'System: DGX-B200' FP8 pre-training table: {name}, {n} GPUs, GBS {gbs}, MBS {mb}, seq {seq}, "
             f"TP {tp}, PP {pp}, CP {cp}, VP {vp}, EP {ep}: {tps} Tokens / sec / GPU")
    return _perf(f"nemo2502-{name.lower()}-{n}xb200", "nemo-perf", where, model, n, gbs, mb, seq, tps,
                 device="B200-SXM-180GB", hardware=_B200, tp=tp, pp=pp, cp=cp, vp=vp, ep=ep, extra=extra, **kw)  # type: ignore[arg-type]


NEMO_PERF += [
    _nemo2502(_GPT("gpt3-175b", 96, 12288, 96, vocab=50257), "GPT3-175B", 512, 2048, 2, 2048, 4, 4, 1, 6, 1, 1600,
              _GPT3_DROPOUT),
    _nemo2502(llama3("8b"), "LLAMA3-8B", 8, 128, 2, 8192, 1, 1, 1, 1, 1, 26006),
    _nemo2502(llama3("70b"), "LLAMA3-70B", 64, 128, 1, 8192, 2, 4, 2, 5, 1, 3062),
    _nemo2502(llama3("405b"), "LLAMA3-405B", 128, 64, 1, 8192, 4, 8, 2, 8, 1, 625, stack=_UNEVEN_405B_STACK,
              notes=_UNEVEN_405B_NOTE),
    _nemo2502(nemotron("15b"), "Nemotron-15B", 64, 256, 2, 4096, 1, 1, 1, 1, 1, 14760, _NEMOTRON_VOCAB),
    _nemo2502(nemotron("340b"), "Nemotron-340B", 128, 32, 1, 4096, 8, 4, 1, 12, 1, 602, _NEMOTRON_VOCAB),
    _nemo2502(get_preset("mixtral-8x7b"), "Mixtral-8x7B", 64, 256, 2, 4096, 1, 1, 1, 1, 8, 15457),
]


def _bridge(model: Any, name: str, n: int, gbs: int, fsdp: int, tp: int, pp: int, cp: int, vp: int, tps: float,
            **kw: Any) -> TrainingRun:
    where = (f"25.11 DGX-H100 table: {name}, {n} GPUs, FP8-CS, GBS {gbs}, MBS 1, seq 8192, FSDP {fsdp}, TP {tp}, "
             f"PP {pp}, CP {cp}, VP {vp if vp > 1 else 'n/a'}: {tps} Tokens / sec / GPU")
    return _perf(f"bridge2511-{name.lower()}-{n}xh100", "megatron-bridge", where, model, n, gbs, 1, 8192, tps,
                 tp=tp, pp=pp, cp=cp, vp=vp, zero=3 if fsdp else None, **kw)  # type: ignore[arg-type]


MEGATRON_BRIDGE = [
    _bridge(llama3("8b"), "LLAMA3_8B", 8, 128, 8, 1, 1, 1, 1, 14451),
    _bridge(llama3("70b"), "LLAMA3_70B", 64, 128, 0, 4, 8, 1, 5, 1602),
    _bridge(llama3("405b"), "LLAMA3.1_405B", 1024, 512, 0, 8, 8, 2, 8, 292, stack=_UNEVEN_405B_STACK,
            notes=_UNEVEN_405B_NOTE),
]

# ---- MLPerf Training v3.1 GPT-3 175B (NVIDIA, Eos) --------------------------------------------------------------
#: (nodes, system directory, logged global batch, median train_step_timing s over the logged steps)
_MLPERF = [(64, "eos_n64", 2048, 11.0453), (512, "eos-dfw_n512", 2048, 1.6084), (768, "eos-dfw_n768", 3072, 1.6159),
           (1024, "eos-dfw_n1024", 4096, 1.6193), (1280, "eos-dfw_n1280", 2560, 0.9256),
           (1344, "eos-dfw_n1344", 2688, 0.9296)]
MLPERF = [
    TrainingRun(
        id=f"mlperf31-gpt3-175b-{nodes * 8}xh100", source="mlperf-v3.1",
        where=f"NVIDIA/results/{system}_ngc23.09_nemo/gpt3/result_0.txt: global_batch_size {gbs}, median of "
              f"'train_step_timing' = {seconds} s",
        model=gpt("gpt3-175b", 96, 12288, 96, vocab=50257), hardware=f"{nodes} × DGX H100 (Eos)",
        device="H100-SXM5-80GB", num_devices=nodes * 8, seq_len=2048, global_batch=gbs, precision="fp8",
        published=Published(kind="step_time_s", value=seconds, text=f"train_step_timing {seconds} s (median)"),
        tp=4, pp=8, cp=1, vp=12, micro_batch=1, zero=1, recompute="none", sequence_parallel=True,
        stack=dict(kernels="fused", attention="flash", dropout=False, tp_comm_overlap=True),
        scaleout_gbps=_DGX_NET,
        notes=("config_DGXH100_*x8x*x4x8_mbs1.sh: TENSOR_MODEL_PARALLEL 4, PIPELINE_MODEL_PARALLEL 8, "
               "MICRO_BATCH_SIZE 1, TP_COMM_OVERLAP True; config_fp8.sh FP8 hybrid; conf/custom.yaml: "
               "virtual_pipeline_model_parallel_size 12 (INTERLEAVED_PIPELINE unset), sequence_parallel True, "
               "activations_checkpoint_granularity null, hidden/attention dropout 0.0, transformer_engine; "
               "run_and_time.sh: optim distributed_fused_adam (ZeRO-1, overlap_grad_sync/param_sync)",
               "the C4 SentencePiece model's vocabulary is not in the configs: evaluated at 32000 and 50257"),
        unknown={"vocab_size": (32000, 50257)})
    for nodes, system, gbs, seconds in _MLPERF
]

RUNS = [*DGXC, *NEMO_PERF, *MEGATRON_BRIDGE, *MLPERF]
