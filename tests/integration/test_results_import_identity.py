"""`accelkit results import` on real stores: what counts as "already stored" (the whole row, not its name and
second), and where the references of the imported rows point (their own new ids, or nowhere — never at an unrelated
row that holds the old id here)."""

from __future__ import annotations

import json

from accelkit.core import Estimate, Measurement
from accelkit.results import ResultStore, export

T = "2026-11-29T15:04:05Z"  # rows written together share their second
CPU = "cpu: Example CPU"


def _export(path, *, kind=None):
    with ResultStore() as store:
        path.write_text(export(store.query(kind=kind, newest_first=False), "json"))


def _import(cli, path, *args):
    proc = cli("results", "import", str(path), *args)
    assert proc.returncode == 0, proc.stderr
    return proc


def _two_precision_bench() -> dict[str, int]:
    """What `accelkit bench bert --precision fp32,bf16` stores: two estimates the same in everything but their
    figures (name, hardware, second, run id), and the two measurements that cite them."""
    ids = {}
    with ResultStore() as store:
        for precision, predicted, measured in (("fp32", 430.0, 36.8), ("bf16", 1775.0, 30.7)):
            ids[f"plan {precision}"] = store.add(Estimate(
                kind="plan", name=f"tiny-bert infer on 1×{CPU}", hardware=CPU, throughput=predicted, created_at=T,
                details={"precision": precision}), run_id="run-1")
            ids[precision] = store.add(Measurement(
                kind="bench", name=f"bert tiny · {precision} · forward", hardware=CPU, throughput=measured,
                created_at=T, details={"predicted": {"estimate_id": ids[f"plan {precision}"]}}), run_id="run-1")
    return ids


def test_results_that_share_name_hardware_second_and_run_are_all_imported(cli, tmp_path, monkeypatch):
    """The two estimates of a two-precision bench matched on (type, kind, name, hardware, second, run id): the bf16
    one was 'already stored', and the bf16 measurement cited the fp32 prediction."""
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "gpu-box"))
    _two_precision_bench()
    _export(tmp_path / "run.json")
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "laptop"))
    with ResultStore() as store:
        store.add(Measurement(kind="probe", name="local"))  # ids here differ from the exporting store's
    proc = _import(cli, tmp_path / "run.json", "--json")
    assert json.loads(proc.stdout)["imported"] == 4 and json.loads(proc.stdout)["already_stored"] == 0
    with ResultStore(readonly=True) as store:
        for bench in store.query(kind="bench"):
            cited = store.get(bench.result.details["predicted"]["estimate_id"]).result
            assert cited.details["precision"] in bench.result.name  # fp32 cites fp32's prediction, bf16 bf16's
        assert sorted(e.result.throughput for e in store.query(kind="plan")) == [430.0, 1775.0]
    again = _import(cli, tmp_path / "run.json")  # an exact duplicate is still stored once
    assert "imported 0 of 4" in again.stdout and "4 already stored, skipped" in again.stdout


def test_a_plan_sweep_over_layouts_keeps_every_point_and_its_summary_cites_them(cli, tmp_path, monkeypatch):
    """A plan sweep's points share model, device count, second and run id: two of three layouts were dropped, and the
    summary's result_ids all named the one survivor."""
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "a"))
    with ResultStore() as store:
        points = [store.add(Estimate(kind="plan", name="llama-3.1-8b train on 8×H100", hardware="H100", num_devices=8,
                                     throughput=tokens, created_at=T, details={"layout": layout}), run_id="sw")
                  for layout, tokens in (("tp2 dp4", 45628.3), ("tp4 dp2", 37962.2), ("tp8", 28416.3))]
        store.add(Measurement(kind="sweep", name="sweep layouts", created_at=T,
                              details={"points": [{"result_ids": [i]} for i in points]}), run_id="sw")
    _export(tmp_path / "sweep.json")
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "b"))
    with ResultStore() as store:
        store.add_many([Measurement(kind="probe", name=f"local {i}") for i in range(5)])
    _import(cli, tmp_path / "sweep.json")
    with ResultStore(readonly=True) as store:
        (summary,) = store.query(kind="sweep")
        cited = [store.get(i).result for p in summary.result.details["points"] for i in p["result_ids"]]
        assert [c.details["layout"] for c in cited] == ["tp2 dp4", "tp4 dp2", "tp8"]
        assert [c.throughput for c in cited] == [45628.3, 37962.2, 28416.3]


def test_references_to_results_left_out_of_the_export_are_cleared_and_counted(cli, tmp_path, monkeypatch):
    """An export of the bench rows alone (their estimates stay behind): imported where ids 1-7 are unrelated rows,
    each bench row's estimate_id named one of them. Now it is cleared, the summary says how many were, and
    importing the file again — here or into the store it came from — adds nothing."""
    source = tmp_path / "gpu-box"
    monkeypatch.setenv("ACCELKIT_HOME", str(source))
    ids = _two_precision_bench()
    with ResultStore() as store:
        store.add(Measurement(kind="tune", name="summary", created_at=T,
                              details={"trials": [{"result_ids": [ids["plan fp32"], ids["fp32"]]}]}), run_id="t")
    _export(tmp_path / "bench.json", kind=["bench", "tune"])
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "laptop"))
    with ResultStore() as store:
        store.add_many([Estimate(kind="plan", name=f"unrelated {i}") for i in range(7)])
    proc = _import(cli, tmp_path / "bench.json", "--json")
    summary = json.loads(proc.stdout)
    assert summary["imported"] == 3 and summary["references_cleared"] == 3, summary  # 2 estimate_ids, 1 of result_ids
    fp32, bf16, tune = summary["ids"]
    with ResultStore(readonly=True) as store:
        assert [store.get(i).result.details["predicted"]["estimate_id"] for i in (fp32, bf16)] == [None, None]
        assert store.get(tune).result.details["trials"][0]["result_ids"] == [fp32]  # the estimate left out
        assert store.get(fp32).result.name.startswith("bert tiny · fp32")
    again = _import(cli, tmp_path / "bench.json")
    assert "imported 0 of 3" in again.stdout and "3 already stored" in again.stdout and "cleared" not in again.stdout
    monkeypatch.setenv("ACCELKIT_HOME", str(source))  # the store it came from, where the references hold
    back = _import(cli, tmp_path / "bench.json")
    assert "imported 0 of 3" in back.stdout and "3 already stored" in back.stdout
    with ResultStore(readonly=True) as store:
        assert store.count() == 5


def test_the_summary_line_names_the_cleared_references(cli, tmp_path, monkeypatch):
    with ResultStore() as store:
        estimate = store.add(Estimate(kind="plan", name="p"))
        store.add(Measurement(kind="bench", name="fp32", details={"predicted": {"estimate_id": estimate}}))
    _export(tmp_path / "bench.json", kind="bench")
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "other"))
    proc = _import(cli, tmp_path / "bench.json")
    assert (f"imported 1 of 1 results from {tmp_path / 'bench.json'}" in proc.stdout
            and "1 reference (estimate_id, result_ids) to results not in" in " ".join(proc.stdout.split()))
