"""The records of the validation set: a source, a published training run, a published serving point.

A record holds what its source publishes and nothing else. A layout or stack field the source does not give is
``None`` and its plausible values are listed in ``unknown``; the harness evaluates the planner on every
combination (a band) instead of picking one. ``notes`` says where each number is read and which facts come
from the source's code or configuration rather than from its table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from accelkit.core import ModelSpec

#: layout fields a training run can publish; ``None`` = not published
LAYOUT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch", "zero", "recompute", "recompute_every",
                 "sequence_parallel")

#: what a run's published throughput is, and how the harness turns it into tokens/s per device
PublishedKind = Literal[
    "step_time_s",               # seconds per optimizer step: global_batch · seq_len / s / devices
    "tokens_per_s_per_device",   # as published
    "tokens_per_s_total",        # all devices together: / devices
    "megatron_pflops_total",     # aggregate PFLOP/s by Narayanan et al. 2021 Equation 3 (recompute counted)
    "tflops_per_device",         # model TFLOP/s per device, convention not stated: ÷ accelkit's FLOPs per token
]


@dataclass(frozen=True, kw_only=True)
class Source:
    """One publication (a paper's table, a benchmark page, a results repository at a commit)."""

    key: str
    organisation: str
    title: str
    url: str
    date: str  # when the figures were published (YYYY-MM or YYYY-MM-DD)
    where: str  # the tables, files and commits the records read


@dataclass(frozen=True, kw_only=True)
class Published:
    kind: PublishedKind
    value: float
    text: str  # the figure as the source prints it, with its unit


@dataclass(frozen=True, kw_only=True)
class TrainingRun:
    """One published training run: the fields its source gives (``None`` where it gives none)."""

    id: str
    source: str
    where: str  # table / figure / row / column, and where each number is
    model: ModelSpec
    hardware: str  # as published
    device: str | None  # catalog device, or None when the catalog has no such device (then not expressible)
    num_devices: int
    seq_len: int
    global_batch: int | None
    precision: str  # bf16 | fp8
    published: Published
    tp: int | None = 1
    pp: int | None = 1
    dp: int | None = None  # None: num_devices / (tp·pp·cp) — arithmetic, not a choice
    cp: int | None = 1
    ep: int | None = 1
    vp: int | None = 1
    micro_batch: int | None = None
    zero: int | None = None  # 0 DDP, 1 distributed optimizer, 2, 3 FSDP FULL_SHARD
    recompute: str | None = None  # none | selective | full
    recompute_every: int | None = 1  # with full: one block in n checkpointed (torchtitan's selective_ac_option n)
    sequence_parallel: bool | None = False
    stack: dict[str, Any] = field(default_factory=dict)  # PlanOptions fields read from the source
    scaleout_gbps: float | None = None  # per GPU; None = unknown (then listed in ``unknown``)
    unknown: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # field → plausible values
    not_expressible: str = ""  # why the planner cannot express the run today ("" when it can)
    unlocks: str = ""  # the planner feature that would make it expressible
    shipped_calibration: bool = False  # one of the runs accelkit/plan/fitted.py's values were fitted on
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for key in self.unknown:
            if key in LAYOUT_FIELDS and getattr(self, key) is not None:
                raise ValueError(f"{self.id}: {key} is published ({getattr(self, key)}) and also listed as unknown")
            if key in self.stack:
                raise ValueError(f"{self.id}: {key} is in the stack and also listed as unknown")
        for key in LAYOUT_FIELDS:
            if key != "dp" and getattr(self, key) is None and key not in self.unknown:
                raise ValueError(f"{self.id}: {key} is not published; list its plausible values in unknown")
        if self.scaleout_gbps is None and "scaleout_gbps" not in self.unknown and self.num_devices > 8:
            raise ValueError(f"{self.id}: the network is not published; list plausible Gb/s per GPU in unknown")
        if self.device is None and not self.not_expressible:
            raise ValueError(f"{self.id}: hardware {self.hardware!r} is not in the catalog; say so in not_expressible")
        if bool(self.not_expressible) != bool(self.unlocks):
            raise ValueError(f"{self.id}: not_expressible and unlocks go together")

    @property
    def expressible(self) -> bool:
        return not self.not_expressible


ServingMetric = Literal[
    "ttft_s",                # time to first token of one request at concurrency 1: one prompt's prefill
    "itl_s",                 # inter-token latency at a concurrency below saturation (continuous batching)
    "batch_latency_s",       # a static batch end to end (vLLM benchmark_latency): prefill + output_len decodes
    "output_tokens_per_s",   # offline maximum throughput (all requests queued at once), all devices together
]


@dataclass(frozen=True, kw_only=True)
class ServingPoint:
    """One published serving figure at stated input/output lengths and batch or concurrency."""

    id: str
    source: str
    where: str
    model: ModelSpec
    hardware: str
    device: str
    tp: int
    engine: str  # serving engine and version, as published
    weights: str  # bf16 | fp8 (weights and matmuls)
    kv_cache_dtype: str | None  # auto | fp8; None = not published (then in ``unknown``)
    prompt_len: int
    output_len: int
    batch: int | None  # concurrency / batch size; None for an offline maximum-throughput run
    max_batch: int | None  # the engine's batch cap (max_num_seqs / max_batch_size); None = not published
    memory_fraction: float | None  # vLLM gpu_memory_utilization / TRT-LLM kv_cache_free_gpu_mem_fraction
    memory_rule: Literal["vllm", "trtllm", "none"]  # how the engine applies memory_fraction
    metric: ServingMetric
    value: float  # seconds, or tokens/s for output_tokens_per_s
    text: str  # the figure as printed
    unknown: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for key in ("kv_cache_dtype", "max_batch", "memory_fraction"):
            if getattr(self, key) is None and key not in self.unknown and not (
                    key != "kv_cache_dtype" and self.metric != "output_tokens_per_s"):
                raise ValueError(f"{self.id}: {key} is not published; list its plausible values in unknown")
        if (self.batch is None) != (self.metric == "output_tokens_per_s"):
            raise ValueError(f"{self.id}: only an offline maximum-throughput figure has no batch")
