"""MFU arithmetic, peak resolution from a stored probe, accuracy drift, the A/B comparison, FLOP counting."""

import pytest

from accelkit.bench.metrics import MIN_PAIRS, Peak, catalog_peak, compare, count_flops, drift, mfu_result, probe_peak
from accelkit.core import Measurement
from accelkit.results import ResultStore


def test_mfu_names_peak_and_formula():
    mfu = mfu_result(2e9, 100.0, Peak(1e12, "measured: probe 3"), "FlopCounterMode")
    assert mfu.value == pytest.approx(0.2)
    assert mfu.peak_source == "measured: probe 3" and mfu.flops_source == "FlopCounterMode"
    missing = mfu_result(2e9, 100.0, Peak(None, "MFU unavailable: run accelkit hw probe"), "x")
    assert missing.value is None and "hw probe" in missing.peak_source


def test_mfu_against_the_datasheet_and_the_probe():
    """A catalog GPU: "39% of the datasheet, 57% of what this GPU's matmul reaches" — both, in the JSON."""
    datasheet, probe = Peak(989e12, "catalog: H200 dense bf16"), Peak(679e12, "measured: hw probe 7")
    mfu = mfu_result(1e9, 386_000.0, datasheet, "meta", datasheet=datasheet, probe=probe)
    assert mfu.value == pytest.approx(386e12 / 989e12) and mfu.datasheet.value == mfu.value
    assert mfu.probe.value == pytest.approx(386e12 / 679e12) and mfu.probe.source == "measured: hw probe 7"
    doc = mfu.to_dict()
    assert doc["datasheet"]["peak_flops"] == 989e12 and doc["probe"]["peak_flops"] == 679e12


def test_catalog_peak_is_dense_datasheet_figure():
    peak = catalog_peak("h200", "bf16")
    assert peak.flops == 989e12 and peak.source.startswith("catalog: H200")
    assert catalog_peak("h200", "fp4").flops is None


def _probe(dtypes):
    matmul = {d: {"tflops": 0.5, "size": 2048} for d in dtypes}
    return Measurement(kind="probe", name="hw probe", hardware="cpu: test", details={"matmul": matmul})


def test_probe_peak_uses_newest_probe_that_has_the_dtype(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        assert probe_peak(store, "cpu: test", "fp32")[0].flops is None
        first = store.add(_probe(["fp32", "bf16"]))
        store.add(_probe(["fp16"]))  # newer, but without fp32
        peak, pid = probe_peak(store, "cpu: test", "fp32")
        assert peak.flops == 0.5e12 and pid == first and "hw probe` result" in peak.source


def test_drift_figures():
    torch = pytest.importorskip("torch")
    ref = torch.randn(4, 10)
    same = drift(ref, ref.clone())
    assert same.max_abs_error == 0 and same.identical and same.sqnr_db is None
    assert same.top1_agreement == 1.0 and same.rows == 4
    noisy = drift(ref, ref + 0.01 * torch.randn(4, 10))
    assert 20 < noisy.sqnr_db < 60 and noisy.cosine > 0.99


def test_compare_interleaved_pairs_and_verdicts():
    faster = compare("a", [100, 100, 100, 100, 100], [200, 210, 190, 200, 205], interleaved=True)
    assert faster.ratio == pytest.approx(2.0) and faster.verdict == "faster" and faster.pairs == 5
    same = compare("a", [100, 110, 90, 100, 100], [105, 95, 100, 100, 100], interleaved=True)
    assert same.verdict.startswith("no difference")
    seq = compare("a", [100] * 5, [50] * 5, interleaved=False)
    assert seq.ratio == pytest.approx(0.5) and seq.verdict == "slower" and seq.pairs == 0 and seq.baseline == "a"


def test_a_ratio_on_too_few_pairs_is_inconclusive():
    """One pair of blocks gave a firm 'faster' (p25 = p75 = the ratio: no spread behind it). The p25–p75 test needs
    MIN_PAIRS (5) pairs before a quartile stops being drawn from the extreme pair."""
    one = compare("fp32", [100], [200], interleaved=True)
    assert one.ratio == pytest.approx(2.0) and one.pairs == 1
    assert one.verdict.startswith("inconclusive (1 pair of blocks;") and "--min-time" in one.verdict
    assert "--min-iterations" in one.verdict
    assert one.p25 is None and one.p75 is None  # one ratio has no spread to show
    four = compare("fp32", [100] * 4, [200, 210, 190, 200], interleaved=True)
    assert four.verdict.startswith("inconclusive (4 pairs of blocks;") and four.p25 is not None
    assert compare("fp32", [100] * MIN_PAIRS, [200] * MIN_PAIRS, interleaved=True).verdict == "faster"
    seq = compare("fp32", [100, 100], [50, 50, 50, 50, 50], interleaved=False)  # one after another: blocks per variant
    assert seq.verdict.startswith("inconclusive (2 blocks of fp32 and 5 of this variant;")


def test_count_flops_matmul_and_cpu_attention():
    torch = pytest.importorskip("torch")
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    assert count_flops(lambda: a @ b) == 2 * 8 * 16 * 4
    q = k = v = torch.randn(1, 2, 8, 4)  # (B, H, T, D)
    flops = count_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))
    assert flops == 2 * (2 * 1 * 2 * 8 * 8 * 4)  # QKᵀ + PV, counted although SDPA takes the CPU flash kernel


def test_decode_flops_from_three_contexts_equal_counting_every_call():
    """The decode step's FLOPs on the meta device come from three contexts (first, middle, last) instead of every
    call of the cycle; for a dense decoder they are affine in the context, so the mean is exact — the same number."""
    from accelkit.bench.reference import step_flops
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload

    workload = make_workload("llm", {"model": "tiny-llama", "batch_size": 2, "prompt_len": 5, "output_len": 12})
    fast = workload.prepare(Variant(), "meta", seed=0)
    decode = next(s for s in fast.steps if s.name == "decode")
    assert decode.flops_per_call is not None and decode.flops_per_call() is not None
    every = workload.prepare(Variant(), "meta", seed=0)
    for step in every.steps:
        step.flops_per_call = None  # count all 12 calls of the cycle
    assert step_flops(fast) == step_flops(every)
    on_cpu = workload.prepare(Variant(), "cpu", seed=0)
    assert next(s for s in on_cpu.steps if s.name == "decode").flops_per_call() is None  # real tokens: count them


def test_drift_of_an_overflowed_output_is_a_failed_figure_with_a_note():
    """An fp16 overflow raised 'max_abs_error is NaN' out of the first call and the variant's timing was lost; its
    accuracy now records the overflow (JSON-strict: no inf/NaN) with figures every gate fails."""
    import math

    import torch

    ref = torch.randn(4, 8)
    out = ref.clone()
    out[2] = float("inf")
    acc = drift(ref, out)
    assert acc.note is not None and "inf/NaN (8 of 32 values)" in acc.note
    assert acc.identical is False and acc.rows == 4
    # no figure is a measurement: all null (a 0 cosine would read as one), and inf is not JSON
    assert (acc.max_abs_error, acc.cosine, acc.sqnr_db, acc.top1_agreement) == (None, None, None, None)
    assert all(not isinstance(v, float) or math.isfinite(v) for v in acc.to_dict().values())
