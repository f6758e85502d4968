"""The time model's free parameters: the only numbers set from training runs rather than from a datasheet,
a paper's kernel benchmark or a probe. Each is one global constant — not per model, not per run — and
was fitted by ``benchmarks/plan_validation.py --fit`` on the 10 runs marked ``shipped_calibration`` in
benchmarks/validation_runs/ (NVIDIA's DGX Cloud benchmarks for H100, torchtitan's published tables for A100: one
source per GPU generation). docs/validation.md reports the error on all 142 published runs from 13 sources, in
sample and leave-one-source-out (each source predicted with the factors fitted without it), and
``tests/unit/test_plan_validation.py`` checks that these values are what the fit returns and that these counts are
the committed benchmarks/results/plan_validation.json's.
"""

from __future__ import annotations

from accelkit.plan.priors import FAMILY_ALIASES

#: sustained tensor-core efficiency inside a full step / the isolated best (MAMF or the probe's matmul, and
#: the flash-attention papers' kernel figures), per GPU generation: clocks that drop under a whole step's
#: power draw (a 700 W H100 throttles more than a 400 W A100), real GEMM shapes and layouts (transposed
#: operands in backward). (Compute slowed by overlapped collectives is a sourced prior of its own,
#: priors.OVERLAP_SLOWDOWN.) Fitted per generation on that generation's calibration runs; H200 shares
#: H100's chip; other devices take DEFAULT_SUSTAINED (ASSUMED).
SUSTAINED_TENSOR: dict[str, float] = {"A100": 0.86, "H100": 0.765}
#: H200 has priors of its own (priors.py) but H100's chip; GH200 is H100 already in ``priors.family`` (its one alias
#: table, so a GH200 name given here resolves the same way)
SUSTAINED_TENSOR_ALIASES = {"H200": "H100", **FAMILY_ALIASES}
DEFAULT_SUSTAINED = 0.765


def sustained_tensor(family: str | None) -> tuple[float, str]:
    """(factor, where it comes from) for a device family ('H100', 'A100' …)."""
    key = SUSTAINED_TENSOR_ALIASES.get(family or "", family or "")
    if key in SUSTAINED_TENSOR:
        return SUSTAINED_TENSOR[key], f"fitted on the {key} calibration runs"
    return DEFAULT_SUSTAINED, "ASSUMED: no calibration run on this device; the H100 value"

#: serving on a device family whose published serving figures sit well below what its kernel priors give: the
#: fraction of the prior matmul, attention and memory-bound rates (priors.py × the sustained factor above) a serving
#: engine attains over a whole prefill or decode step. Only inference reads it (time.infer_time); training plans on
#: the same device do not. MI300X: vLLM on ROCm, Oracle Cloud's Llama 3.1 405B FP8 latencies and throughputs (2024)
#: and AMD's Llama 3.1 70B FP8 latencies (vLLM 0.10.2, 2025) — both at batch 1 imply about 2.5 TB/s of the 5.3 TB/s
#: HBM read per decode step beside the planner's collectives, and Oracle's large batches the same shortfall in the
#: GEMMs. Fitted by ``benchmarks/plan_validation.py --fit`` on every serving point of the family (both sources);
#: docs/validation.md reports it leave-one-source-out (each source predicted with the value fitted on the other).
SERVING_ATTAINED: dict[str, float] = {"MI300X": 0.545}
#: families with no published serving figures that run a fitted family's compute die under the same serving stack:
#: planned at that family's fraction, as an ASSUMPTION (not fitted, not a free parameter). MI325X is MI300X's CDNA3
#: die (the same 1307 TF dense bf16) with more and faster HBM, served by the same vLLM on ROCm; planned at 1.0 it came
#: out 2.15× MI300X per device on a compute-bound serving plan where its datasheet allows at most 1.18× (found in
#: review)
SERVING_ATTAINED_ASSUMED: dict[str, str] = {"MI325X": "MI300X"}


def serving_attained(family: str | None) -> tuple[float, str, bool]:
    """(fraction, where it comes from, whether it is assumed) of a device family's prior rates a serving engine
    attains: the family's fitted figure, a ``SERVING_ATTAINED_ASSUMED`` family's borrowed one (assumed), else 1.0."""
    if family in SERVING_ATTAINED:
        return SERVING_ATTAINED[family], (f"fitted on the published {family} serving figures (vLLM on ROCm: Oracle "
                                          "Cloud 2024, AMD 2025); leave-one-source-out in docs/validation.md"), False
    fitted_family = SERVING_ATTAINED_ASSUMED.get(family or "")
    if fitted_family in SERVING_ATTAINED:
        return SERVING_ATTAINED[fitted_family], (
            f"ASSUMED — no published {family} serving figures: {fitted_family}'s fitted value, the same compute die "
            "and serving stack: vLLM on ROCm"), True
    return 1.0, "", False


#: data set the constants above were fitted on (shown in assumptions and docs)
FIT_SOURCE = ("fitted once on the calibration runs of benchmarks/plan_validation.py (NVIDIA DGX Cloud "
              "benchmarks, torchtitan); docs/validation.md reports the error on every published run, in sample and "
              "leave-one-source-out")

FREE_PARAMETERS = {**{f"sustained_tensor[{k}]": v for k, v in SUSTAINED_TENSOR.items()},
                   **{f"serving_attained[{k}]": v for k, v in SERVING_ATTAINED.items()}}
