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
    and so is the row itself (it held `Infinity`/`NaN`, which sqlite's strict JSON readers and jq reject): each
    non-finite figure is null, named with its value under the payload's `non_finite` (JSON Pointer, RFC 6901), and
    read back as it was — a null alone would fail the row's typed read (an inf latency sample) and lose the row."""
    import sqlite3

    from accelkit.results import ResultStore
    from accelkit.results.store import export

    m = Measurement(kind="bench", name="n", hardware="h", throughput=1.0,
                    details={"ratio": math.inf, "loss": [1.0, math.nan], "a/b~c": {"low": -math.inf}},
                    samples={"latency_s": [0.1, math.inf]}, environment={"temperature": math.nan})
    named = {"/details/ratio": "inf", "/details/loss/1": "nan", "/details/a~1b~0c/low": "-inf",
             "/samples/latency_s/1": "inf", "/environment/temperature": "nan"}
    with ResultStore(tmp_path / "r.db") as store:
        back = store.get(store.add(m))
    with sqlite3.connect(tmp_path / "r.db") as conn:
        payload, samples, environment = conn.execute("SELECT payload, samples, environment FROM results").fetchone()
        valid = conn.execute("SELECT json_valid(payload), json_valid(samples), json_valid(environment) FROM results")
        assert valid.fetchone() == (1, 1, 1)  # SQLite's own JSON functions take the row
    payload, samples, environment = strict_loads(payload), strict_loads(samples), strict_loads(environment)
    assert payload["details"] == {"ratio": None, "loss": [1.0, None], "a/b~c": {"low": None}}
    assert samples == {"latency_s": [0.1, None]} and environment == {"temperature": None}
    assert payload["non_finite"] == named
    assert back.result.samples["latency_s"] == [0.1, math.inf] and back.result.details["ratio"] == math.inf
    assert back.result.details["a/b~c"]["low"] == -math.inf and math.isnan(back.result.details["loss"][1])
    assert math.isnan(back.result.environment["temperature"]) and back.non_finite == named
    doc = strict_loads(export([back], "json"))[0]
    assert doc["details"] == {"ratio": None, "loss": [1.0, None], "a/b~c": {"low": None}}
    assert doc["samples"]["latency_s"] == [0.1, None] and doc["non_finite"] == named  # each null explained


def test_a_row_written_before_strict_json_still_reads(tmp_path):
    """Rows of earlier versions hold `Infinity`/`NaN` and no `non_finite`: they read as before."""
    import sqlite3

    from accelkit.results import ResultStore

    with ResultStore(tmp_path / "r.db") as store:
        rid = store.add(Measurement(kind="bench", name="n", samples={"latency_s": [0.1, 0.2]}))
    with sqlite3.connect(tmp_path / "r.db") as conn:
        conn.execute("UPDATE results SET samples = ?", ('{"latency_s": [0.1, Infinity]}',))
    with ResultStore(tmp_path / "r.db", readonly=True) as store:
        back = store.get(rid)
    assert back.result.samples["latency_s"] == [0.1, math.inf] and back.non_finite == {}


def test_dumps_leaves_finite_documents_alone_and_other_errors_raise():
    assert dumps({"a": [1, 2.5, None]}) == json.dumps({"a": [1, 2.5, None]})
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        dumps(loop)
