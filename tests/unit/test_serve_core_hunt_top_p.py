"""top_p as vLLM and transformers apply it: the smallest set of most likely tokens whose mass reaches top_p (a token
goes once the mass before it does), and nothing at all cut from a row without top_p, whatever its neighbours ask."""

from __future__ import annotations

import torch

from accelkit.serve.sampler import Sampler, nucleus_drop
from accelkit.serve.sampling import SamplingParams


def test_top_p_keeps_the_smallest_set_whose_mass_reaches_it():
    # four equally likely tokens (0.25 each, exactly): two of them reach top_p=0.5, as vLLM's and HF's rule keeps
    # (the mass before the third is 0.5, already enough); a third kept made the output 50% more varied than asked
    logits = torch.full((400, 8), float("-inf"))
    logits[:, :4] = 0.0
    tokens = Sampler(torch.device("cpu"), seed=0)(logits, [SamplingParams(top_p=0.5)] * 400, list(range(400)))
    assert len(set(tokens)) == 2 and set(tokens) < {0, 1, 2, 3}
    # two equally likely tokens and top_p=0.5: one is enough
    logits[:, 2:4] = float("-inf")
    tokens = Sampler(torch.device("cpu"), seed=0)(logits, [SamplingParams(top_p=0.5)] * 400, list(range(400)))
    assert len(set(tokens)) == 1


def test_a_row_without_top_p_loses_no_token_beside_one_with_it():
    # a peaked row over a large vocabulary: its float32 running sum passes 1.0 in the tail, and with the rule
    # "drop where the mass before > top_p" a top_p=1.0 row lost ~90% of its vocabulary once a neighbour used top_p
    gen = torch.Generator().manual_seed(0)
    probs = (torch.randn(2, 32_000, generator=gen) * 8).softmax(-1).sort(dim=-1, descending=True).values
    drop = nucleus_drop(probs, torch.tensor([1.0, 0.9]))
    assert not drop[0].any()
    assert drop[1].any() and not drop[1, 0]  # the neighbour's nucleus is cut, its most likely token kept
