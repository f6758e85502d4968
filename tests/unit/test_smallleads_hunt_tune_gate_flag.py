"""`accelkit tune --nproc-per-node N`: an inconclusive compression gate's `gate.message` in the JSON said
"5 × --max-loss-increase 0.01" — bench's flag, which tune does not take — while its `reason` said --max-accuracy-drop.
The message is the bench's loss gate (real ``loss_gate`` below), read into the trial as tune reads a bench entry."""

from __future__ import annotations

from accelkit.recipes.grad_compression import gate_document, loss_gate
from accelkit.tune.compression import _gate, _inconclusive_references
from accelkit.tune.search import TuneConfig


def _entries(reference: list[float], candidate: list[float]) -> dict:
    """The bench's quality documents of none (the reference) and one compression, as its entries hold them."""
    gate = loss_gate(reference, candidate, reference_eval=reference[-1], candidate_eval=candidate[-1],
                     max_loss_increase=0.01, reference_name="fp32", name="fp32+bf16-grads")
    return {"fp32": {"quality": {"role": "reference", "losses": reference, "eval_loss": reference[-1]}},
            "fp32+bf16-grads": {"quality": gate_document(gate, candidate)}}


def test_an_inconclusive_gate_names_tunes_flag():
    # none's loss fell 0.3% in 3 steps: less than 5 × 1% of it, so the check cannot tell compressions apart
    entries = _entries([6.261, 6.25, 6.241], [6.261, 6.25, 6.2411])
    assert "--max-loss-increase" in entries["fp32+bf16-grads"]["quality"]["message"]  # the bench's own words
    inconclusive = _inconclusive_references(entries, TuneConfig(), lr=1e-4)
    gate = _gate(entries["fp32+bf16-grads"], inconclusive["fp32"])
    assert gate["inconclusive"] and "5 × --max-accuracy-drop 0.01" in gate["reason"]
    assert gate["message"].startswith("fp32+bf16-grads: the quality gate is inconclusive — ")
    assert "5 × --max-accuracy-drop 0.01 of its final loss" in gate["message"]
    assert "--max-loss-increase" not in gate["message"]


def test_a_conclusive_gate_keeps_its_message():
    entries = _entries([6.0, 5.0, 4.0], [6.0, 5.1, 4.02])
    assert _inconclusive_references(entries, TuneConfig(), lr=1e-4) == {}
    gate = _gate(entries["fp32+bf16-grads"], None)
    assert gate["passed"] and gate["message"] == entries["fp32+bf16-grads"]["quality"]["message"]
