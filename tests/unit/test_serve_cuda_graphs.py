"""Batch-size buckets of the decode CUDA graphs (the capture itself is tested in tests/gpu)."""

import itertools

import pytest

from accelkit.serve.cuda_graphs import DecodeGraphs, graph_batch_sizes


@pytest.mark.parametrize("max_size", [1, 3, 8, 64, 100, 256, 512])
def test_bucket_sizes_cover_every_batch_with_little_padding(max_size):
    sizes = graph_batch_sizes(max_size)
    assert sizes == sorted(set(sizes)) and sizes[0] == 1 and sizes[-1] == max_size
    assert all(b - a <= 16 for a, b in itertools.pairwise(sizes))
    graphs = DecodeGraphs(lambda size, meta: None, lambda size: None, max_batch_size=max_size, capture=False)
    for n in range(1, max_size + 1):
        bucket = graphs.bucket(n)
        assert bucket in sizes and bucket >= n
        assert bucket - n < max(8, n // 4 + 1)  # padding stays small relative to the batch
    assert graphs.bucket(max_size + 1) is None  # larger batches run eagerly


def test_256_gives_23_graphs():
    assert graph_batch_sizes(256)[:12] == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80]
    assert len(graph_batch_sizes(256)) == 23


def test_without_capture_the_forward_runs_eagerly():
    calls = []
    graphs = DecodeGraphs(lambda size, meta: calls.append((size, meta)) or size, lambda size: "meta",
                          max_batch_size=4, capture=False)
    graphs.capture_all()  # nothing to capture
    assert graphs.run(4, "m") == 4 and calls == [(4, "m")]


def test_capture_rules_flag_what_a_capture_refuses_and_nothing_else():
    import torch

    from tests.integration.graph_capture import CaptureRules

    x = torch.randn(6)
    refused = {
        "item": lambda: x.sum().item(), "int": lambda: int(x[0] > 0), "tolist": lambda: x.tolist(),
        "numpy": lambda: x.numpy(), "mask": lambda: x[x > 0], "host data": lambda: torch.tensor([1, 2]),
        "nonzero": lambda: (x > 0).nonzero(), "repeat": lambda: x[:3].repeat_interleave(torch.arange(3) + 1),
    }
    for name, region in refused.items():
        with torch.inference_mode(), CaptureRules() as rules:
            region()
        assert rules.violations, name
    with torch.inference_mode(), CaptureRules() as rules:
        (x * 2).softmax(0)[torch.arange(3)].index_add_(0, torch.arange(2), x[:2])
        x[:3].repeat_interleave(torch.arange(3) + 1, output_size=6)
    assert rules.violations == []
    x.tolist()  # after the block: Tensor.tolist is itself again
    assert rules.violations == []
