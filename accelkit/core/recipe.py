"""Recipe: how the work is done — numerics, memory-saving, compilation and the parallel layout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from accelkit.core.serving_memory import KVCacheDtype
from accelkit.core.spec import Spec, spec_field

Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]
Quantization = Literal["int8-dynamic", "int8-weight", "int4-weight", "fp8-weight", "fp8-dynamic"]
Recompute = Literal["none", "selective", "full", "budget"]
CompileMode = Literal[False, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
GradCompression = Literal["none", "bf16", "fp16", "powersgd"]
#: the PowerSGD settings, with torch's PowerSGDState argument each one becomes
POWERSGD_FIELDS = {"powersgd_rank": "matrix_approximation_rank", "powersgd_start_iter": "start_powerSGD_iter",
                   "powersgd_error_feedback": "use_error_feedback", "powersgd_warm_start": "warm_start",
                   "powersgd_min_compression_rate": "min_compression_rate"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Recipe(Spec):
    """Everything about *how* a workload runs. The defaults are plain fp32 eager on one device."""

    precision: Precision = spec_field("fp32", doc="Compute precision (bf16/fp16 via autocast, fp8 via torchao.float8).")
    quantization: Quantization | None = spec_field(None, doc="Post-training quantization; None for none.")
    kv_cache_dtype: KVCacheDtype = spec_field("auto", doc="KV-cache storage: auto (= model dtype), fp8 or int8.")
    recompute: Recompute = spec_field("none", doc="Activation checkpointing policy.")
    compile: CompileMode = spec_field(False, doc="torch.compile mode, or False for eager.")
    channels_last: bool = spec_field(False, doc="NHWC memory format for CNNs.")
    fold_bn: bool = spec_field(False, doc="Fold BatchNorm into the preceding convolution (inference).")
    sparsity: Literal["2:4"] | None = spec_field(None, doc="Semi-structured 2:4 weight sparsity (SM80+).")
    warm_allocator: bool = spec_field(False, doc="Reserve the measured peak in the CUDA caching allocator first.")
    dp: int = spec_field(1, min=1, doc="Data-parallel degree.")
    tp: int = spec_field(1, min=1, doc="Tensor-parallel degree.")
    pp: int = spec_field(1, min=1, doc="Pipeline-parallel stages.")
    ep: int = spec_field(1, min=1, doc="Expert-parallel degree (MoE).")
    zero: int = spec_field(0, min=0, max=3, doc="ZeRO stage over the data-parallel group (0 = plain DDP).")
    micro_batch: int = spec_field(1, min=1, doc="Sequences per micro-batch per data-parallel rank.")
    grad_accum: int = spec_field(1, min=1, doc="Micro-batches accumulated per optimizer step.")
    sequence_parallel: bool = spec_field(False, doc="Megatron sequence parallelism alongside tp.")
    offload: bool = spec_field(False, doc="Keep optimizer states in host memory (ZeRO-Offload).")
    grad_compression: GradCompression = spec_field(
        "none", doc="Data-parallel gradient communication: none (the gradients' own dtype), bf16 or fp16 (cast for "
                    "the reduction: torch's DDP compress hooks, FSDP2 MixedPrecisionPolicy(reduce_dtype)), powersgd "
                    "(rank-r low-rank all-reduce: torch's PowerSGD DDP hook, ZeRO 0 only).")
    powersgd_rank: int = spec_field(4, min=1, max=1024, doc="PowerSGD matrix_approximation_rank r: each compressed "
                                                            "n×m gradient travels as P (n×r) and Q (m×r).")
    powersgd_start_iter: int = spec_field(
        2, min=1, doc="PowerSGD start_powerSGD_iter: plain all-reduce before this step (torch's default 1000 suits a "
                      "long run; accelkit's 2 is the smallest DDP allows with error feedback or warm start).")
    powersgd_error_feedback: bool = spec_field(
        True, doc="PowerSGD use_error_feedback: add the last step's compression error to the next gradient.")
    powersgd_warm_start: bool = spec_field(True, doc="PowerSGD warm_start: reuse the last step's Q instead of a random one.")
    powersgd_min_compression_rate: float = spec_field(
        2.0, min=0.0, finite=True,
        doc="PowerSGD min_compression_rate: a matrix is compressed only when (n+m)·r × this < n·m; others (and every "
            "1-D tensor) are all-reduced as they are.")

    def validate(self) -> None:
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("sequence_parallel=True needs tp > 1 (it splits the tensor-parallel group's work)")
        if self.grad_compression != "powersgd":
            changed = [f for f in POWERSGD_FIELDS if getattr(self, f) != _DEFAULTS[f]]
            if changed:
                raise ValueError(f"{changed[0]} applies to grad_compression='powersgd', not {self.grad_compression!r}")
            return
        if self.zero > 0:
            raise ValueError(f"grad_compression='powersgd' is a DDP communication hook (zero 0); zero {self.zero} "
                             "reduce-scatters its gradients (FSDP/ZeRO), which torch's PowerSGD cannot compress — use "
                             "zero 0, or grad_compression='bf16' (a reduce dtype) with ZeRO")
        if (self.powersgd_error_feedback or self.powersgd_warm_start) and self.powersgd_start_iter < 2:
            raise ValueError("powersgd_start_iter must be >= 2 with error feedback or warm start (torch's PowerSGDState "
                             "rule: DDP rebuilds its gradient buckets after the first step, and the per-bucket error "
                             "and Q memorized before that would not match); turn both off to start at 1")

    @property
    def num_devices(self) -> int:
        """Devices the layout occupies: dp · tp · pp (expert parallelism reuses the dp ranks)."""
        return self.dp * self.tp * self.pp

    # ---- named presets (derive, don't pile up flags) ---------------------------------------------
    @classmethod
    def bf16(cls) -> Recipe:
        return cls(precision="bf16")

    @classmethod
    def bf16_compile(cls) -> Recipe:
        return cls(precision="bf16", compile="default")

    @classmethod
    def int8_dynamic(cls) -> Recipe:
        return cls(quantization="int8-dynamic")


_DEFAULTS = {f: Recipe.__dataclass_fields__[f].default for f in POWERSGD_FIELDS}
