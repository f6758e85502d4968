"""PlanContext: everything about a (workload, cluster, options) that does not depend on the layout,
computed once so that evaluating a layout in the search is a few hundred float operations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accelkit.core import Cluster, DeviceSpec, ModelSpec, UserError, Workload
from accelkit.plan import flops as F
from accelkit.plan.calibrate import efficiency
from accelkit.plan.memory import ACT_BYTES, INFER_WEIGHT_BYTES, TRAIN_WEIGHT_BYTES
from accelkit.plan.options import PlanOptions
from accelkit.plan.priors import Efficiency

#: tokens per training step when no global batch is given (~4 Mi tokens; GPT-3 175B used 3.2 M)
DEFAULT_STEP_TOKENS = 4 * 2**20


def peak_dtype(precision: str, quantization: str | None, task: str) -> str:
    """Which dense peak the matmuls run at."""
    if task != "train" and quantization == "int8-dynamic":
        return "int8"
    if task != "train" and quantization == "fp8-dynamic":
        return "fp8"
    return precision


def kv_element_bytes(workload: Workload) -> float:
    kv = workload.recipe.kv_cache_dtype
    if kv in ("fp8", "int8"):
        return 1.0
    return 4.0 if workload.recipe.precision in ("fp32", "tf32") else 2.0


@dataclass(slots=True)
class PlanContext:
    workload: Workload
    cluster: Cluster
    options: PlanOptions
    efficiency: Efficiency
    peak_dtype: str
    peak: float
    e: int  # activation bytes per element
    weight_bytes: float  # per parameter (training weight copy, or inference weight incl. quantization)
    layer_params: float = 0.0  # one block, dense part (+ router)
    layer_expert_params: float = 0.0  # one block, all experts
    embedding_params: float = 0.0
    head_params: float = 0.0
    layer_matmul_active: float = 0.0
    cnn: dict[str, Any] | None = None  # traced per-sample figures for CNNs
    assumptions: list[str] = field(default_factory=list)

    @property
    def model(self) -> ModelSpec:
        return self.workload.model

    @property
    def device(self) -> DeviceSpec:
        return self.cluster.device


def _split_params(model: ModelSpec) -> tuple[float, float, float, float]:
    """(dense params per layer, expert params per layer, embedding params, head params)."""
    h = model.hidden_size
    emb = float(model.num_embedding_params())
    head = float(h * (1 if model.norm == "rmsnorm" else 2))
    if model.kind in ("decoder", "moe") and not model.tied_embeddings:
        head += model.vocab_size * h
    if model.pooler:
        head += h * h + h
    experts = 0.0
    if model.num_experts is not None:
        idle = model.num_params() - model.num_active_params()
        per_expert = idle / (model.num_layers * (model.num_experts - model.experts_per_token))  # type: ignore[operator]
        experts = per_expert * model.num_experts
    layer = (model.num_params() - emb - head) / model.num_layers - experts
    return layer, experts, emb, head


def make_context(workload: Workload, cluster: Cluster, options: PlanOptions | None = None) -> PlanContext:
    """Resolve peaks and efficiencies (calibrated or prior) and the model's split of parameters."""
    options = options or PlanOptions()
    model, recipe = workload.model, workload.recipe
    dtype = peak_dtype(recipe.precision, recipe.quantization, workload.task)
    peak = cluster.device.peak(dtype)
    if peak is None:
        have = ", ".join(cluster.device.peak_flops) or "none"
        raise UserError(f"{cluster.device.name} has no {dtype} peak in the catalog (it has: {have}); "
                        "choose another --precision")
    if workload.task == "train":
        wbytes: float = TRAIN_WEIGHT_BYTES[recipe.precision]
    else:
        wbytes = INFER_WEIGHT_BYTES[recipe.quantization or recipe.precision]
    eff = efficiency(cluster.device, dtype, use_calibration=options.use_calibration)
    ctx = PlanContext(workload=workload, cluster=cluster, options=options, efficiency=eff, peak_dtype=dtype,
                      peak=peak, e=ACT_BYTES[recipe.precision], weight_bytes=wbytes)
    if model.kind == "cnn":
        from accelkit.plan.cnn import trace_cnn  # imports torch: only CNN plans pay for it

        ctx.cnn = trace_cnn(model, dtype_bytes=ctx.e)
        ctx.assumptions.append("CNN FLOPs and saved activations traced from the real module on the meta device "
                               f"at {ctx.cnn['image_size']}×{ctx.cnn['image_size']} (FlopCounterMode, saved_tensors_hooks)")
    else:
        ctx.layer_params, ctx.layer_expert_params, ctx.embedding_params, ctx.head_params = _split_params(model)
        ctx.layer_matmul_active = float(F.layer_matmul_params(model))
    ctx.assumptions += _base_assumptions(ctx)
    return ctx


def _base_assumptions(ctx: PlanContext) -> list[str]:
    d, o, w = ctx.device, ctx.options, ctx.workload
    out = [
        f"peak: {d.name} dense {ctx.peak_dtype} {ctx.peak / 1e12:g} TFLOP/s, memory {d.memory_bytes / 1e9:g} GB "
        f"(10^9 B), bandwidth {d.memory_bandwidth_bytes_per_s / 1e12:g} TB/s (catalog status {d.status or '-'}: {d.source})",
        *ctx.efficiency.sources,
        "model FLOPs: 2 FLOPs per multiply-add over every matmul incl. the LM head, attention 4·b·s²·H·Q per layer "
        "(full square, PaLM App. B / FlopCounterMode convention), training = 3 × forward; MFU divides these by the "
        "dense peak (recomputation excluded)",
        f"attention kernel: {o.attention}" + (" (causal flash executes ½ of the counted attention FLOPs, "
                                             "backward recomputes QKᵀ)" if o.attention == "flash" else " (unfused, full s² scores)"),
        f"framework allowance {o.overhead_bytes / 2**30:g} GiB per device (context, communicator buffers, "
        "fragmentation): assumed",
        f"communication: ring collectives, one-direction link bandwidth × efficiency, scale-out "
        f"{ctx.cluster.scaleout_bandwidth_bytes_per_s / 1e9:g} GB/s per device across nodes; "
        "tensor-parallel and pipeline transfers are not overlapped with compute; data-parallel gradient "
        "reduction overlaps the last micro-batch's backward, only the excess is exposed",
    ]
    if d.tdp_w:
        out.append(f"energy ESTIMATED from TDP {d.tdp_w:g} W × activity factor {o.activity_factor:g} (assumed, "
                   "--activity-factor) × time; not measured")
    else:
        out.append(f"energy not estimated: {d.name} has no published TDP")
    if w.task == "train":
        out.append("memory: Adam keeps fp32 m and v (+ fp32 master weights under mixed precision, ZeRO paper K=12); "
                   "SGD is taken with momentum; gradients in the weight dtype; activations per Korthikanti et al. "
                   f"2022 term by term ({o.kernels} kernels); 1F1B pipeline keeps min(pp, micro-batches) in flight")
    else:
        out.append("inference: pipeline stages run one batch after another (pp adds capacity, not speed); "
                   f"prefill in chunks of {o.prefill_chunk_tokens} tokens; decode time at the mean context "
                   "prompt + output/2; roofline max(compute, memory) per phase")
    return out
