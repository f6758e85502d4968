"""Accuracy gates: how far an optimized model's outputs drift from the fp32 reference, and whether that
passes. The default gate is MLPerf's "99% of FP32" rule: a task metric within ``max_drop`` (1%) of the
reference's; without a task metric, top-1 agreement (classifiers, language models; over the positions whose
reference top-1 is clear, ``CLEAR_TOP1_MARGIN``) or cosine similarity (other outputs) of at least ``1 − max_drop``."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from accelkit.core.spec import Spec, spec_field


def output_tensor(output: Any) -> torch.Tensor:
    """The tensor to compare from a model's output: ``logits``, else ``last_hidden_state``, else the first tensor."""
    if isinstance(output, torch.Tensor):
        return output
    for name in ("logits", "last_hidden_state"):
        value = getattr(output, name, None)
        if isinstance(value, torch.Tensor):
            return value
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    if isinstance(output, dict):
        for value in output.values():
            if isinstance(value, torch.Tensor):
                return value
    raise TypeError(f"cannot find an output tensor in {type(output).__name__}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Drift(Spec):
    """Output drift of a candidate against the reference on the same batch."""

    max_abs_error: float | None = spec_field(doc="max |candidate − reference|; None when an output has inf/NaN")
    cosine: float | None = spec_field(
        doc="cosine similarity of the flattened outputs; None when an output has inf/NaN")
    sqnr_db: float | None = spec_field(
        doc="signal-to-quantization-noise ratio, 10·log10(‖ref‖² / ‖cand − ref‖²); None when identical (no noise) "
            "or when an output has inf/NaN"
    )
    identical: bool = spec_field(False, doc="True when the outputs are bit-for-bit equal")
    top1_agreement: float | None = spec_field(
        None, doc="fraction of the positions with a clear reference top-1 (see CLEAR_TOP1_MARGIN) where the candidate "
                  "has the same argmax (logits); None for other outputs, or when no position has a clear top-1")
    num_top1_positions: int | None = spec_field(
        None, min=0, doc="positions top1_agreement is over: those whose reference top-1 is clear (logits)")
    num_nonfinite: int = spec_field(
        0, min=0, doc="values of the candidate that are inf or NaN (an overflow); when any, no figure is a "
                      "measurement: max_abs_error, cosine, sqnr_db and top1_agreement are None, and every gate fails")
    num_nonfinite_reference: int = spec_field(
        0, min=0, doc="values of the reference that are inf or NaN: the same consequences (nothing to compare with)")

    @property
    def is_finite(self) -> bool:
        """Both outputs are free of inf/NaN, so the figures above are measurements."""
        return self.num_nonfinite == 0 and self.num_nonfinite_reference == 0


#: top-1 agreement counts a position only when the reference's top logit leads its runner-up by more than this
#: fraction of the standard deviation of all the reference's logits. A near-tie flips on rounding alone: a
#: random-init LM (vocab 5000) has 5% of its positions within 0.02 σ, and bf16 — max error ≈ 0.03 σ — agreed on
#: 95%, failing a 99% gate with a cosine of 0.9999. A trained model's margins are far larger, so it counts nearly
#: every position; a broken variant still disagrees on the clear ones.
CLEAR_TOP1_MARGIN = 0.05


def _top1(ref: torch.Tensor, cand: torch.Tensor) -> tuple[float | None, int]:
    """(agreement on the positions with a clear reference top-1, how many there are); the spread is taken over
    every position, so a two-class output's near-tie rows are left out too."""
    same = ref.argmax(-1) == cand.argmax(-1)
    if ref.shape[-1] < 2:  # one class: every argmax is 0
        return 1.0, same.numel()
    best = ref.topk(2, dim=-1).values  # (..., 2)
    clear = (best[..., 0] - best[..., 1]) > CLEAR_TOP1_MARGIN * ref.std(correction=0)
    num = int(clear.sum().item())
    return (same[clear].float().mean().item() if num else None), num


def drift(reference: torch.Tensor, candidate: torch.Tensor, *, logits: bool | None = None) -> Drift:
    """Compare two outputs of the same shape (computed in fp32). ``logits`` says whether the last dim is a
    class/vocab axis (top-1 agreement reported); None guesses it from the shape (a last dim > 1), which a hidden
    state (BERT's encoder output) also has — a caller that knows passes it. An output with inf/NaN is counted, not
    raised on (see ``Drift.num_nonfinite``)."""
    ref, cand = reference.detach().float(), candidate.detach().float()
    if ref.shape != cand.shape:
        raise ValueError(f"output shapes differ: reference {tuple(ref.shape)} vs candidate {tuple(cand.shape)}")
    if logits is None:
        logits = ref.dim() > 0 and ref.shape[-1] > 1
    bad_cand, bad_ref = int((~torch.isfinite(cand)).sum().item()), int((~torch.isfinite(ref)).sum().item())
    if bad_cand or bad_ref:
        # an overflowed output (fp16 past 65504) has no finite error, cosine or SQNR: no figure is recorded (a 0
        # would read as a measured drift), the counts say why, and check() fails it on is_finite
        return Drift(max_abs_error=None, cosine=None, sqnr_db=None, identical=False, top1_agreement=None,
                     num_nonfinite=bad_cand, num_nonfinite_reference=bad_ref)
    # sums accumulate in float64 (the elementwise terms stay fp32: a float64 copy of an LM's logits would double
    # the largest tensor here); torch's fp32 cosine_similarity gave an output 1.0000269 against itself
    f64 = torch.float64
    noise = (cand - ref).pow(2).sum(dtype=f64).item()
    signal = ref.pow(2).sum(dtype=f64).item()
    norms = math.sqrt(signal * cand.pow(2).sum(dtype=f64).item())
    # two all-zero outputs (a ReLU's, a masked one) are identical: cosine 1, not the 0 of a zero norm, which failed
    # every cosine gate on an unchanged output
    cosine = (ref * cand).sum(dtype=f64).item() / norms if norms > 0 else (1.0 if noise == 0 else 0.0)
    top1, num_top1 = _top1(ref, cand) if logits and ref.dim() > 0 else (None, None)
    return Drift(
        max_abs_error=(cand - ref).abs().max().item(),
        cosine=min(1.0, max(-1.0, cosine)),  # rounding can still leave it a hair outside [-1, 1]
        sqnr_db=None if noise == 0 or signal == 0 else 10 * math.log10(signal / noise),
        identical=noise == 0,
        top1_agreement=top1,
        num_top1_positions=num_top1,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class GateConfig(Spec):
    """When an optimized model is accurate enough."""

    max_drop: float = spec_field(0.01, min=0.0, max=1.0, doc="Allowed relative drop (0.01 = within 1% of reference).")
    criterion: Literal["auto", "task", "top1", "cosine"] = spec_field(
        "auto", doc="auto: task metric if given, else top-1 agreement for logits, else cosine."
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class GateResult(Spec):
    """The verdict with the numbers it rests on."""

    passed: bool = spec_field(doc="True if within the allowed drop (never when an output has inf/NaN).")
    criterion: str = spec_field(doc="What was compared.")
    reference_value: float = spec_field(doc="Reference's value of the criterion.")
    candidate_value: float | None = spec_field(
        doc="Candidate's value; None when an output has inf/NaN and the criterion is a drift figure (there is none), "
            "or for an explicit top1 criterion with no position whose reference top-1 is clear, or when the task "
            "metric gave inf/NaN for the candidate (the gate fails).")
    threshold: float = spec_field(doc="Candidate must reach at least this.")
    drift: Drift = spec_field(doc="Output drift figures.")


def check(
    reference_output: Any,
    candidate_output: Any,
    *,
    logits: bool,
    config: GateConfig | None = None,
    metric: Callable[[torch.Tensor], float] | None = None,
) -> GateResult:
    """Gate a candidate's outputs against the reference's. ``metric`` maps an output tensor to a task
    score where higher is better (e.g. accuracy against labels, a mean log-likelihood); the candidate must reach
    ``ref − max_drop·|ref|``, so a negative score works too. For a lower-is-better one (a loss, a perplexity) pass
    its negation: −cand ≥ −ref − max_drop·|ref| is cand ≤ ref + max_drop·|ref|, the same relative allowance."""
    config = config or GateConfig()
    ref, cand = output_tensor(reference_output), output_tensor(candidate_output)
    d = drift(ref, cand, logits=logits)
    criterion = config.criterion
    cand_value: float | None
    if criterion == "auto":
        # no position with a clear reference top-1 (all near-ties): top-1 agreement would be noise; cosine
        criterion = "task" if metric is not None else ("top1" if logits and d.top1_agreement is not None else "cosine")
    if criterion == "task":
        if metric is None:
            raise ValueError("criterion='task' needs a metric function")
        ref_value, cand_value = float(metric(ref)), float(metric(cand))
        if not math.isfinite(ref_value):  # nothing to hold the candidate to
            raise ValueError(f"the task metric gave {ref_value} for the reference output; it must be a finite "
                             "number (check the metric, or gate on cosine/top1)")
        if not math.isfinite(cand_value):  # an overflowed perplexity or an empty accuracy is no score: it fails
            cand_value = None
        # the allowed drop is a fraction of the reference's magnitude: ref·(1 − max_drop) lies *above* a negative
        # reference (a mean log-likelihood), which failed even an identical candidate
        threshold = ref_value - config.max_drop * abs(ref_value)
    elif criterion == "top1":
        if not logits:
            raise ValueError("criterion='top1' needs logits outputs")
        ref_value, cand_value, threshold = 1.0, d.top1_agreement, 1 - config.max_drop
    else:
        ref_value, cand_value, threshold = 1.0, d.cosine, 1 - config.max_drop
    # an output with inf/NaN has no drift figure (cand_value None) and never passes, whatever a task metric says
    return GateResult(
        passed=d.is_finite and cand_value is not None and cand_value >= threshold - 1e-12, criterion=criterion,
        reference_value=ref_value,
        candidate_value=cand_value, threshold=threshold, drift=d,
    )
