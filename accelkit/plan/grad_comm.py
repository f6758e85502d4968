"""What one data-parallel gradient reduction hands to its collective under ``Recipe.grad_compression``, and the
compute the compression adds — the rules of the torch code accelkit applies (accelkit/distributed/grad_comm.py):

* ``none``: the gradients in their dtype (fp32 under plain fp32 or autocast over fp32 parameters, ``grad_reduce_fp32``;
  otherwise the weight dtype, as the ZeRO paper counts them);
* ``bf16`` / ``fp16``: every element in 2 bytes — DDP: ``default_hooks.bf16_compress_hook`` /
  ``fp16_compress_hook`` cast each bucket (and divide it by the world size) before the all-reduce and copy the
  result back; FSDP2: ``MixedPrecisionPolicy(reduce_dtype=…)`` reduce-scatters in that dtype. Gradients already
  in 2 bytes gain nothing;
* ``powersgd`` (DDP only): per gradient tensor, viewed n × m, ``r = min(n, m, rank)``; compressed when
  ``(n+m)·r·min_compression_rate < n·m`` into P (n×r) and Q (m×r), all-reduced one after the other;
  everything else (every 1-D tensor) all-reduced as it is. Before ``start_powerSGD_iter`` the hook all-reduces
  the plain bucket: the steady state is what is planned. torch runs the three all-reduces (uncompressed, P,
  Q) one after another per DDP bucket (25 MiB by default), so a bucket costs three collective latencies.

Bytes are the buffers handed to the collective per rank and step (nccl-tests' "size" S; a ring moves
2(n−1)/n · S per rank). Compression compute (per reduction) is modelled as memory-bound kernels:

* DDP bf16/fp16 hook: cast (read 4 B, write 2 B), divide (2 + 2) and copy back (2 + 4) per element, against
  the plain path's in-place divide (4 + 4): 8 B per element more;
* FSDP2 reduce dtype: the cast folds into FSDP's copy into the reduce-scatter buffer; the reduced shard is cast
  back (2 + 4 B per element of the shard);
* PowerSGD: error feedback adds the last error (read 8, write 4), keeps a copy (4 + 4) and computes the new
  error (8 + 4): 32 B per element; P = MQ and Q = MᵀP read each compressed matrix, the decompression writes it
  (12 B per element, 6·r FLOPs per element at the fp32 peak); the uncompressed tensors are packed and unpacked
  (16 B per element); minus the plain path's divide (8 B per element). Each compressed tensor launches its
  three matmuls and two orthogonalizations (Gram-Schmidt for r ≤ 2: ~4 kernels per column; QR otherwise:
  ~6 kernels) — on the host, the time is the larger of the kernels' and their launches'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from accelkit.plan.context import PlanContext, gradient_element_bytes
from accelkit.plan.grad_shapes import Grad, model_grads
from accelkit.plan.layout import Layout
from accelkit.plan.stages import stage_layers

#: DistributedDataParallel(bucket_cap_mb=25)
DDP_BUCKET_BYTES = 25 * 2**20
#: B per element the DDP compress hooks move beyond the plain path (see the module docstring)
CAST_HOOK_EXTRA_BYTES = 8.0
ERROR_FEEDBACK_BYTES = 32.0
COMPRESSED_MATRIX_BYTES = 12.0
PACKED_VECTOR_BYTES = 16.0
PLAIN_DIVIDE_BYTES = 8.0


@dataclass(slots=True)
class PowerSGDSplit:
    """How torch's ``_should_compress`` splits the tensors of one rank: element counts, not bytes."""

    uncompressed_elements: int = 0
    p_elements: int = 0
    q_elements: int = 0
    compressed_elements: int = 0  # of the matrices that are compressed, before compression
    compressed_tensors: int = 0
    uncompressed_tensors: int = 0
    launches: int = 0



def powersgd_split(grads: list[Grad], rank: int, min_compression_rate: float) -> PowerSGDSplit:
    """``_should_compress`` of torch's powerSGD_hook, tensor by tensor."""
    s = PowerSGDSplit()
    for g in grads:
        n, m = g.rows, g.cols
        r = min(n, m, rank)
        if (n + m) * r * min_compression_rate < n * m:
            s.p_elements += n * r * g.copies
            s.q_elements += m * r * g.copies
            s.compressed_elements += n * m * g.copies
            s.compressed_tensors += g.copies
            s.launches += g.copies * (3 + 2 * (4 * r if r <= 2 else 6))
        else:
            s.uncompressed_elements += n * m * g.copies
            s.uncompressed_tensors += g.copies
    return s


def local_grads(ctx: PlanContext, layout: Layout) -> list[Grad]:
    """The gradient tensors one rank of the heaviest pipeline stage holds (tensor-parallel splits applied), the
    stage chosen as ``stages.stage_params`` chooses it."""
    model = ctx.model
    mg = model_grads(model)
    tp, ep = layout.tp, layout.ep

    def local(g: Grad) -> Grad:
        rows, cols = g.rows, g.cols
        if tp > 1 and g.split == 0:
            rows = max(1, rows // tp)
        elif tp > 1 and g.split == 1:
            cols = max(1, cols // tp)
        return g._replace(rows=rows, cols=cols)

    if ctx.cnn is not None or not mg.layer:
        return [local(g) for g in mg.all(model.num_layers)]
    layer = []
    for g in mg.layer:
        if model.num_experts is not None and ep > 1 and g.rows == model.num_experts and g.cols > model.hidden_size:
            g = g._replace(rows=model.num_experts // ep)  # an expert tensor: this rank's experts
        layer.append(local(g))
    layers = stage_layers(ctx, layout)
    ends = [local(g) for g in mg.before + mg.after]
    if layout.pp > 1:
        before, after = [local(g) for g in mg.before], [local(g) for g in mg.after]
        ends = before if sum(g.numel for g in before) >= sum(g.numel for g in after) else after
    return ends + [g._replace(copies=g.copies * layers) for g in layer]


@dataclass(slots=True)
class GradReduction:
    """One reduction of one rank's gradients (per step for ZeRO 0-1, per micro-batch for ZeRO 2-3: time.reductions_per_step)."""

    compression: str
    collective: str  # all-reduce or reduce-scatter
    elements: float  # gradient elements reduced (this rank's stage and tensor-parallel shard)
    element_bytes: float  # plain path
    sent_bytes: float  # handed to the collective(s)
    phases: list[float] = field(default_factory=list)  # bytes of each collective in order (PowerSGD: 3)
    compress_bytes: float = 0.0  # extra memory traffic of the compression
    compress_flops: float = 0.0
    compress_launches: int = 0
    powersgd: PowerSGDSplit | None = None
    note: str = ""

    @property
    def gradient_bytes(self) -> float:
        """What the plain path would send."""
        return self.elements * self.element_bytes

    @property
    def ratio(self) -> float:
        return self.sent_bytes / self.gradient_bytes if self.gradient_bytes else 1.0


def rank_split(ctx: PlanContext, layout: Layout) -> PowerSGDSplit | None:
    """Under PowerSGD, how torch's hook splits the gradient tensors of one rank of ``layout`` (a walk over every
    tensor: callers that reduce several parts of the layout make it once and pass it to ``grad_reduction``); None
    for another compression or without data parallelism (nothing is reduced)."""
    recipe = ctx.workload.recipe
    if recipe.grad_compression != "powersgd" or layout.dp * layout.cp == 1:
        return None
    return powersgd_split(local_grads(ctx, layout), recipe.powersgd_rank, recipe.powersgd_min_compression_rate)


def grad_reduction(ctx: PlanContext, layout: Layout, params: float, split: PowerSGDSplit | None) -> GradReduction:
    """The reduction ``ctx.workload.recipe.grad_compression`` makes of ``params`` gradient elements; under PowerSGD
    from ``split``, the layout's ``rank_split`` (every caller has made it: a reduction needs dp·cp > 1)."""
    recipe = ctx.workload.recipe
    kind = recipe.grad_compression
    wb = gradient_element_bytes(ctx)
    collective = "all-reduce" if layout.zero == 0 else "reduce-scatter"
    plain = params * wb
    if kind == "none":
        return GradReduction(kind, collective, params, wb, plain, [plain])
    if kind in ("bf16", "fp16"):
        if wb <= 2:
            return GradReduction(kind, collective, params, wb, plain, [plain],
                                 note=f"no change: the gradients already reduce in {wb:g} bytes")
        sent = params * 2.0
        extra = params * CAST_HOOK_EXTRA_BYTES if layout.zero == 0 else params / max(layout.shard_ranks, 1) * 6.0
        return GradReduction(kind, collective, params, wb, sent, [sent], compress_bytes=extra)
    # PowerSGD: the split of this rank's tensors, scaled to `params` (a dp group's part of them, or all)
    assert split is not None, "grad_reduction under PowerSGD takes the layout's rank_split"
    total = split.uncompressed_elements + split.compressed_elements
    scale = params / total if total else 1.0
    phases = [split.uncompressed_elements * scale * wb, split.p_elements * scale * wb, split.q_elements * scale * wb]
    extra = (split.compressed_elements * COMPRESSED_MATRIX_BYTES + split.uncompressed_elements * PACKED_VECTOR_BYTES
             - total * PLAIN_DIVIDE_BYTES + (total * ERROR_FEEDBACK_BYTES if recipe.powersgd_error_feedback else 0.0))
    return GradReduction(
        kind, collective, params, wb, sum(phases), phases, compress_bytes=max(0.0, extra) * scale,
        compress_flops=6.0 * recipe.powersgd_rank * split.compressed_elements * scale,
        compress_launches=split.launches, powersgd=split)


def buckets(red: GradReduction) -> int:
    """DDP buckets the plain gradients fill (each runs its own hook call)."""
    return max(1, math.ceil(red.gradient_bytes / DDP_BUCKET_BYTES))


def compress_s(ctx: PlanContext, red: GradReduction) -> float:
    """Seconds of compression compute per reduction: memory traffic and FLOPs (fp32 peak) on the device, or the
    host launching its kernels, whichever is longer."""
    if not red.compress_bytes and not red.compress_flops:
        return 0.0
    bw = ctx.device.memory_bandwidth_bytes_per_s * ctx.efficiency.memory
    fp32 = ctx.device.peak("fp32") or ctx.peak
    device_s = red.compress_bytes / bw + red.compress_flops / (fp32 * ctx.efficiency.compute)
    return max(device_s, red.compress_launches * ctx.efficiency.launch_s)


def powersgd_memory_bytes(ctx: PlanContext, params: float) -> float:
    """Error feedback keeps one plain-dtype copy of every gradient bucket (``PowerSGDState.error_dict``)."""
    recipe = ctx.workload.recipe
    if recipe.grad_compression != "powersgd" or not recipe.powersgd_error_feedback:
        return 0.0
    return params * gradient_element_bytes(ctx)


def describe(red: GradReduction) -> dict[str, Any]:
    """The reduction as the plan document shows it."""
    doc: dict[str, Any] = {
        "compression": red.compression, "collective": red.collective, "gradient_elements": round(red.elements),
        "gradient_element_bytes": red.element_bytes, "uncompressed_bytes": round(red.gradient_bytes),
        "buffer_bytes": round(red.sent_bytes), "ratio": red.ratio,
        "collectives": [round(b) for b in red.phases],
    }
    if red.powersgd is not None:
        s = red.powersgd
        doc["powersgd"] = {"compressed_tensors": s.compressed_tensors, "uncompressed_tensors": s.uncompressed_tensors,
                           "p_elements": s.p_elements, "q_elements": s.q_elements,
                           "uncompressed_elements": s.uncompressed_elements}
    if red.note:
        doc["note"] = red.note
    return doc
