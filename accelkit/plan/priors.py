"""Published efficiency priors, one per device and kernel class: the fraction of a datasheet peak that
real kernels reach. Every figure carries its source; a plan lists the ones it used in ``assumptions``.
``calibrate.py`` replaces them with this machine's `hw probe` measurements when the device matches.

Kernel classes: dense matmuls (GEMM), fused attention (flash), memory-bound kernels (elementwise,
normalisation, softmax, rotary, the optimizer step, decode's weight and KV reads), collectives inside a
node (scale-up) and across nodes (scale-out), and the host-side cost of launching one kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelkit.core import DeviceSpec

#: best achieved / dense peak for pure matmuls (stas00/ml-engineering, MAMF tables)
MAMF_SOURCE = "stas00/ml-engineering MAMF tables (best pure-matmul achieved / dense peak)"
_MAMF: dict[str, dict[str, float]] = {
    "A100": {"bf16": 0.87, "fp16": 0.87},
    "H100": {"bf16": 0.80, "fp16": 0.80, "fp8": 0.71},
    "H200": {"bf16": 0.80, "fp16": 0.80, "fp8": 0.73},
    "B200": {"bf16": 0.78, "fp16": 0.78, "fp8": 0.76},
    "MI325X": {"bf16": 0.60, "fp16": 0.60},
    "MI300X": {"bf16": 0.51, "fp16": 0.51},
}
#: no published figure for the device/dtype: an assumption, said so in the plan — and never more generous than a
#: figure measured on the same card in another dtype (MI300X fp8 would otherwise plan at 0.75 beside its measured
#: bf16 0.51 and rank above H200 fp8, against every public comparison): ``prior_efficiency`` caps it there
DEFAULT_COMPUTE = 0.75

#: flash attention, forward + backward, as a fraction of the dense 16-bit peak at long sequences, by GPU
#: generation and kernel. "flash" is the best kernel of the generation (FlashAttention-3 / cuDNN on
#: Hopper, FlashAttention-2 on Ampere); "flash2" is FlashAttention-2 everywhere.
_ATTENTION: dict[str, dict[str, float]] = {
    # FA2 paper (Dao 2023, arXiv 2307.08691): "50-73% of the theoretical maximum FLOPs/s on A100"; the
    # backward pass is the slower one, so fwd+bwd takes the low end
    "A100": {"flash": 0.50, "flash2": 0.50},
    # FA3 paper (Shah et al. 2024, arXiv 2407.08608): FA2 reaches 35% of H100; FA3 is 1.5-2.0x faster
    # (up to 75% forward); fwd+bwd takes FA2's 35% × the low end 1.5 of the speed-up
    "H100": {"flash": 0.35 * 1.5, "flash2": 0.35},
    "H200": {"flash": 0.35 * 1.5, "flash2": 0.35},
}
ATTENTION_SOURCE = {
    "A100": "FlashAttention-2 paper (arXiv 2307.08691): 50-73% of A100 peak; fwd+bwd at the low end 0.50",
    "H100": "FlashAttention-3 paper (arXiv 2407.08608): FA2 35% of H100 peak, FA3 1.5-2.0x faster; "
            "flash = 0.35 × 1.5, flash2 = 0.35",
}
ATTENTION_SOURCE["H200"] = ATTENTION_SOURCE["H100"] + " (H200 has H100's tensor cores)"
#: flash kernels tile the sequence in 128-row blocks (FA2 and FA3): a causal kernel computes the blocks on
#: the diagonal in full, so it executes s/2 + 64 of every s key positions (useful fraction s/(s+128));
#: ``causal_block_factor`` has the sliding-window case
FLASH_BLOCK = 128


def causal_block_factor(span: float) -> float:
    """Useful share of the query-key pairs a causal flash kernel executes when each query attends to a band of
    ``span`` keys: min(s, w) for s tokens under a sliding window w (no window: s). span / (span + FLASH_BLOCK).

    In B × B tiles (B = FLASH_BLOCK), query block a of a causal kernel over s tokens runs key blocks 0 … a: s/B·(s/B+1)/2
    tiles in all, of which the s/B diagonal ones are half masked — s²/2 + s·B/2 pairs executed for s²/2 useful,
    s/(s+B). A window w < s (a multiple of B) cuts each query block to key blocks a − w/B … a: w/B + 1 tiles once
    a ≥ w/B, a + 1 before, (w/B + 1)(s/B − w/(2B)) tiles in all, and two of each row's tiles are half masked (the
    diagonal and the window's edge) — (w + B)(s − w/2) pairs executed for the w(s − w/2) useful ones, w/(w+B): the
    window, not s, sets it. At w = s both give s/(s+B)."""
    return span / (span + FLASH_BLOCK)
#: no published figure: half the matmul efficiency, labelled ASSUMED in the plan
DEFAULT_ATTENTION_OF_COMPUTE = 0.5

#: FlashAttention written in Triton before Triton's MLIR backend (flash_attn_triton.py of the flash-attention
#: repository, "tested with triton==2.0.0.dev20221202", "only tested on A100"; MosaicML llm-foundry's
#: ``attn_impl: triton`` runs it through the triton-pre-mlir package, on Ampere and Hopper alike: no
#: Hopper instructions). The FA2 paper (arXiv 2307.08691, §4.1) measures FlashAttention-2 "around
#: 1.3-1.5× faster than FlashAttention in Triton in the forward pass and around 2× faster in the backward
#: pass". With the backward at 2.5× the forward FLOPs, the fwd+bwd time ratio is 1/3.5·1.4 + 2.5/3.5·2 =
#: 1.83 whatever the two passes' own rates (±0.03 over 1.3-1.5 and forward/backward rates 0.63-0.73 of
#: peak): the kernel runs at FlashAttention-2's efficiency of the same generation ÷ 1.83.
FLASH_TRITON_SLOWDOWN = (1.4 + 2.5 * 2.0) / 3.5
#: FlashAttention-1 (the 2022 CUDA kernels): FlashAttention-2's paper (arXiv 2307.08691, abstract and §4.1) measures
#: FA2 "around 2× faster than FlashAttention" forward and backward on A100
FLASH1_SLOWDOWN = 2.0
FLASH1_SOURCE = ("FlashAttention-1 (2022 CUDA kernels): FlashAttention-2's efficiency ÷ 2 — the FA2 paper (arXiv "
                 "2307.08691 §4.1) measures FA2 around 2× faster than FlashAttention")
FLASH_TRITON_SOURCE = ("FlashAttention in pre-MLIR Triton (flash_attn_triton.py; llm-foundry attn_impl triton): "
                       "FlashAttention-2's efficiency ÷ 1.83 — the FA2 paper (arXiv 2307.08691 §4.1) measures FA2 "
                       "1.3-1.5× faster forward and ~2× faster backward than it")

#: compute that runs while a collective runs beside it is slower: NCCL kernels take SMs and HBM bandwidth.
#: Lee et al. 2025 (arXiv 2507.03114, "Characterizing Compute-Communication Overlap in GPU-Accelerated
#: Distributed Deep Learning", A100/H100/MI250/MI210, GPT and LLaMA): "overlapping computation and
#: communication can result in an average computational slowdown of 18.9%, with a maximum of 40.0%"
OVERLAP_SLOWDOWN = 0.189
OVERLAP_SOURCE = ("compute overlapped with a collective runs 18.9% slower (Lee et al. 2025, arXiv 2507.03114: "
                  "average over A100/H100/MI250/MI210, GPT and LLaMA; max 40%)")

#: memory-bound kernels achieved / ideal HBM bandwidth: FasterTransformer 13B on A100, 16.7 ms ideal vs 22.0
MEMORY = 16.7 / 22.0
MEMORY_SOURCE = "kipply's inference arithmetic via llm-analysis: FT 13B A100 decode 16.7 ms ideal / 22.0 ms measured"

#: collective bus bandwidth / one-direction link bandwidth inside a node
COMM = {"nvidia": 0.80, "amd": 312.9 / 448.0}
COMM_SOURCE = {
    "nvidia": "stas00/ml-engineering network chapter: NCCL ring all-reduce bus bw ≈ 0.78-0.82 of the link",
    "amd": "hardware.csv MI300X note: 8-GPU RCCL all-reduce 312.9 GB/s of 448 GB/s xGMI",
}
#: NVLink4 (H100/H200 HGX): nccl-tests all_reduce on one DGX H100, 8 GPUs, 128 MiB: busbw 400.53 GB/s of
#: the 450 GB/s link (NVIDIA/dgxc-benchmarking nccl/README.md sample output)
_COMM_BY_FABRIC = {"NVLink4": 400.53 / 450.0}
COMM_FABRIC_SOURCE = {"NVLink4": "NVIDIA dgxc-benchmarking nccl/README.md: 8×H100 all_reduce busbw 400.53 GB/s "
                                 "at 128 MiB of 450 GB/s NVLink4"}
DEFAULT_COMM = 0.80
#: across nodes NCCL runs two-level (hierarchical) collectives that pipeline the scale-up and scale-out
#: stages (Intel Gaudi network guide: "implemented in a hierarchical manner, thus pipelining scale-up and
#: scale-out communication in parallel"); the NIC reaches this fraction of its line rate: ASSUMED, the
#: same as a ring over NVLink (checked against nccl-tests in docs/validation.md)
SCALEOUT = 0.80

#: host time to launch one kernel from eager PyTorch (dispatch + cudaLaunchKernel); a layer whose kernels
#: are shorter than this is bound by the host: ASSUMED (no published figure in our sources)
LAUNCH_S = 5e-6

#: host link for optimizer offload (PCIe 4.0 x16 ≈ 25 GB/s effective per direction): assumed
OFFLOAD_BANDWIDTH = 25e9

#: per-collective start-up latency (decode-size messages are latency-bound): nccl-tests all_reduce of 8 B on
#: 8×H100 takes 13.0-13.7 µs (dgxc-benchmarking nccl/README.md); 10 µs was used before that source
COLLECTIVE_LATENCY_S = 13e-6


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Achieved fractions of the peaks, per kernel class, with where each came from."""

    compute: float  # GEMM: best achieved / dense peak (MAMF, or the probe's matmul)
    memory: float  # memory-bound kernels: achieved / HBM bandwidth
    comm: float  # collectives inside a node: bus bandwidth / one-direction link bandwidth
    sources: tuple[str, ...]
    calibrated: bool = False
    attention: float = 0.5  # flash attention fwd+bwd / dense peak at long sequences
    flash2: float = 0.35  # the same for FlashAttention-2 (options.attention == "flash2")
    scaleout: float = SCALEOUT  # NIC achieved / line rate
    launch_s: float = LAUNCH_S
    #: the per-card figures above that are ASSUMED, not published or measured ("compute", "attention"): the plan
    #: tables mark them (the sources say why)
    assumed: tuple[str, ...] = ()


#: devices with no figures of their own that carry another family's chip: their name prefix → that family. Every
#: prior (MAMF, attention) and the fitted factors (fitted.py) are looked up through ``family``, so an alias makes them
#: all resolve the same way. GH200 is an H100 die (the same 989 TF dense bf16 tensor cores, more and faster HBM) beside
#: a Grace CPU: matching names by prefix alone gave it the generic ASSUMED priors, and --compare ranked it below H100
#: on a compute-bound plan although it is at least H100 on every figure (found in review)
FAMILY_ALIASES: dict[str, str] = {"GH200": "H100"}


def family(device: DeviceSpec) -> str | None:
    """The catalog family a device's priors are filed under ('H100', 'A100' …; a ``FAMILY_ALIASES`` name resolved:
    GH200 → H100), or None. The longest matching name prefix wins (GH200 is not H200)."""
    name = device.name.upper()
    for key in sorted({*_MAMF, *_ATTENTION, *FAMILY_ALIASES}, key=len, reverse=True):
        if name.startswith(key):
            return FAMILY_ALIASES.get(key, key)
    return None


def assumed_compute(device_name: str, dtype: str, measured: dict[str, float], where: str) -> tuple[float, str]:
    """The ASSUMED matmul efficiency of ``dtype`` on a card with no figure for it, and its sentence:
    ``DEFAULT_COMPUTE``, capped at the lowest efficiency ``measured`` on the same card in another dtype (dtype →
    fraction of that dtype's dense peak; ``where`` names where they come from)."""
    compute = DEFAULT_COMPUTE
    why = f"ASSUMED — no published MAMF figure for {device_name} {dtype}"
    if measured:
        floor_dtype, floor = min(measured.items(), key=lambda kv: kv[1])
        if floor < compute:
            compute = floor
            why += (f"; capped at the same card's measured {floor_dtype} {floor:.2f} ({where}): an assumption is "
                    f"never more generous than a measured figure beside it (default {DEFAULT_COMPUTE:.2f})")
    return compute, f"compute efficiency {compute:.2f} of dense {dtype} peak: {why}"


def prior_efficiency(device: DeviceSpec, dtype: str) -> Efficiency:
    """Published priors for ``device`` computing in ``dtype`` (matmul dtype: bf16, fp8 …)."""
    fam = family(device)
    table = _MAMF.get(fam or "", {})
    assumed: list[str] = []
    # an alias (GH200 → H100) says whose figures these are
    label = fam if fam is None or device.name.upper().startswith(fam) else f"{fam}: {device.name} has its chip"
    if dtype in table:
        compute = table[dtype]
        csrc = f"compute efficiency {compute:.2f} of dense {dtype} peak ({label}): {MAMF_SOURCE}"
    else:
        compute, csrc = assumed_compute(device.name, dtype, table, "MAMF tables")
        assumed.append("compute")
    attn = _ATTENTION.get(fam or "")
    if attn is not None:
        attention, flash2 = attn["flash"], attn["flash2"]
        asrc = (f"attention efficiency {attention:.2f} (flash) / {flash2:.2f} (flash2) of dense 16-bit peak, fwd+bwd, "
                f"× s/(s+{FLASH_BLOCK}) for causal masking: {ATTENTION_SOURCE[fam or '']}")
    else:
        attention = flash2 = DEFAULT_ATTENTION_OF_COMPUTE * compute
        asrc = (f"attention efficiency {attention:.2f} of dense peak: ASSUMED — half the matmul efficiency "
                f"(no published flash-attention figure for {device.name})")
        assumed.append("attention")
    comm = _COMM_BY_FABRIC.get(device.scaleup_fabric, COMM.get(device.vendor, DEFAULT_COMM))
    comm_src = COMM_FABRIC_SOURCE.get(device.scaleup_fabric) or COMM_SOURCE.get(
        device.vendor, "ASSUMED 0.80 (no published collective efficiency for this vendor)")
    return Efficiency(
        compute=compute, memory=MEMORY, comm=comm, attention=attention, flash2=flash2, assumed=tuple(assumed),
        sources=(
            csrc,
            asrc,
            f"memory efficiency {MEMORY:.2f} of HBM bandwidth (elementwise, norm, softmax, rotary, optimizer, decode "
            f"reads): {MEMORY_SOURCE}",
            f"communication efficiency {comm:.2f} of link bandwidth: {comm_src}",
            f"scale-out efficiency {SCALEOUT:.2f} of NIC line rate: ASSUMED (two-level collectives, see comm.py)",
            f"kernel launch {LAUNCH_S * 1e6:g} µs of host time per kernel: ASSUMED",
        ),
    )
