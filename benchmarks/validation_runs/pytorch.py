"""PyTorch-native training: torchtitan's published tables (A100, Grand Teton H100), Trainy's torchtitan runs on
H200, and the Llama 3 paper's 405B layout."""

from __future__ import annotations

from typing import Any

from validation_runs.models import llama2, llama3
from validation_runs.schema import Published, Source, TrainingRun

SOURCES = [
    Source(key="torchtitan", organisation="Meta (PyTorch)", title="torchtitan performance tables",
           url="https://github.com/pytorch/torchtitan", date="2024-04-24",
           where="@3faaa1a0d docs/performance.md ('Llama 3 performance numbers', 'Llama 2 performance numbers': 64 × "
                 "A100 80GB, FSDP2, WPS per row; first published 2024-04-18/24) and @4a61bd87d "
                 "benchmarks/llama3_h100_202412_torchtitan.md (Tables 1-5, Grand Teton H100, torchtitan 9dec370, "
                 "2024-12-26); model sizes from torchtrain's llama_configs"),
    Source(key="trainy", organisation="Trainy (on WhiteFiber)", title="torchtitan Llama 3.1 8B on H200, multi-host",
           url="https://github.com/pytorch/torchtitan/blob/4a61bd87d/benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md",
           date="2025-06-13",
           where="the command (local_batch_size 2, compile, float8 with FSDP float8 all-gather) and the results table "
                 "(NUM_NODES 4 and 8: TPS/GPU); llama3_8b.toml @e7c0cae (seq_len 8192, data_parallel_shard_degree "
                 "-1, activation_checkpoint mode selective, selective_ac_option op)"),
    Source(key="llama3", organisation="Meta", title="The Llama 3 Herd of Models (2024), Table 4",
           url="https://arxiv.org/abs/2407.21783", date="2024-07",
           where="Table 4 as shown at SC'24 (glennklockwood.com/garden/llama-3.1): GPUs, TP, CP, PP, tokens per batch, "
                 "TFLOPs/GPU; H100 700 W 80 GB HBM3, 8 per server on NVLink, 400 Gb/s between GPUs"),
]

_A100 = "64 × A100 SXM4 80GB, 8 per node"
_TT_STACK: dict[str, Any] = dict(kernels="eager", attention="flash", dropout=False)
_TT_NOTES = ("torchtitan at the time: eager modules (no torch.compile), SDPA flash attention (FlashAttention-2 on "
             "A100), FSDP2 FULL_SHARD over all 64 GPUs; the inter-node network is not published: evaluated at 100, "
             "200 and 400 Gb/s per GPU",)
#: 'selective layer' AC: torchtitan's selective_ac_option as an integer n checkpoints every n-th block (block k of
#: 1, 2, … when k % n == 0: parallelize_llama.py checkpoint_wrapper @395a526) — planned as --recompute full
#: --recompute-every n. The tables do not give n; the config default of the time is "2" ("checkpoint every other
#: layer", torchtitan/config_manager.py @395a526, the commit that added docs/performance.md), and 1 would be "full",
#: which the tables list apart: evaluated at 2, 3 and 4
_EVERY_UNKNOWN = (2, 3, 4)
_SELECTIVE_LAYER_NOTE = ("'selective layer' AC: every n-th transformer block checkpointed (torchtitan's "
                         "selective_ac_option n, parallelize_llama.py checkpoint_wrapper), planned as --recompute full "
                         "--recompute-every n; n is not published: evaluated at 2 (config_manager.py's default, "
                         "'checkpoint every other layer'), 3 and 4")
#: torchtitan's op-level selective AC (parallelize_llama.py _custom_policy, unchanged from 3faaa1a0d to e7c0cae): "Saves
#: output of all compute ops, except every second mm" — half the forward matmuls run again in backward
_OP_SAC_NOTE = ("torchtitan's op-level selective AC (parallelize_llama.py _custom_policy): planned with "
                "selective_recompute 'op' — every second matmul of a block and its pointwise ops recomputed")


def _tt_a100(rid: str, model: Any, name: str, seq: int, bs: int, ac: str, wps: float, mfu: str, *,
             shipped: bool = False) -> TrainingRun:
    recompute = {"no": "none", "selective op": "selective", "full": "full", "selective layer": "full"}[ac]
    layer, op = ac == "selective layer", ac == "selective op"
    return TrainingRun(
        id=f"torchtitan-{rid}-64xa100", source="torchtitan", where=f"docs/performance.md: {name} batch size {bs}, activation checkpointing '{ac}': "
                                   f"{wps} WPS ({mfu} MFU)",
        model=model, hardware=_A100, device="A100-SXM4-80GB", num_devices=64, seq_len=seq, global_batch=64 * bs,
        precision="bf16", published=Published(kind="tokens_per_s_per_device", value=wps, text=f"{wps} WPS"),
        micro_batch=bs, zero=3, recompute=recompute, recompute_every=None if layer else 1,
        stack=dict(_TT_STACK, **({"selective_recompute": "op"} if op else {})), scaleout_gbps=None,
        unknown={"scaleout_gbps": (100.0, 200.0, 400.0), **({"recompute_every": _EVERY_UNKNOWN} if layer else {})},
        shipped_calibration=shipped,
        notes=(*_TT_NOTES, *((_OP_SAC_NOTE,) if op else ()), *((_SELECTIVE_LAYER_NOTE,) if layer else ()),
               *(("the shipped A100 factor was fitted with this run modelled as Megatron's selective recompute (no "
                  "extra matmul FLOPs)",) if op and shipped else ())))


TORCHTITAN = [
    _tt_a100("llama3-8b", llama3("8b"), "Llama 3 8B", 8192, 1, "selective op", 2973, "58.2%", shipped=True),
    _tt_a100("llama3-70b", llama3("70b"), "Llama 3 70B", 8192, 1, "full", 331, "51.7%", shipped=True),
    _tt_a100("llama2-13b", llama2("13b"), "Llama 2 13B", 4096, 2, "no", 2162, "61.1%", shipped=True),
    _tt_a100("llama2-70b", llama2("70b"), "Llama 2 70B", 4096, 2, "full", 353, "50.5%", shipped=True),
    _tt_a100("llama3-8b-sel-layer", llama3("8b"), "Llama 3 8B", 8192, 1, "selective layer", 2904, "56.8%"),
    _tt_a100("llama2-13b-sel-layer", llama2("13b"), "Llama 2 13B", 4096, 2, "selective layer", 1914, "54.1%"),
    _tt_a100("llama2-13b-sel-op", llama2("13b"), "Llama 2 13B", 4096, 2, "selective op", 1904, "53.8%"),
    _tt_a100("llama2-70b-sel-op-bs1", llama2("70b"), "Llama 2 70B", 4096, 1, "selective op", 355, "50.8%"),
]

_GRAND_TETON = "Grand Teton: H100 SXM 96GB HBM2e (2.4 TB/s), 500 W power limit, 8 per host on NVLink, 400 Gb/s per GPU"
#: torchtitan's default pipeline split of the period (generate_split_points: the first stage ⌊L/S⌋ layers, middle
#: stages one more while the remainder lasts, the last stage the rest): 126 layers over 8 stages as 15 + 6 × 16 + 15,
#: over 16 (2 per rank, interleaved) as 7 + 14 × 8 + 7 — the first and last one block lighter (pp_embedding_as_layer)
#: the Grand Teton H100's peaks: "between SXM and NVL" (footnote 2 of the benchmark page); the H100 NVL datasheet's
#: dense bf16 1,671/2 = 835.5 TFLOP/s (fp8 3,341/2) against the SXM5's 989 (1,979): a ratio of 0.845 for both
_GT_PEAK = (round(835.5 / 989, 4), 1.0)
_TT_SPLIT_NOTE = ("126 layers over 8 (16) stages: torchtitan's default split generate_split_points gives the first "
                  "and last stage one layer fewer, 15 + 6 × 16 + 15 (7 + 14 × 8 + 7): planned with "
                  "pp_embedding_as_layer")


def _tt_h100(table: str, rid: str, model: Any, n: int, seq: int, local_bs: int, ac: str, technique: str, tps: float,
             *, tp: int = 1, pp: int = 1, cp: int = 1, vp: int = 1) -> TrainingRun:
    compiled, fp8 = "compile" in technique, "Float8" in technique
    dp = n // (tp * pp * cp)
    return TrainingRun(
        id=rid, source="torchtitan", where=f"benchmarks/llama3_h100_202412_torchtitan.md {table}: {technique}: {tps} TPS/GPU",
        model=model, hardware=_GRAND_TETON, device="H100-SXM5-96GB", num_devices=n, seq_len=seq, global_batch=dp * local_bs,
        precision="fp8" if fp8 else "bf16",
        published=Published(kind="tokens_per_s_per_device", value=tps, text=f"{tps:g} TPS/GPU"),
        tp=tp, pp=pp, cp=cp, vp=vp, micro_batch=local_bs if pp == 1 else None, zero=3, recompute=ac,
        sequence_parallel=tp > 1, stack=dict(kernels="fused" if compiled else "eager", attention="flash2", dropout=False,
                                              tp_comm_overlap="AsyncTP" in technique,
                                              **({"pp_embedding_as_layer": True} if pp > 1 else {}),
                                              **({"selective_recompute": "op"} if ac == "selective" else {})),
        scaleout_gbps=400.0, unknown={"peak_scale": _GT_PEAK, **({} if pp == 1 else {"micro_batch": (1, 2, 4)})},
        # Tables 1 and 3 'selective activation checkpointing': torchtitan's llama3_8b.toml default, selective_ac_option
        # 'op' — the op-level policy (selective_recompute 'op')
        notes=("SDPA on Hopper runs FlashAttention-2; torch.compile = fused kernels; Float8 on nn.Linear",
               "catalog H100-SXM5-96GB: the memory, bandwidth and power limit torchtitan publishes; its peaks are the "
               "700 W SXM5's, an upper bound: torchtitan says the peak lies 'between SXM and NVL', so the band spans "
               "the H100 NVL datasheet's (835.5 / 989 of SXM's dense bf16 and fp8) to SXM's (peak_scale)",
               *((_TT_SPLIT_NOTE,) if pp > 1 else ())))


_T1 = "Table 1 (Llama 3.1 8B, 8 GPUs, local batch 2, global 16, selective AC, FSDP)"
_T3 = "Table 3 (Llama 3.1 8B, 128 GPUs, local batch 2, global 256, selective AC, FSDP)"
_T2 = "Table 2 (Llama 3.1 8B, 8 GPUs, FSDP + CP + compile + Float8, local batch 1, full AC)"
_T4 = "Table 4 (Llama 3.1 70B, 256 GPUs, FSDP 32 TP 8, compile + Float8, local batch 16, global 512, full AC)"
_T5 = "Table 5 (Llama 3.1 405B, 512 GPUs, FSDP 8 TP 8 PP 8, compile + Float8 + AsyncTP, local batch 32, full AC)"
_TECH = (("FSDP", "fsdp"), ("FSDP + torch.compile", "compile"), ("FSDP + torch.compile + Float8", "compile-fp8"))
TORCHTITAN += [
    *[_tt_h100(_T1, f"torchtitan-llama3-8b-{tag}-8xh100gt", llama3("8b"), 8, 8192, 2, "selective", tech, tps)
      for (tech, tag), tps in zip(_TECH, (5762, 6667, 8532), strict=True)],
    *[_tt_h100(_T3, f"torchtitan-llama3-8b-{tag}-128xh100gt", llama3("8b"), 128, 8192, 2, "selective", tech, tps)
      for (tech, tag), tps in zip(_TECH, (5605, 6514, 8380), strict=True)],
    *[_tt_h100(_T2, f"torchtitan-llama3-8b-cp{cp}-s{seq // 1024}k-8xh100gt", llama3("8b"), 8, seq, 1, "full",
               f"FSDP {8 // cp}, CP {cp}, sequence {seq}, compile + Float8", tps, cp=cp)
      for cp, seq, tps in ((1, 32768, 3890), (2, 65536, 2540), (4, 131072, 1071), (8, 262144, 548))],
    _tt_h100(_T4, "torchtitan-llama3-70b-2d-256xh100gt", llama3("70b"), 256, 8192, 16, "full",
             "2D, compile + Float8", 829, tp=8),
    _tt_h100(_T4, "torchtitan-llama3-70b-2d-asynctp-256xh100gt", llama3("70b"), 256, 8192, 16, "full",
             "2D + AsyncTP, compile + Float8", 876, tp=8),
    *[_tt_h100(_T5, f"torchtitan-llama3-405b-{tag}-512xh100gt", llama3("405b"), 512, 8192, 32, "full",
               f"{schedule}, compile + Float8 + AsyncTP", tps, tp=8, pp=8, vp=vp)
      for schedule, tag, vp, tps in (("1F1B", "1f1b", 1, 100), ("Interleaved 1F1B", "interleaved", 2, 128))],
]

TRAINY = [TrainingRun(
    id=f"trainy-llama3-8b-fp8-{nodes * 8}xh200", source="trainy",
    where=f"results table: NUM_NODES {nodes}: {tps} TPS/GPU ({mem} GiB)", model=llama3("8b"),
    hardware="H200 SXM 141GB, 8 per host on NVLink, 400 Gb/s (ConnectX-7) per GPU", device="H200-SXM-141GB",
    num_devices=nodes * 8, seq_len=8192, global_batch=nodes * 8 * 2, precision="fp8",
    published=Published(kind="tokens_per_s_per_device", value=tps, text=f"{tps} TPS/GPU"),
    micro_batch=2, zero=3, recompute="selective", scaleout_gbps=400.0,
    stack=dict(kernels="fused", attention="flash2", dropout=False, selective_recompute="op"),
    notes=("torchtitan e7c0cae: FSDP2 over all ranks (data_parallel_shard_degree -1), selective op AC, torch.compile "
           "(fused kernels), float8 linears; SDPA on Hopper = FlashAttention-2",
           "--quantize.linear.float8.enable_fsdp_float8_all_gather: FSDP gathers fp8 weights; the planner gathers "
           "bf16 (a small over-estimate of the gather time)"))
    for nodes, tps, mem in ((4, 10938, 47.96), (8, 10753, 46.97))]

LLAMA3 = [TrainingRun(
    id=f"llama3-405b-{n}xh100", source="llama3", where=f"Table 4: {n:,} GPUs, TP 8, CP 1, PP 16, 16M tokens/batch: "
                                                       f"{tflops} TFLOPs/GPU",
    model=llama3("405b"), hardware="H100 SXM5 80GB HBM3 at 700 W, 8 per server, 400 Gb/s per GPU",
    device="H100-SXM5-80GB", num_devices=n, seq_len=8192, global_batch=2048, precision="bf16",
    published=Published(kind="tflops_per_device", value=tflops, text=f"{tflops} TFLOPs/GPU"),
    tp=8, pp=16, vp=8, micro_batch=None, zero=2, recompute="none", sequence_parallel=True, scaleout_gbps=400.0,
    stack=dict(kernels="fused", attention="flash", dropout=False, pp_embedding_as_layer=True),
    unknown={"micro_batch": (1,)},
    notes=("TFLOPs/GPU converted with accelkit's FLOPs per token: the paper's convention is not stated",
           "126 layers over 16 stages, §3.3.2: one Transformer layer fewer on the first and the last stage, whose "
           "first / last chunk holds the embedding / the output projection and loss — the embedding and the head "
           "counted as one block each (pp_embedding_as_layer): 7 + 14 × 8 + 7",
           "vp 8, derived from §3.3.2 (V is not printed): 'we use an interleaved schedule ... with V pipeline stages "
           "on one pipeline rank', and after taking one layer from the first stage 'the first model chunk on the "
           "first stage has only the embedding' — so a chunk holds one layer, and (126 + 2) / 16 = 8 chunks per rank",
           "zero 2, §3.3.2: 'Our use of FSDP for Llama 3 shards optimizer states and gradients, but for model shards "
           "we do not reshard after forward computation to avoid an extra all-gather communication during backward "
           "passes' — ZeRO-2's memory and traffic (the planner's zero 3 gathers the weights again for backward)",
           "recompute none, §3.3.2: 'we could pre-train Llama 3 on sequences of 8K tokens without activation "
           "checkpointing'; micro-batch not published (1: 32 and 16 sequences per DP rank, the smallest M)",
           "the paper's own schedule makes N (contiguous micro-batches per chunk) tunable; N is not published and the "
           "planner plays Megatron-LM's (N = pp)"))
    for n, tflops in ((8192, 430), (16384, 400))]

RUNS = [*TORCHTITAN, *TRAINY, *LLAMA3]
