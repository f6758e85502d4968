"""What a user asks the planner for, as specs: the workload around the model (``PlanRequest``) and the layout
fields they pin (``LayoutChoice``; every field left None is searched). `accelkit plan` generates its flags
from these two and from ``PlanOptions`` (accelkit/cli/spec_options.py), so a flag's default, help and range
are the field's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from accelkit.core.spec import Spec, spec_field
from accelkit.plan.layout import MAX_DEVICES


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRequest(Spec):
    """The workload and the question (one hardware or a comparison)."""

    task: Literal["train", "infer"] = spec_field("train", doc="train or infer.")
    hardware: str | None = spec_field(
        None, doc="Catalog name (h100, mi300x …) or 'cpu' (uses `hw probe`).")
    compare: str | None = spec_field(
        None, doc="Comma list of hardware: one row each (e.g. h100,h200,mi300x,b200).")
    compare_basis: Literal["devices", "budget", "min-devices"] | None = spec_field(
        None, doc="--compare: what the rows share — devices (the default: the same count, --num-devices or the "
                  "smallest at which every compared hardware fits), budget (the same $/hour: each gets the devices "
                  "its price buys) or min-devices (each at its own smallest count that fits).")
    budget_per_hour: float | None = spec_field(
        None, min=0.0, finite=True,
        doc="--compare-basis budget: dollars per hour for each hardware (default: the least at which every compared "
            "hardware fits).")
    num_devices: int | None = spec_field(
        None, min=1, max=MAX_DEVICES, doc="Devices; omitted: the smallest count that fits.")
    seq_len: int | None = spec_field(
        None, min=1, max=1 << 24, doc="Training sequence length (default min(4096, model max)).")
    global_batch: int | None = spec_field(
        None, min=1, max=1 << 30, doc="Sequences per step (default ≈ 4 Mi tokens).")
    precision: Literal["fp32", "bf16", "fp16", "fp8"] = spec_field("bf16", doc="Compute precision.")
    optimizer: Literal["adam", "sgd"] = spec_field("adam", doc="adam or sgd (with momentum).")
    offload: bool = spec_field(False, doc="Optimizer states in host memory (ZeRO-Offload).")
    batch: int | None = spec_field(
        None, min=1, max=1 << 24, doc="Inference: concurrent sequences per replica (default: most that fit, ≤ 256).")
    prompt_len: int = spec_field(512, min=1, max=1 << 24, doc="Inference prompt tokens.")
    output_len: int = spec_field(128, min=0, max=1 << 24, doc="Inference generated tokens.")
    kv_dtype: Literal["auto", "fp8", "int8"] = spec_field("auto", doc="KV cache: auto (model dtype), fp8 or int8.")
    top: int | None = spec_field(None, min=1, max=10_000, doc="Show the best K layouts.")
    scaleout_gbps: float | None = spec_field(
        None, min=0.001, max=1e7, finite=True,  # (above ~1e299 the bytes/s overflowed: an internal error)
        doc="Scale-out network per device in Gb/s, e.g. 100 (default 400: one 400 Gb/s NIC per GPU).")
    grad_compression: Literal["none", "bf16", "fp16", "powersgd"] = spec_field(
        "none", doc="Data-parallel gradient compression: none, bf16/fp16 (2 B per element: DDP compress hook, FSDP2 "
                    "reduce_dtype) or powersgd (rank-r P and Q per gradient matrix; DDP, zero 0).")
    powersgd_rank: int = spec_field(4, min=1, max=1024, doc="PowerSGD rank r (with --grad-compression powersgd).")
    compare_compression: bool = spec_field(
        False, doc="One row per gradient compression (none, bf16, fp16, powersgd) on the chosen layout.")

    def validate(self) -> None:
        if not self.hardware and not self.compare:
            raise ValueError("give --hardware NAME (e.g. h100) or --compare A,B,…")
        if self.compare_basis is not None and not self.compare:
            raise ValueError(f"--compare-basis {self.compare_basis} applies to --compare; add --compare A,B,… or drop it")
        if self.budget_per_hour is not None and self.compare_basis != "budget":
            raise ValueError(f"--budget-per-hour {self.budget_per_hour:g} applies to --compare-basis budget; add it, "
                             "or drop --budget-per-hour")
        if self.num_devices is not None and self.compare_basis not in (None, "devices"):
            raise ValueError(f"--num-devices {self.num_devices} gives every hardware the same count; drop it, or drop "
                             f"--compare-basis {self.compare_basis}")
        if self.compare and self.top is not None:
            raise ValueError(f"--top {self.top} lists one hardware's best layouts; --compare shows each hardware's best "
                             "one — drop --top, or plan one --hardware at a time")
        if self.compare_compression and (self.compare or self.task != "train" or (self.top or 1) > 1):
            raise ValueError("--compare-compression compares one training layout on one --hardware; drop --compare, "
                             "--top and --task infer")
        if self.powersgd_rank != 4 and self.grad_compression != "powersgd" and not self.compare_compression:
            raise ValueError(f"--powersgd-rank applies to --grad-compression powersgd, not {self.grad_compression}")

    @property
    def scaleout_bandwidth_bytes_per_s(self) -> float | None:
        return None if self.scaleout_gbps is None else self.scaleout_gbps * 1e9 / 8


@dataclass(frozen=True, slots=True, kw_only=True)
class LayoutChoice(Spec):
    """Layout fields the user pins; None = searched."""

    dp: int | None = spec_field(None, min=1, max=MAX_DEVICES, doc="Data-parallel degree (searched if omitted).")
    tp: int | None = spec_field(None, min=1, max=MAX_DEVICES, doc="Tensor-parallel degree (searched if omitted).")
    pp: int | None = spec_field(None, min=1, max=MAX_DEVICES, doc="Pipeline stages (searched if omitted).")
    ep: int | None = spec_field(None, min=1, max=MAX_DEVICES, doc="Expert-parallel degree, MoE (searched if omitted).")
    cp: int | None = spec_field(
        None, min=1, max=MAX_DEVICES, doc="Context-parallel degree: ranks one sequence is split over (default 1).")
    vp: int | None = spec_field(
        None, min=1, max=1024, doc="Virtual pipeline stages per rank, interleaved 1F1B (default 1).")
    zero: int | None = spec_field(None, min=0, max=3, doc="ZeRO stage 0-3 (searched if omitted).")
    micro_batch: int | None = spec_field(
        None, min=1, max=1 << 20, doc="Sequences per micro-batch (searched if omitted).")
    recompute: Literal["none", "selective", "full"] | None = spec_field(
        None, doc="Activation recomputation: none, selective or full (searched if omitted).")
    recompute_every: int | None = spec_field(
        None, min=1, max=1 << 20,
        doc="With --recompute full: checkpoint only every n-th transformer block, the others keeping all their "
            "activations (torchtitan's selective_ac_option n, 'selective layer' AC); default 1, every block.")
    sequence_parallel: bool | None = spec_field(
        None, doc="Megatron sequence parallelism (searched if omitted).")
    shard_group: int | None = spec_field(
        None, min=1, max=MAX_DEVICES,
        doc="Hybrid sharding (PyTorch HSDP, DeepSpeed MiCS): ZeRO shards the model states over this many of the dp "
            "ranks and replicates them over dp / N groups (gradients: reduce-scatter in the group, then an "
            "all-reduce of the shard across groups); it divides dp. Default: all dp ranks.")

    def fixed(self) -> dict[str, Any]:
        """The pinned fields, as ``search(fixed=...)`` takes them."""
        return {k: v for k, v in self.to_dict().items() if v is not None}
