"""The planner's view of a bench variant: the workload with the variant's recipe (decided here, once, for the
bench, the distributed bench and the store), the ``accelkit.plan.plan`` estimate for it — the same call
`accelkit plan` makes — and the predicted figure of each measured step in that step's own unit.

Each step maps to the planner figure that times one call of it: a forward (encoder) or a prefill → the prefill
time, a decode step → the per-token decode time, a training step → the step time. So an encoder's prediction is
samples/s, a CNN's images/s and a decoder's tokens/s, like the measurement beside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelkit.core import Cluster, Estimate, Workload
from accelkit.core.bench_result import Prediction
from accelkit.core.units import fmt_ratio
from accelkit.plan import PlanOptions, plan, resolve_hardware

if TYPE_CHECKING:
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads.base import BenchWorkload

#: which planner figure (seconds per call of the step) matches each measured step
SECONDS_PER_CALL = {
    "prefill": "prefill_time_s", "forward": "prefill_time_s", "decode": "decode_time_per_token_s",
    "train step": "step_time_s", "generate": "generate_time_s",
}


def variant_spec(workload: BenchWorkload, variant: Variant, *, dp: int = 1, zero: int = 0) -> Workload | None:
    """The workload in the planner's vocabulary with the recipe of ``variant`` (None without an architecture).
    Training: the planner takes the batch from the layout, so micro_batch is the workload's batch per rank."""
    spec = workload.spec()
    if spec is None:
        return None
    training = workload.task == "train"
    recipe = variant.recipe(training=training)
    if training:
        recipe = recipe.replace(micro_batch=spec.batch_size, dp=dp, zero=zero)
    return spec.replace(recipe=recipe)


def predict_variant(
    workload: BenchWorkload, variant: Variant, device: str, catalog: str | None, *, dp: int = 1, zero: int = 0,
    devices_per_node: int | None = None, cpu_share: int = 1,
) -> tuple[Estimate | None, str | None]:
    """``accelkit.plan.plan`` for one variant of a workload (None with the reason when it has none).
    ``cpu_share``: how many ranks share the probed CPU (a distributed run on one host): each is planned as that
    fraction of it — its peaks, bandwidth and memory — not as the whole CPU."""
    own = workload.estimate(variant, device, catalog)
    if own is not None:  # a workload that plans itself (text-to-image)
        return own
    spec = variant_spec(workload, variant, dp=dp, zero=zero)
    if spec is None:
        return None, f"{workload.name}: no architecture the planner can model"

    try:
        hw = resolve_hardware(catalog or ("cpu" if device == "cpu" else device))
        if hw.vendor == "cpu" and cpu_share > 1:
            hw = cpu_fraction(hw, cpu_share)
        # a training bench keeps fp32 parameters (autocast over them): its gradients reduce in fp32 at any
        # precision, and under bf16/fp16 (fp8: Float8Linear over the same fp32 weights) weights and gradients are
        # 4 B with no master copy, each forward casting them
        fp32_params = spec.task == "train" and spec.recipe.precision in ("bf16", "fp16", "fp8")
        return plan(spec, Cluster(device=hw, num_devices=dp, devices_per_node=devices_per_node),
                    PlanOptions(grad_reduce_fp32=spec.task == "train" and dp > 1,  # (an inference plan refuses it)
                                autocast_fp32_params=fp32_params)), None
    except Exception as exc:  # a planner gap must not lose a measurement
        return None, f"the planner could not estimate this workload ({type(exc).__name__}: {exc})"


def cpu_fraction(hw: Any, share: int) -> Any:
    """The probed CPU ``hw`` as one of ``share`` ranks on it sees it: each rank runs cores ÷ share threads
    (``accelkit.distributed.launch`` sets OMP_NUM_THREADS so) and shares the memory bandwidth and the RAM."""
    return hw.replace(name=f"{hw.name} ÷ {share} ranks", memory_bytes=hw.memory_bytes // share,
                      memory_bandwidth_bytes_per_s=hw.memory_bandwidth_bytes_per_s / share,
                      peak_flops={k: v / share for k, v in hw.peak_flops.items()})


def prediction(estimate: Estimate | None, step: str, items_per_call: int, unit: str, measured: float | None,
               estimate_id: int | None) -> Prediction | None:
    """The planner's figure for one measured step in its own unit, and measured ÷ predicted with what it says."""
    if estimate is None:
        return None
    details: dict[str, Any] = estimate.details or {}
    seconds = details.get(SECONDS_PER_CALL.get(step, ""))
    seconds = float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else None
    predicted = items_per_call / seconds if seconds else None
    ratio = measured / predicted if measured and predicted else None
    note = None if predicted else (f"the planner gives no time for a {step!r} call of this workload "
                                   f"(its estimate is in {estimate.throughput_unit!r})")
    return Prediction(
        estimate_id=estimate_id, throughput=predicted, unit=unit, mfu=estimate.mfu, ratio=ratio,
        seconds_per_call=seconds, bottleneck=details.get("bottleneck"), note=note,
        explanation=explain(ratio, predicted, unit, estimate.mfu, details.get("bottleneck")),
    )


def explain(ratio: float | None, predicted: float | None, unit: str, mfu: float | None, bottleneck: Any) -> str | None:
    """One sentence on what measured ÷ predicted says."""
    if ratio is None or predicted is None:
        return None
    planned = f"{bottleneck}-bound" if bottleneck else "its time model"
    at = f" at a planned MFU of {mfu:.0%}" if mfu is not None else ""
    if 0.8 <= ratio <= 1.25:
        verdict = "within 25% of the planner"
    elif ratio > 1:
        verdict = f"{ratio:.2f}× faster than the planner expects: its efficiency for this device and shape is too low"
    else:
        verdict = (f"{fmt_ratio(ratio)}× the planner's figure: the planner expects more than this run delivered "
                   "(overheads it does not model: small kernels, Python, launch latency)")
    return f"measured ÷ predicted = {fmt_ratio(ratio)} — {verdict} (it predicts {predicted:.4g} {unit}, {planned}{at})"
