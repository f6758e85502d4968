"""A loadtest sweep's `sweep_rates` (in the loadtest section or under a workload) replaced the rate each point takes
from the `rates` axis: `rates: [1, 4]` with `sweep_rates: [2, inf]` ran both points at 2 and inf and stored them as
'rate 1' and 'rate 4'. Refused in one line before any point runs (and before the store is opened); without a rates
axis, sweep_rates is each point's own curve and still runs."""

from __future__ import annotations

import math

import pytest

from accelkit.core import UserError
from accelkit.sweep.grid import expand, loadtest_config
from accelkit.sweep.run import refuse_replaced_rates, run_sweep
from accelkit.sweep.spec import load_sweep
from tests.conftest import main_in_process

URL = "base_url: 'http://127.0.0.1:9'"


@pytest.mark.parametrize(("text", "message"), [
    ("workloads: {m: {}}\nrates: [1, 4]\nloadtest: {" + URL + ", sweep_rates: [2, .inf]}\n",
     "loadtest sets sweep_rates, which replaces the rate each point takes from the sweep's rates axis (every point "
     "would run the same rates, labelled with its own); give the rates once, as rates: [2, inf], or drop rates to run "
     "sweep_rates at each point"),
    ("workloads: {m: {sweep_rates: [3]}}\nrates: [1, 4]\nloadtest: {" + URL + "}\n",
     "workloads['m'] sets sweep_rates, which replaces the rate each point takes from the sweep's rates axis (every "
     "point would run the same rates, labelled with its own); give the rates once, as rates: [3], or drop rates to "
     "run sweep_rates at each point"),
])
def test_sweep_rates_beside_a_rates_axis_is_refused(capsys, tmp_path, _isolated_home, text, message):
    path = tmp_path / "s.yaml"
    path.write_text("kind: loadtest\n" + text)
    spec = load_sweep(path)
    # what it would have run: each point's rate replaced
    assert {loadtest_config(p.workload, p.config, spec.loadtest, p.rate).rates for p in expand(spec)} == {
        tuple(float(r) for r in (spec.loadtest.get("sweep_rates") or spec.workloads["m"]["sweep_rates"]))}
    code, out, err = main_in_process(capsys, "sweep", str(path), "--no-progress")
    assert (code, out, err) == (2, "", f"error: {path}: {message}\n")
    assert not _isolated_home.exists()  # refused before the store was opened
    with pytest.raises(UserError, match=r"^loadtest sets sweep_rates|^workloads\['m'\] sets sweep_rates"):
        run_sweep(spec)


def test_sweep_rates_without_a_rates_axis_is_the_points_own_curve(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("kind: loadtest\nworkloads: {m: {}}\nloadtest: {" + URL + ", sweep_rates: [2, .inf]}\n")
    spec = load_sweep(path)
    refuse_replaced_rates(spec)  # nothing refused
    (point,) = expand(spec)
    assert point.rate is None and loadtest_config("m", {}, spec.loadtest, math.inf).rates == (2.0, math.inf)
