"""A sweep layout's `nnodes` as YAML writes it: `nnodes: 2` is an integer there, and the launch's nnodes is text (N,
or MIN:MAX) — the file was refused "nnodes=2 is not valid; expected a string". An unquoted elastic `nnodes: 2:4`
is a base-60 integer to YAML 1.1 (124): it must stay 2:4, not become 124 nodes."""

from __future__ import annotations

import pytest

from accelkit.core import UserError
from accelkit.distributed.launch import DistConfig
from accelkit.sweep import SweepSpec, expand, load_sweep

HEAD = "name: t\nkind: bench\nworkloads: {resnet: {size: tiny}}\nbench: {device: cpu}\n"


def _layout(tmp_path, layout: str) -> dict:
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + f"layouts: [{layout}]\n")
    (point,) = expand(load_sweep(path))
    return point.layout


def test_an_integer_node_count_is_taken(tmp_path):
    layout = _layout(tmp_path, "{nproc_per_node: 2, nnodes: 2, node_rank: 0, rdzv_endpoint: 'node0:29400'}")
    assert layout["nnodes"] == "2"
    dist = DistConfig.from_dict(layout)  # what the point launches
    assert dist.nnodes_range == (2, 2) and dist.rendezvous == "static"


def test_an_unquoted_elastic_range_stays_a_range(tmp_path):
    layout = _layout(tmp_path, "{nproc_per_node: 2, nnodes: 2:4, rdzv_endpoint: 'head:29400'}")
    assert layout["nnodes"] == "2:4"
    assert DistConfig.from_dict(layout).nnodes_range == (2, 4)


def test_a_node_count_given_in_python_is_taken_too():
    spec = SweepSpec(name="t", workloads={"resnet": {"size": "tiny"}}, bench={"device": "cpu"},
                     layouts=({"nproc_per_node": 2, "nnodes": 1},))
    assert spec.layouts == ({"nproc_per_node": 2, "nnodes": "1"},)


@pytest.mark.parametrize(("value", "needle"), [
    ("true", "layouts[0]: nnodes=True is not valid; expected a string"),  # a bool is no count
    ("0", "layouts[0]: nnodes='0' is out of range; expected 1 <= MIN <= MAX"),
])
def test_a_bad_node_count_is_still_refused_by_field(tmp_path, value, needle):
    with pytest.raises(UserError) as info:
        _layout(tmp_path, f"{{nproc_per_node: 2, nnodes: {value}, rdzv_endpoint: 'head:29400'}}")
    assert needle in str(info.value), info.value
