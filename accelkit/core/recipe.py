"""Recipe: how the work is done — numerics, memory-saving, compilation and the parallel layout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from accelkit.core.spec import Spec, spec_field

Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]
Quantization = Literal["int8-dynamic", "int8-weight", "int4-weight", "fp8-weight", "fp8-dynamic"]
KVCacheDtype = Literal["auto", "fp8", "int8"]
Recompute = Literal["none", "selective", "full", "budget"]
CompileMode = Literal[False, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


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

    def validate(self) -> None:
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("sequence_parallel=True needs tp > 1 (it splits the tensor-parallel group's work)")

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
