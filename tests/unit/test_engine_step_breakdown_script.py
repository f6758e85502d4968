"""benchmarks/engine_step_breakdown.py's arithmetic: the forward is part of the step (not left out as in
engine_host_overhead.py), output building is taken out of postprocess, the glue is ``other``, and the shares of a
cell add up to 1."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("engine_step_breakdown", REPO / "benchmarks" / "engine_step_breakdown.py")
assert spec is not None and spec.loader is not None
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def record(batch: int, step_s: float, **phases: float) -> dict:
    return {"phases": {k: (v, v / 2) for k, v in phases.items()}, "num_seqs": batch, "num_tokens": batch,
            "step": (step_s, step_s / 2)}


def test_a_decode_step_splits_into_its_phases_with_the_forward_included():
    # a prefill step (more tokens than sequences) is not a decode step: left out; then 3 decode steps
    prefill = {**record(4, 1.0, forward=0.9), "num_tokens": 1024}
    decode = [record(4, 0.010 * (i + 1), schedule=0.0001, forward=0.008 * (i + 1), sample=0.0005, postprocess=0.0003,
                     outputs=0.0001, deliver=0.0002) for i in range(3)]
    cell = bench.summarize([prefill, *decode], 4, skip=0, steps=3)
    assert cell["num_steps"] == 3 and cell["num_decode_steps_seen"] == 3
    wall = cell["phases_us"]["wall"]
    assert wall["forward"] == pytest.approx(16_000, abs=0.1)  # the median step's forward: kept in
    assert wall["postprocess"] == pytest.approx(200, abs=0.1)  # 300 µs less the 100 µs of building outputs
    # the median step: 20 ms, of which 16.9 ms are timed phases inside engine.step: the rest is other
    assert wall["other"] == pytest.approx(20_000 - 100 - 16_000 - 500 - 200 - 100, abs=0.1)
    assert cell["step_us_wall"] == pytest.approx(20_000 + 200, abs=0.1)  # deliver runs after the step: added
    assert cell["step_us_cpu"] == pytest.approx(10_100, abs=0.1)
    assert sum(cell["share"]["wall"].values()) == pytest.approx(1.0, abs=1e-3)
    assert cell["share"]["wall"]["forward"] == pytest.approx(16_000 / sum(wall.values()), abs=1e-4)
    assert list(wall) == [k for k in bench.PHASES if k in wall]  # in step order


def test_no_decode_step_at_the_batch_size_is_an_error_naming_it():
    with pytest.raises(RuntimeError, match="batch 64"):
        bench.summarize([record(4, 0.01, forward=0.009)], 64, skip=0, steps=3)


def test_shares_of_nothing_are_zero():
    assert bench.shares({"forward": 0.0, "sample": 0.0}) == {"forward": 0.0, "sample": 0.0}
    assert bench.shares({"forward": 3.0, "sample": 1.0}) == {"forward": 0.75, "sample": 0.25}


@pytest.mark.parametrize(("argv", "line"), [
    (["--batch-sizes", "1", "0"], "error: --batch-sizes 0: give batch sizes from 1 to 256\n"),
    (["--temperature", "-1"], "error: --temperatures -1.0: give finite temperatures >= 0 (0 = greedy)\n"),
    (["--compare", "no-such-revision"],
     "error: --compare no-such-revision: not a commit of this repository; give a revision (e.g. 34f97c6)\n"),
])
def test_bad_input_is_one_error_line_before_anything_runs(argv, line, monkeypatch, capsys, tmp_path):
    out = tmp_path / "out.json"
    monkeypatch.setattr("sys.argv", ["engine_step_breakdown.py", *argv, "--out", str(out)])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2 and capsys.readouterr().err == line and not out.exists()
