"""A decode step's CPU hot paths against what they replace: the greedy pick through ``max`` (exactly ``argmax``),
the SDPA backend's gather into reused scratch buffers (exactly a fresh gather), and the inverse-transform draw
(each token at its probability, never one of probability 0)."""

from __future__ import annotations

import pytest
import torch

from accelkit.serve.kv_cache import GatherScratch, KVCache
from accelkit.serve.sampler import greedy_ids, inverse_transform


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(1, 9), (7, 8192), (64, 32000), (3, 151936)])
def test_greedy_ids_are_argmax_ties_nan_and_all_minus_inf_included(shape, dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 3, shape, generator=gen).to(dtype)  # many ties: argmax takes the first
    assert torch.equal(greedy_ids(x), x.argmax(dim=-1))
    x[0, 2], x[0, 5] = float("nan"), float("nan")  # NaN wins, the first one
    assert greedy_ids(x)[0].item() == 2
    x[-1] = float("-inf")
    assert torch.equal(greedy_ids(x), x.argmax(dim=-1))


def test_gather_into_scratch_equals_a_fresh_gather_and_reuses_its_memory():
    cache = KVCache(num_layers=2, num_blocks=32, block_size=4, num_kv_heads=2, head_dim=8, dtype=torch.float32,
                    device=torch.device("cpu"))
    gen = torch.Generator().manual_seed(1)
    for layer in range(2):
        k, v = (torch.randn(32 * 4, 2, 8, generator=gen) for _ in range(2))
        cache.write(layer, torch.arange(32 * 4), k, v)
    scratch = GatherScratch()
    big = torch.randperm(32, generator=gen)[:12].view(3, 4)
    small = torch.randperm(32, generator=gen)[:5]
    pointers = set()
    for layer, ids in [(0, big), (1, small), (1, big), (0, small)]:
        want_k, want_v = cache.gather(layer, ids)
        got_k, got_v = cache.gather(layer, ids, scratch)
        assert got_k.shape == want_k.shape == (*ids.shape[:-1], ids.shape[-1] * 4, 2, 8)
        assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)
        pointers.add((got_k.data_ptr(), got_v.data_ptr()))
    assert len(pointers) == 1  # the first, largest gather sized the buffers; the rest reused them


def test_inverse_transform_draws_each_token_at_its_probability_and_never_a_zero_one():
    probs = torch.tensor([[0.0, 0.1, 0.0, 0.6, 0.3, 0.0], [0.5, 0.0, 0.0, 0.0, 0.0, 0.5]])
    gen = torch.Generator().manual_seed(3)
    n = 40_000
    counts = torch.zeros_like(probs)
    for _ in range(n // 2_000):
        u = torch.rand(2_000 * 2, 1, generator=gen)
        ids = inverse_transform(probs.repeat(2_000, 1), u).view(2_000, 2)
        for row in range(2):
            counts[row] += torch.bincount(ids[:, row], minlength=6)
    assert counts[probs == 0].sum() == 0
    assert (counts / n - probs).abs().max() < 0.01  # ~4 standard errors at n = 40,000


def test_inverse_transform_edges_stay_on_tokens_with_probability():
    probs = torch.tensor([[0.0, 0.25, 0.75, 0.0, 0.0]] * 3 + [[float("nan")] * 5])
    u = torch.tensor([[0.0], [1.0 - 2**-24], [0.2499], [0.5]])  # the bottom, the top, just under a boundary; a NaN row
    ids = inverse_transform(probs.clone(), u).tolist()
    assert ids[:3] == [1, 2, 1]
    assert 0 <= ids[3] < 5
