"""Gradient communication compression (``Recipe.grad_compression``): when it cannot run, said up front, and the
quality gate a compressed run must pass. Pure Python: the torch side (DDP hooks, FSDP2 reduce dtype, counting the
bytes) is ``accelkit.distributed.grad_comm``.

Refusals, checked before any process starts:

* compression on one process: there is no gradient reduction to compress;
* PowerSGD under ZeRO/FSDP2 (zero > 0): torch's PowerSGD is a DDP communication hook; FSDP2 reduce-scatters, and
  its only compression knob is ``MixedPrecisionPolicy(reduce_dtype=…)``;
* fp16 without a loss scale: the fp16 hook divides by the world size and casts — gradients below fp16's smallest
  subnormal (6·10⁻⁸) flush to zero and those above 65504 overflow. Under ``precision='fp16'`` the GradScaler has
  scaled the gradients the hook sees into range; otherwise use bf16 (same 2 bytes, fp32's exponent range).

The quality gate: the same K training steps, on the same data, from the same initial weights, with and without
compression; the candidate's final loss — its loss on evaluation batches no step trained on, or without those the
mean of its last training steps — may exceed the reference's by at most ``max_loss_increase`` (default 2%). A
non-finite loss fails outright (diverged). When the reference's loss rose or barely fell the gate is inconclusive,
neither pass nor fail (it cannot tell variants apart then). One trajectory is compared with one other: at a learning rate where training is
chaotic (tiny batches, SGD at 0.1) the verdict can flip with any perturbation, compression or not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from accelkit.core import Recipe
from accelkit.core.spec import Spec, spec_field

#: fp16's smallest subnormal and largest finite value
FP16_TINY, FP16_MAX = 2.0**-24, 65504.0


def compression_refusal(recipe: Recipe, *, world_size: int, zero: int, training: bool = True) -> str | None:
    """Why ``recipe.grad_compression`` cannot run on this layout (None if it can, or if there is none)."""
    kind = recipe.grad_compression
    if kind == "none":
        return None
    if not training:
        return f"--grad-compression {kind} compresses training gradients; this workload does not train"
    if world_size < 2:
        return (f"--grad-compression {kind} compresses the data-parallel gradient reduction, and one process has "
                "none: run with --nproc-per-node 2 or more")
    if kind == "powersgd" and zero > 0:
        return (f"--grad-compression powersgd is torch's PowerSGD DDP communication hook (--zero 0); --zero {zero} runs "
                "FSDP2, which reduce-scatters and can only change the reduce dtype: use --zero 0, or "
                "--grad-compression bf16 with FSDP2")
    if kind == "fp16" and recipe.precision != "fp16":
        return (f"--grad-compression fp16 without a loss scale (precision {recipe.precision}): the gradients ÷ world size "
                f"are cast to fp16, so those below {FP16_TINY:.1e} flush to zero and those above {FP16_MAX:g} "
                "overflow; use --grad-compression bf16 (2 bytes with fp32's range) or --precision fp16 (its GradScaler "
                "scales the gradients before the hook sees them)")
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class LossGate(Spec):
    """The verdict of the quality gate, with the numbers it rests on."""

    passed: bool = spec_field(doc="True when the final loss is within the allowed increase (and finite); False too "
                                  "when the check is inconclusive.")
    inconclusive: bool = spec_field(False, doc="The reference's loss rose or fell too little for the gate to tell "
                                               "compressions apart: no verdict either way (``message`` says what to "
                                               "change).")
    criterion: str = spec_field(doc="What was compared.")
    steps: int = spec_field(min=0, doc="Training steps each run took.")
    reference: str = spec_field(doc="The variant compared against.")
    reference_final_loss: float | None = spec_field(doc="Its final loss; None when it diverged.")
    final_loss: float | None = spec_field(doc="This variant's final loss; None when it diverged.")
    ratio: float | None = spec_field(doc="final_loss ÷ reference_final_loss; None when it diverged.")
    diverged_at_step: int | None = spec_field(None, min=1, doc="The first step whose loss was not finite.")
    threshold: float = spec_field(doc="The ratio must not exceed this (1 + max_loss_increase).")
    first_loss: float | None = spec_field(
        doc="The loss of the first step (the same for both: same weights and data); None when not finite.")
    progress: float | None = spec_field(
        None, doc="Share of the reference's loss reduction this variant achieved: (first − final) ÷ (first − reference "
                  "final); None when the reference did not learn.")
    message: str = spec_field(doc="The verdict in one sentence.")


#: the uncompressed run must lower its loss by at least this many allowances (max_loss_increase × its final loss)
#: for a verdict: with less, every compression ends within the allowance whatever it does (tiny-llama at lr 1e-4:
#: none fell 1.3% in 50 steps and PowerSGD rank 1, at 40% of none's progress, was within 1%)
MIN_PROGRESS_ALLOWANCES = 5


def inconclusive_reason(reference: dict[str, Any], max_loss_increase: float, *,
                        allowance_flag: str = "--max-loss-increase") -> str | None:
    """Why the uncompressed run's quality document (``losses`` of the compared steps, ``eval_loss`` after them)
    cannot judge its compressed twins, naming the flags that fix it; None when it can. It cannot when its loss was
    not finite, rose (training blew up: a ratio against a blown-up loss says nothing — ResNet-50 at lr 0.1 on
    batches of 2 went from 8 to 3.9e7), or fell by less than ``MIN_PROGRESS_ALLOWANCES`` × ``max_loss_increase`` of
    its final loss. Pure Python (the CLI and the tune search read it without torch)."""
    import math

    losses, final = reference.get("losses") or [], reference.get("eval_loss")
    steps = len(losses)
    if not steps or final is None or not all(math.isfinite(x) for x in [*losses, final]):
        return (f"the uncompressed run's loss was not finite in its {steps} quality steps (training diverged); "
                "lower --lr")
    first = losses[0]
    learned = first - final
    needed = MIN_PROGRESS_ALLOWANCES * max_loss_increase * final
    if learned < 0:
        return (f"the uncompressed run's loss rose from {first:.4g} to {final:.4g} in {steps} quality steps (training "
                "is unstable at this learning rate); lower --lr")
    if learned < needed:
        return (f"the uncompressed run's loss fell only {learned / first:.1%} ({first:.4g} → {final:.4g}) in {steps} "
                f"quality steps, less than the {needed / first:.1%} ({MIN_PROGRESS_ALLOWANCES} × {allowance_flag} "
                f"{max_loss_increase:g} of its final loss) that tells compressions apart; raise --lr or "
                "--quality-steps")
    return None


def final_loss(losses: list[float], window: int) -> float | None:
    """Mean of the last ``window`` losses; None when any step's loss was not finite (diverged)."""
    if not all(math.isfinite(x) for x in losses):
        return None
    tail = losses[-window:]
    return sum(tail) / len(tail)


def gate_window(steps: int) -> int:
    """Steps the final training loss averages (without an evaluation loss): a tenth of the run, 1 to 10."""
    return max(1, min(10, steps // 10))


def loss_gate(reference: list[float], candidate: list[float], *, reference_eval: float | None = None,
              candidate_eval: float | None = None, max_loss_increase: float = 0.02, reference_name: str = "none",
              name: str = "candidate") -> LossGate:
    """Gate ``candidate`` against ``reference``: their training losses (one per step, same steps) and, when given,
    their evaluation losses after the last step — the final loss is the evaluation loss, else the mean of the last
    tenth of the training losses."""
    if len(reference) != len(candidate) or not reference:
        raise ValueError(f"the runs differ in steps ({len(reference)} vs {len(candidate)}); compare the same K steps")
    window = gate_window(len(reference))
    use_eval = reference_eval is not None and candidate_eval is not None
    criterion = (f"evaluation loss after {len(reference)} steps vs {reference_name} (same evaluation batches)" if use_eval
                 else f"final training loss (mean of the last {window} steps) vs {reference_name}")
    criterion += ", same training data and initial weights"

    def final(losses: list[float], evaluated: float | None) -> float | None:
        if not all(math.isfinite(x) for x in losses) or (use_eval and not math.isfinite(evaluated)):  # type: ignore[arg-type]
            return None
        return evaluated if use_eval else final_loss(losses, window)

    ref, cand = final(reference, reference_eval), final(candidate, candidate_eval)
    threshold = 1.0 + max_loss_increase
    first = reference[0]
    common = dict(criterion=criterion, steps=len(reference), reference=reference_name, reference_final_loss=ref,
                  threshold=threshold, first_loss=first if math.isfinite(first) else None)
    if ref is None:  # the reference diverged: nothing to judge against (it raised, and the run lost every figure)
        why = inconclusive_reason({"losses": reference, "eval_loss": reference_eval}, max_loss_increase)
        return LossGate(passed=False, inconclusive=True, final_loss=cand, ratio=None, progress=None,
                        message=f"{name}: the quality gate is inconclusive — {why}", **common)  # type: ignore[arg-type]
    learned = first - ref
    if cand is None:
        bad = [i for i, x in enumerate(candidate) if not math.isfinite(x)]
        step = bad[0] + 1 if bad else len(candidate)
        return LossGate(passed=False, final_loss=None, ratio=None, diverged_at_step=step, progress=None,
                        message=f"{name} FAILS the quality gate: its loss diverged (not finite at step {step} of "
                                f"{len(candidate)})", **common)  # type: ignore[arg-type]
    ratio = cand / ref if ref > 0 else math.inf
    passed = ratio <= threshold + 1e-12
    progress = (first - cand) / learned if learned > 0 else None
    message = (f"{name} {'passes' if passed else 'FAILS'} the quality gate: {'evaluation' if use_eval else 'final'} "
               f"loss {cand:.4f} vs {reference_name}'s {ref:.4f} = {ratio:.4f}× (allowed ≤ {threshold:.4f}×) after "
               f"{len(reference)} steps" + (f"; it made {progress:.0%} of {reference_name}'s progress"
                                             if progress is not None else ""))
    why = inconclusive_reason({"losses": reference, "eval_loss": ref}, max_loss_increase)
    if why is not None:
        message = (f"{name}: the quality gate is inconclusive — {why} ({'evaluation' if use_eval else 'final'} loss "
                   f"{cand:.4f} vs {ref:.4f} = {ratio:.4f}×, allowed ≤ {threshold:.4f}×)")
        return LossGate(passed=False, inconclusive=True, final_loss=cand, ratio=ratio, progress=progress,
                        message=message, **common)  # type: ignore[arg-type]
    return LossGate(passed=passed, final_loss=cand, ratio=ratio, progress=progress, message=message,
                    **common)  # type: ignore[arg-type]


def gate_document(gate: LossGate, losses: list[float]) -> dict[str, Any]:
    """The gate as a bench result keeps it (with the loss curve)."""
    return {**gate.to_dict(), "losses": losses}
