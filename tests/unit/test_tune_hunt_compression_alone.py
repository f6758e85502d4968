"""`accelkit tune llm-train --nproc-per-node 2 --max-trials 1` measures the uncompressed run alone: with no compressed
twin beside it no quality check runs, and the reference failed its own gate ("quality gate: no quality check ran"),
so the search printed "No recipe passed the accuracy gate" — where one process's `tune --max-trials 1` crowns fp32.
The uncompressed variant is the reference by definition, and wins alone."""

from __future__ import annotations

from accelkit.tune.compression import _candidates, _record_measured, compression_snippet


def _entry(name: str, quality: dict | None) -> dict:
    return {"name": name, "throughput": {"value": 100.0, "unit": "tokens/s"}, "latency_s": {"median": 0.01},
            "memory_bytes": {"peak": 1 << 20}, "quality": quality}


def test_the_uncompressed_run_measured_alone_is_the_reference_not_a_failed_gate():
    _, measured = _candidates("cpu", 2, max_trials=1)
    (alone, _), = measured
    _record_measured(measured, {alone.name: _entry(alone.name, None)}, {}, interrupted=False)
    assert (alone.status, alone.passed, alone.reason) == ("measured", True, None)
    assert alone.gate["criterion"] == "reference"
    assert "no compression" in compression_snippet(alone.recipe)


def test_a_compressed_variant_without_a_quality_check_still_fails():
    _, measured = _candidates("cpu", 2, max_trials=2)
    entries = {t.name: _entry(t.name, None) for t, _ in measured}
    _record_measured(measured, entries, {}, interrupted=False)
    (none, _), (compressed, _) = measured
    assert none.passed and not compressed.passed
    assert compressed.reason == "quality gate: no quality check ran"
