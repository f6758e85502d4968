"""`--json` and the results store write strict JSON: an inf or NaN anywhere is null (a load test's inf rate the
string 'inf'), never `Infinity`/`NaN`, which strict parsers (jq, JSON.parse) reject."""

from __future__ import annotations

import json
import math

import pytest

from accelkit.core import Measurement
from accelkit.core.bench_result import BenchRunResult, MemoryUse
from accelkit.core.strict_json import dumps


def strict_loads(text: str):
    def refuse(constant: str):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def run_with_non_finite() -> dict:
    doc = BenchRunResult(workload="w", label="l", device="cpu", hardware="h", run_id="r",
                         environment={"loss": math.nan}).to_json()
    doc["notes"].append("x")
    doc["extra"] = {"ratio": math.inf, "spread": [1.0, -math.inf, math.nan], "rate": math.inf,
                    "sweep_rates": [1.0, math.inf], "memory": MemoryUse(peak=3).to_dict()}
    return doc


def test_emit_and_print_unsaved_write_strict_json(capsys):
    """emit() and print_unsaved() called json.dumps with its default allow_nan=True: one inf anywhere in a result
    made `--json` stdout invalid for strict parsers."""
    from accelkit.cli.output import emit
    from accelkit.cli.store import print_unsaved
    from accelkit.core import AccelkitError

    emit(run_with_non_finite(), True, lambda: None)
    doc = strict_loads(capsys.readouterr().out)
    assert doc["environment"]["loss"] is None
    assert doc["extra"]["ratio"] is None and doc["extra"]["spread"] == [1.0, None, None]
    assert doc["extra"]["rate"] == "inf" and doc["extra"]["sweep_rates"] == [1.0, "inf"]  # rate_json's spelling
    assert doc["extra"]["memory"]["peak"] == 3 and doc["notes"] == ["x"]
    with pytest.raises(AccelkitError):
        print_unsaved(run_with_non_finite(), AccelkitError("disk full"))
    assert strict_loads(capsys.readouterr().out)["extra"]["ratio"] is None


def test_results_export_writes_strict_json_and_the_store_keeps_the_row_readable(tmp_path):
    """`results export --format json` wrote Infinity/NaN too (json.dumps on the stored records). It is strict now,
    while the row itself keeps its inf (read back by the store alone): a null latency sample would fail the row's
    typed read, and the measurement would be lost."""
    from accelkit.results import ResultStore
    from accelkit.results.store import export

    m = Measurement(kind="bench", name="n", hardware="h", throughput=1.0,
                    details={"ratio": math.inf, "loss": [1.0, math.nan]}, samples={"latency_s": [0.1, math.inf]})
    with ResultStore(tmp_path / "r.db") as store:
        back = store.get(store.add(m))
    assert back.result.samples["latency_s"] == [0.1, math.inf] and back.result.details["ratio"] == math.inf
    doc = strict_loads(export([back], "json"))[0]
    assert doc["details"] == {"ratio": None, "loss": [1.0, None]}
    assert doc["samples"]["latency_s"] == [0.1, None]


def test_dumps_leaves_finite_documents_alone_and_other_errors_raise():
    assert dumps({"a": [1, 2.5, None]}) == json.dumps({"a": [1, 2.5, None]})
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        dumps(loop)
