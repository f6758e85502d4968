import pytest
import torch

from accelkit.recipes.gates import GateConfig, check, drift, output_tensor


def test_identical_outputs():
    x = torch.randn(4, 10)
    d = drift(x, x.clone(), logits=True)
    assert d.max_abs_error == 0 and d.cosine == pytest.approx(1.0) and d.sqnr_db is None and d.identical
    assert d.top1_agreement == 1.0


def test_sqnr_of_known_noise():
    ref = torch.ones(1000)
    cand = ref + 0.1  # noise power 0.01 per element, signal 1 → 20 dB
    assert drift(ref, cand, logits=False).sqnr_db == pytest.approx(20.0, abs=1e-4)


def test_top1_gate_counts_disagreements():
    ref = torch.eye(100)
    cand = ref.clone()
    cand[0] = torch.tensor([0.0, 2.0] + [0.0] * 98)  # one of 100 rows now picks another class
    assert check(ref, cand, logits=True).passed  # 99% agreement is within 1%
    cand[1] = torch.tensor([3.0] + [0.0] * 99)
    result = check(ref, cand, logits=True)
    assert not result.passed and result.candidate_value == pytest.approx(0.98) and result.criterion == "top1"


def test_task_metric_gate_is_relative():
    labels = torch.tensor([0, 1, 2, 3])
    ref = torch.eye(4)
    cand = torch.eye(4)
    cand[3] = torch.tensor([1.0, 0, 0, 0])

    def accuracy(t):
        return (t.argmax(-1) == labels).float().mean().item()

    result = check(ref, cand, logits=True, metric=accuracy)
    assert result.criterion == "task" and result.reference_value == 1.0 and result.candidate_value == 0.75
    assert not result.passed
    assert check(ref, cand, logits=True, metric=accuracy, config=GateConfig(max_drop=0.3)).passed


def test_cosine_gate_and_output_extraction():
    class Out:
        last_hidden_state = torch.ones(2, 3)

    assert output_tensor(Out()) is Out.last_hidden_state
    assert check(Out(), torch.ones(2, 3) * 2, logits=False).passed  # same direction, cosine 1
    with pytest.raises(ValueError, match="shapes differ"):
        drift(torch.ones(2), torch.ones(3), logits=False)
    with pytest.raises(ValueError, match="max_drop"):
        GateConfig(max_drop=2.0)


def test_an_overflowed_output_fails_every_gate_instead_of_raising():
    """fp16 past 65504 gives inf, and inf − inf NaN: Drift rejected the NaN max error with a ValueError, so the
    bench recorded the variant as failed and threw its timing away. The overflow is now counted and fails the
    gate."""
    ref = torch.eye(8)
    cand = ref.clone()
    cand[0, 0] = float("inf")
    cand[1, 1] = float("nan")
    d = drift(ref, cand, logits=True)
    assert d.num_nonfinite == 2 and d.num_nonfinite_reference == 0 and not d.is_finite
    assert d.max_abs_error is None and d.cosine is None and d.top1_agreement is None and d.sqnr_db is None
    for criterion in ("top1", "cosine"):
        assert not check(ref, cand, logits=True, config=GateConfig(criterion=criterion)).passed
    # even a task metric that ignores the bad values cannot pass an output with inf/NaN
    assert not check(ref, cand, logits=True, metric=lambda out: 1.0).passed
    assert drift(cand, ref, logits=False).num_nonfinite_reference == 2  # a bad reference: nothing to compare with


def test_an_overflowed_output_records_no_drift_figure_and_the_gate_says_there_is_none():
    """Cosine and top-1 agreement of an output with inf/NaN were recorded as 0 — a convention that reads as a
    measured total drift. They are None now, and the gate fails on the missing figure instead of comparing it."""
    ref = torch.eye(4)
    cand = ref.clone()
    cand[2, 2] = float("nan")
    d = drift(ref, cand, logits=True)
    assert (d.max_abs_error, d.cosine, d.sqnr_db, d.top1_agreement) == (None, None, None, None)
    for criterion in ("top1", "cosine"):
        result = check(ref, cand, logits=True, config=GateConfig(criterion=criterion))
        assert result.passed is False and result.candidate_value is None
    with pytest.raises(ValueError, match="needs logits"):
        check(ref, cand, logits=False, config=GateConfig(criterion="top1"))


def test_task_gate_allows_the_same_relative_drop_for_a_negative_metric():
    """The threshold was ref·(1 − max_drop), which lies above a negative reference (a mean log-likelihood): an
    identical candidate failed. It is ref − max_drop·|ref| now; a lower-is-better metric passed negated gets the
    symmetric allowance ref + max_drop·|ref|."""
    labels = torch.tensor([0, 1, 2, 3])
    ref = torch.eye(4) * 2.0

    def log_likelihood(t):  # higher is better, always ≤ 0
        return torch.log_softmax(t.float(), -1).gather(1, labels[:, None]).mean().item()

    result = check(ref, ref.clone(), logits=True, metric=log_likelihood)
    assert result.passed and result.threshold == pytest.approx(result.reference_value * 1.01)
    ref_ll = log_likelihood(ref)
    within, beyond = ref * 0.995, ref * 0.9  # flatter logits: a lower log-likelihood
    assert ref_ll * 1.01 < log_likelihood(within) < ref_ll  # less than 1% worse …
    assert check(ref, within, logits=True, metric=log_likelihood).passed
    assert log_likelihood(beyond) < ref_ll * 1.01  # … and more than 1% worse
    assert not check(ref, beyond, logits=True, metric=log_likelihood).passed

    def loss(t):  # lower is better, passed negated
        return -torch.nn.functional.cross_entropy(t.float(), labels).item()

    ref_loss = -loss(ref)
    negated = check(ref, within, logits=True, metric=loss)
    assert negated.passed and -negated.threshold == pytest.approx(ref_loss * 1.01)  # cand loss ≤ ref + 1%·|ref|
    assert not check(ref, beyond, logits=True, metric=loss).passed


def test_cosine_of_an_output_with_itself_is_exactly_one():
    """Summed in fp32, a (2, 64, 5000) output's cosine against itself came out 1.0000119 (the review saw 1.0000269):
    a similarity can never exceed 1."""
    torch.manual_seed(0)
    x = torch.randn(2, 64, 5000) * 3 + 1
    assert drift(x, x).cosine == 1.0
    assert drift(x, x * (1 + 1e-6)).cosine <= 1.0
    assert drift(x, -x).cosine == -1.0


def _near_tie_logits() -> torch.Tensor:
    """(64, 500) logits: rows 0–31 with a clear winner, rows 32–63 with their top two 1e-4 σ apart."""
    torch.manual_seed(0)
    ref = torch.randn(64, 500)
    ref[:32, 7] = ref[:32].max(-1).values + 1.0
    ref[32:, 3] = ref[32:].max(-1).values + 1.0
    ref[32:, 9] = ref[32:, 3] - 1e-4
    return ref


def test_top1_agreement_leaves_out_near_ties_that_flip_on_rounding():
    """A near-tie's argmax is rounding noise: a random-init LM's bf16 logits agreed on 95% of positions with a
    cosine of 0.9999 and failed the 99% gate. Only positions with a clear reference top-1 count."""
    ref = _near_tie_logits()
    cand = ref.clone()
    cand[32:, 9] += 2e-4  # every near-tie flips, by far less than the logits' spread
    d = drift(ref, cand, logits=True)
    assert d.top1_agreement == 1.0 and d.num_top1_positions == 32
    assert check(ref, cand, logits=True).passed
    cand[:4, 7] -= 2.0  # a clear winner lost is counted
    assert drift(ref, cand, logits=True).top1_agreement == pytest.approx(28 / 32)


@pytest.mark.parametrize("broken", ["noise", "unrelated"])
def test_a_broken_candidate_still_fails_the_top1_gate(broken):
    ref = _near_tie_logits()
    torch.manual_seed(1)
    cand = ref + torch.randn_like(ref) if broken == "noise" else torch.randn_like(ref)  # noise σ = logits σ
    result = check(ref, cand, logits=True)
    assert result.criterion == "top1" and not result.passed and result.candidate_value < 0.9


def test_all_near_ties_fall_back_to_cosine():
    ref = torch.zeros(8, 10)
    ref[:, 0], ref[:, 1] = 1.0, 1.0 - 1e-6  # no position has a clear top-1
    d = drift(ref, ref.flip(-1), logits=True)
    assert d.top1_agreement is None and d.num_top1_positions == 0
    assert check(ref, ref, logits=True).criterion == "cosine"
