"""A loadtest sweep point sets its own rate (the ``rates`` axis, inf without one) and its own model (the workload's
name, or the workload's ``model`` field): the same fields in the file were silently replaced — ``loadtest:
{request_rate: 5}`` ran every point at inf, ``loadtest: {model: other}`` served the workload's name. They are refused
at load, naming the section and what to write instead."""

from __future__ import annotations

import pytest

from accelkit.core import UserError
from accelkit.sweep.grid import expand, loadtest_config
from accelkit.sweep.spec import load_sweep

URL = "base_url: 'http://127.0.0.1:9'"


def _load(tmp_path, text: str):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nkind: loadtest\n" + text)
    return path, lambda: load_sweep(path)


@pytest.mark.parametrize(("text", "expected"), [
    ("workloads: {m: {}}\nloadtest: {" + URL + ", request_rate: 5}\n",
     "loadtest sets request_rate, which a sweep point does not read: its rate comes from the sweep's rates axis; "
     "give rates: [5] instead"),
    ("workloads: {m: {request_rate: .inf}}\nloadtest: {" + URL + "}\n",
     "workloads['m'] sets request_rate, which a sweep point does not read: its rate comes from the sweep's rates "
     "axis; give rates: [inf] instead"),
    ("workloads: {m: {}}\nloadtest: {" + URL + ", model: other}\n",
     "loadtest sets model=other, which a sweep point does not read: each point serves its workload's name (or its "
     "own model field); name the served model under workloads instead"),
])
def test_fields_a_point_sets_itself_are_refused(tmp_path, text: str, expected: str) -> None:
    path, load = _load(tmp_path, text)
    with pytest.raises(UserError) as info:
        load()
    assert str(info.value) == f"{path}: {expected}"


def test_what_a_point_does_read(tmp_path) -> None:
    """The rates axis and a workload's own model field are what the points run with."""
    _, load = _load(tmp_path, "workloads: {label: {model: served}, m: {}}\nrates: [5, inf]\nloadtest: {" + URL + "}\n")
    spec = load()
    configs = [loadtest_config(p.workload, p.config, spec.loadtest, p.rate) for p in expand(spec)]
    assert [(c.model, c.request_rate) for c in configs] == [("served", 5.0), ("served", float("inf")),
                                                            ("m", 5.0), ("m", float("inf"))]
