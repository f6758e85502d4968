"""The KV cache `accelkit serve` would allocate on one device of an inference plan: its budget, the bytes one
token occupies, and the blocks and tokens that fit — computed with the engine's own functions
(``accelkit/core/serving_memory.py``), so the tokens the planner reports are the tokens the engine allocates.

The engine takes ``kv_cache_memory_bytes`` when given; on a GPU otherwise ``gpu_memory_utilization`` of the
memory free once the weights are loaded, which the planner puts at the device's memory less this device's
weights and the framework allowance (``--overhead``: CUDA context, communicator buffers); on a CPU 1 GiB.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from accelkit.core.serving_memory import kv_budget_bytes, kv_bytes_per_token, kv_cache_num_blocks
from accelkit.core.units import fmt_bytes
from accelkit.plan.context import PlanContext
from accelkit.plan.layout import Layout
from accelkit.plan.memory import kv_heads_per_rank
from accelkit.plan.stages import stage_weight_bytes

BudgetSource = Literal["kv_cache_memory_bytes", "gpu_memory_utilization", "cpu_default"]


@dataclass(frozen=True, slots=True, kw_only=True)
class KVCapacity:
    """The engine's KV cache on one device (the heaviest pipeline stage's layers, this rank's KV heads)."""

    bytes_per_token: int  # K and V of one token over the device's layers, scales included
    budget_bytes: int  # what the engine gives its KV cache
    budget_source: BudgetSource  # which rule set the budget
    block_size: int
    num_blocks: int  # blocks the scheduler may hand out (the budget's whole blocks less the scratch block)
    num_tokens: int  # num_blocks · block_size
    num_seqs_at_context: int  # sequences of prompt_len + output_len tokens the blocks hold at once

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def kv_capacity(ctx: PlanContext, layout: Layout) -> KVCapacity | None:
    """The KV cache the serving engine would allocate for this plan on one device; None for a model without one."""
    m, w, o = ctx.model, ctx.workload, ctx.options
    if m.kind not in ("decoder", "moe"):
        return None
    per_token = kv_bytes_per_token(
        num_layers=-(-m.num_layers // layout.pp), num_kv_heads=kv_heads_per_rank(m, layout.tp), head_dim=m.head_size,
        kv_cache_dtype=w.recipe.kv_cache_dtype, dtype_bytes=ctx.e, kv_scales=o.kv_cache_scales,
    )
    # on a GPU the engine measures what the loaded weights left free; here: memory − this device's weights − allowance
    weights = stage_weight_bytes(ctx, layout)
    free = None if ctx.device.vendor == "cpu" else int(ctx.device.memory_bytes - weights - o.overhead_bytes)
    budget = kv_budget_bytes(kv_cache_memory_bytes=o.kv_cache_memory_bytes, device_free_bytes=free,
                             gpu_memory_utilization=o.gpu_memory_utilization)
    source: BudgetSource = ("kv_cache_memory_bytes" if o.kv_cache_memory_bytes is not None
                            else "cpu_default" if free is None else "gpu_memory_utilization")
    bs = o.block_size
    blocks = kv_cache_num_blocks(budget_bytes=budget, bytes_per_token=per_token, block_size=bs)
    blocks_per_seq = -(-(w.prompt_len + w.output_len) // bs)
    return KVCapacity(bytes_per_token=per_token, budget_bytes=budget, budget_source=source, block_size=bs,
                      num_blocks=blocks, num_tokens=blocks * bs, num_seqs_at_context=blocks // blocks_per_seq)


def describe(ctx: PlanContext, cap: KVCapacity) -> str:
    """The assumption line of a plan's ``kv_cache_capacity``."""
    o = ctx.options
    rule = {
        "kv_cache_memory_bytes": f"kv_cache_memory_bytes {fmt_bytes(cap.budget_bytes)} (--kv-cache-memory)",
        "gpu_memory_utilization": f"gpu_memory_utilization {o.gpu_memory_utilization:g} × (device memory − this "
                                  f"device's weights − the {fmt_bytes(o.overhead_bytes)} framework allowance: the "
                                  "planner's estimate of the free memory the engine measures after loading)",
        "cpu_default": "the engine's 1 GiB default on a CPU",
    }[cap.budget_source]
    kv = ctx.workload.recipe.kv_cache_dtype
    scales = ("" if kv == "auto" else ", a float16 scale per token and KV head beside the 1-byte codes"
              if o.kv_cache_scales == "per-token-head" else ", per-tensor scales (--kv-cache-scales): 1 byte per element")
    return (f"kv_cache_capacity: the KV cache `accelkit serve` allocates, sized by its own rules "
            f"(accelkit/core/serving_memory.py): budget = {rule}; {cap.bytes_per_token:,} bytes per token (K and V, "
            f"kv_cache_dtype {kv}{scales}); blocks of {cap.block_size} tokens, one kept as the scratch block; a "
            "sequence holds every block of its context (the engine frees no block that leaves a sliding window)")
