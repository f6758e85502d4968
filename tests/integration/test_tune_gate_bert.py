"""A hidden-state output has no class axis: `accelkit tune bert` gated int8 dynamic on top-1 agreement over the
encoder's hidden features (argmax over 256 features, 0.984) and rejected it at cosine 0.99997. The bert workload
says its output is not logits, and the gate uses cosine there."""

from accelkit.bench.metrics import drift
from accelkit.bench.variants import Variant
from accelkit.bench.workloads import make_workload
from accelkit.tune.search import _gate


def test_bert_int8_is_gated_on_cosine_not_on_top1_over_hidden_features():
    workload = make_workload("bert", {"size": "tiny", "batch_size": 2, "seq_len": 32})
    assert workload.output_is_logits is False  # type: ignore[attr-defined]
    outputs = {}
    for precision in ("fp32", "int8"):
        prepared = workload.prepare(Variant(precision=precision), "cpu", seed=0)
        assert prepared.evaluate is not None
        outputs[precision] = prepared.evaluate()
    accuracy = drift(outputs["fp32"], outputs["int8"], logits=False)
    assert accuracy.top1_agreement is None and accuracy.cosine is not None
    guessed = drift(outputs["fp32"], outputs["int8"]).to_dict()  # the shape alone reads hidden features as classes
    assert guessed["top1_agreement"] is not None
    gate = _gate(guessed, 0.01, logits=False)
    assert gate["criterion"] == "cosine" and gate["candidate_value"] == guessed["cosine"]
    assert _gate(guessed, 0.01)["criterion"] == "top1"  # a workload that does not say keeps the shape's guess


def test_a_hidden_state_far_off_still_fails_on_cosine():
    gate = _gate({"cosine": 0.9, "top1_agreement": 1.0, "identical": False}, 0.01, logits=False)
    assert gate["criterion"] == "cosine" and not gate["passed"]
