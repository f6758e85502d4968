"""The ``--rdzv-endpoint`` HOST and PORT, checked before torchrun starts (found in a hunt): a HOST that does not
resolve on this node made torchrun retry its connection with a warning every few seconds for minutes (and a name IDNA
cannot encode, ``a..b``, was an internal error after the quick probe); a PORT of non-ASCII digits was a bare
``invalid literal for int()`` (``'²'``) or torchrun's traceback, exit 1 (``'٢٩٤٠٠'``)."""

from __future__ import annotations

import pytest

from accelkit.core import UserError
from accelkit.distributed.launch import DistConfig, check_endpoint_host, launch

#: RFC 6761: ``.invalid`` never resolves; a 64-character label is past DNS's 63 (IDNA refuses it before any lookup)
UNRESOLVED = ("nosuchhost.invalid", "a..b", "x" * 64 + ".example")


@pytest.mark.parametrize("host", UNRESOLVED)
@pytest.mark.parametrize("layout", [{"nnodes": "2", "node_rank": 1}, {"nnodes": "2:4"}], ids=["static", "c10d"])
def test_a_host_this_node_cannot_resolve_is_refused_in_one_line(host, layout):
    config = DistConfig(nproc_per_node=2, rdzv_endpoint=f"{host}:29400", **layout)
    with pytest.raises(UserError, match=rf"^--rdzv-endpoint {host}:29400: the host '{host}' does not resolve on this "
                                        r"node \(.+\), and torchrun would keep retrying it .* host name or IP address"):
        check_endpoint_host(config)
    with pytest.raises(UserError, match=r"does not resolve on this node"):  # the launcher: before torchrun starts
        launch({"task": "never run"}, config)


def test_the_bench_refuses_it_before_its_quick_probe():
    from accelkit.bench.runner import BenchConfig
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.distributed.bench_launch import run_distributed_bench

    with pytest.raises(UserError, match="^--rdzv-endpoint a..b:29400: the host 'a..b' does not resolve"):
        run_distributed_bench(make_workload("resnet", {"size": "tiny"}), [Variant()], BenchConfig(device="cpu"),
                              DistConfig(nproc_per_node=2, nnodes="2", rdzv_endpoint="a..b:29400"))


@pytest.mark.parametrize("endpoint", ["127.0.0.1:29400", "localhost:29400", "[::1]:29400"])
def test_a_host_that_resolves_is_taken(endpoint):
    check_endpoint_host(DistConfig(nproc_per_node=2, nnodes="2", node_rank=1, rdzv_endpoint=endpoint))
    check_endpoint_host(DistConfig(nproc_per_node=2))  # one node, no endpoint: nothing to resolve


@pytest.mark.parametrize("port", ["²", "٢٩٤٠٠", "２９４００"])
def test_a_port_of_non_ascii_digits_is_refused_naming_the_flag(port):
    with pytest.raises(ValueError, match=rf"^rdzv_endpoint='host:{port}' is not valid; expected HOST:PORT$"):
        DistConfig(nproc_per_node=2, nnodes="2", node_rank=1, rdzv_endpoint=f"host:{port}")
