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

#: sustained tensor-core efficiency inside a full step / the isolated best (MAMF or the probe's matmul, and
#: the flash-attention papers' kernel figures), per GPU generation: clocks that drop under a whole step's
#: power draw (a 700 W H100 throttles more than a 400 W A100), real GEMM shapes and layouts (transposed
#: operands in backward). (Compute slowed by overlapped collectives is a sourced prior of its own,
#: priors.OVERLAP_SLOWDOWN.) Fitted per generation on that generation's calibration runs; H200 shares
#: H100's chip; other devices take DEFAULT_SUSTAINED (ASSUMED).
SUSTAINED_TENSOR: dict[str, float] = {"A100": 0.86, "H100": 0.765}
SUSTAINED_TENSOR_ALIASES = {"H200": "H100", "GH200": "H100"}
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


def serving_attained(family: str | None) -> tuple[float, str]:
    """(fraction, where it comes from) of a device family's prior rates a serving engine attains; 1.0 when the
    family has no fitted serving figure."""
    if family in SERVING_ATTAINED:
        return SERVING_ATTAINED[family], (f"fitted on the published {family} serving figures (vLLM on ROCm: Oracle "
                                          "Cloud 2024, AMD 2025); leave-one-source-out in docs/validation.md")
    return 1.0, ""


#: data set the constants above were fitted on (shown in assumptions and docs)
FIT_SOURCE = ("fitted once on the calibration runs of benchmarks/plan_validation.py (NVIDIA DGX Cloud "
              "benchmarks, torchtitan); docs/validation.md reports the error on every published run, in sample and "
              "leave-one-source-out")

FREE_PARAMETERS = {**{f"sustained_tensor[{k}]": v for k, v in SUSTAINED_TENSOR.items()},
                   **{f"serving_attained[{k}]": v for k, v in SERVING_ATTAINED.items()}}
