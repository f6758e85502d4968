"""A top_p so small that float32 holds it as 0 (an OpenAI client may send 1e-300) keeps the most likely token, as
any top_p below that token's probability does: it dropped every token, and the draw took the vocabulary's last id
whatever the logits."""

from __future__ import annotations

import torch

from accelkit.serve.sampler import Sampler
from accelkit.serve.sampling import SamplingParams


def test_a_top_p_below_float32_keeps_the_most_likely_token():
    logits = torch.zeros(4, 16)
    logits[:, 5] = 4.0  # token 5 the most likely (about 0.78 of the mass), token 15 the vocabulary's last
    for top_p in (1e-300, 1e-46):
        params = [SamplingParams(top_p=top_p, seed=s) for s in range(4)]
        assert Sampler(torch.device("cpu"), seed=0)(logits, params, list(range(4))) == [5] * 4, top_p
        assert params[0].top_p == top_p  # (the request's value, as sent)
