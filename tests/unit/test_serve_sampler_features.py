"""The sampler's penalties, min-p, logit bias, allowed token ids, min_tokens and logprobs, each against a reference
computed here in plain torch on the same logits (vLLM's and OpenAI's definitions)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from accelkit.serve.sampler import Sampler
from accelkit.serve.sampling import SamplingParams

V = 50


@dataclass
class Row:  # what the sampler reads of a sequence
    seq_id: int
    params: SamplingParams
    token_ids: list[int]
    num_prompt_tokens: int
    stop_token_ids: frozenset[int] = frozenset()
    guide: object | None = None  # (structured outputs: tests/integration/test_serve_structured_outputs.py)
    bad_words_ids: tuple[tuple[int, ...], ...] = ()


def _rows(params: list[SamplingParams], histories: list[tuple[list[int], list[int]]]) -> list[Row]:
    return [Row(i, p, prompt + out, len(prompt), frozenset(p.stop_token_ids))
            for i, (p, (prompt, out)) in enumerate(zip(params, histories, strict=True))]


def _histories(n: int, gen: torch.Generator) -> list[tuple[list[int], list[int]]]:
    return [(torch.randint(0, V, (7,), generator=gen).tolist(), torch.randint(0, V, (9,), generator=gen).tolist())
            for _ in range(n)]


def _reference_penalties(logits: torch.Tensor, p: SamplingParams, prompt: list[int], out: list[int]) -> torch.Tensor:
    x = logits.clone()
    counts = torch.bincount(torch.tensor(out, dtype=torch.long), minlength=V).float()
    seen_anywhere = torch.zeros(V, dtype=torch.bool)
    seen_anywhere[prompt + out] = True
    for t in range(V):  # one token at a time, as the definitions read
        if seen_anywhere[t]:
            x[t] = x[t] / p.repetition_penalty if x[t] > 0 else x[t] * p.repetition_penalty
    return x - p.frequency_penalty * counts - p.presence_penalty * (counts > 0).float()


def test_penalties_match_vllms_definition_row_by_row():
    gen = torch.Generator().manual_seed(0)
    params = [
        SamplingParams(presence_penalty=0.7),
        SamplingParams(frequency_penalty=-0.4),
        SamplingParams(repetition_penalty=1.8),
        SamplingParams(presence_penalty=1.5, frequency_penalty=0.3, repetition_penalty=0.6),
        SamplingParams(),  # no penalty: untouched, while its neighbours are penalised
    ]
    histories = _histories(len(params), gen)
    logits = torch.randn(len(params), V, generator=gen) * 3
    before = logits.clone()
    got = Sampler(torch.device("cpu"), seed=0).process(logits, params, _rows(params, histories))
    for i, (p, (prompt, out)) in enumerate(zip(params, histories, strict=True)):
        torch.testing.assert_close(got[i], _reference_penalties(logits[i], p, prompt, out))
    assert torch.equal(logits, before)  # the model's logits (a CUDA graph's buffer) are not written


def test_counts_follow_a_growing_sequence_and_a_reused_slot_starts_empty():
    """The counts are kept across steps: a token appended since the last step is counted once; a finished
    sequence's slot, reused by a new one, holds nothing of it."""
    sampler = Sampler(torch.device("cpu"), seed=0)
    p = SamplingParams(frequency_penalty=1.0)
    row = Row(1, p, [3, 4, 5], 3)
    zeros = torch.zeros(1, V)
    for step in range(4):
        got = sampler.process(zeros, [p], [row])
        expected = -torch.bincount(torch.tensor(row.token_ids[3:], dtype=torch.long), minlength=V).float()
        torch.testing.assert_close(got[0], expected)
        row.token_ids += [7, 7] if step % 2 else [8]  # sometimes two tokens between steps
    sampler.forget(1)
    fresh = Row(2, p, [3, 4, 5, 9], 3)
    torch.testing.assert_close(sampler.process(zeros, [p], [fresh])[0], -torch.nn.functional.one_hot(
        torch.tensor(9), V).float())


def test_logit_bias_adds_to_the_logits_and_min_tokens_masks_the_stop_ids_until_reached():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(3, V, generator=gen)
    params = [SamplingParams(logit_bias={2: 5.0, 40: -100.0}), SamplingParams(min_tokens=3, stop_token_ids=(6, 9)),
              SamplingParams(min_tokens=2, stop_token_ids=(6,))]
    rows = [Row(0, params[0], [1, 2], 1), Row(1, params[1], [1, 2, 3], 1, frozenset({6, 9, 11})),  # 11: the EOS
            Row(2, params[2], [1, 2, 3], 1, frozenset({6}))]  # 2 generated: min_tokens=2 reached
    got = Sampler(torch.device("cpu"), seed=0).process(logits, params, rows)
    expected = logits.clone()
    expected[0, 2] += 5.0
    expected[0, 40] -= 100.0
    expected[1, [6, 9, 11]] = float("-inf")
    torch.testing.assert_close(got, expected)


def test_greedy_rows_take_the_argmax_of_the_processed_logits():
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(4, V, generator=gen)
    top = logits.argmax(-1)
    params = [SamplingParams.greedy(logit_bias={int(top[0]): -100.0}), SamplingParams.greedy(presence_penalty=2.0),
              SamplingParams.greedy(), SamplingParams(temperature=0.7, seed=3, logit_bias={5: 100.0})]
    rows = [Row(0, params[0], [1], 1), Row(1, params[1], [1, int(top[1])], 1), Row(2, params[2], [1], 1),
            Row(3, params[3], [1], 1)]
    tokens = Sampler(torch.device("cpu"), seed=0)(logits, params, [0, 1, 2, 3], rows)
    without = logits[0].clone()
    without[top[0]] -= 100
    assert tokens[0] == int(without.argmax()) != int(top[0])
    penalised = logits[1].clone()
    penalised[top[1]] -= 2.0
    assert tokens[1] == int(penalised.argmax())
    assert tokens[2] == int(top[2])
    assert tokens[3] == 5  # +100 outweighs any other logit at temperature 0.7


def test_allowed_token_ids_leave_every_other_token_at_minus_inf_in_their_rows_only():
    gen = torch.Generator().manual_seed(8)
    logits = torch.randn(4, V, generator=gen)
    before = logits.clone()
    params = [SamplingParams(allowed_token_ids=(3, 17, 40)), SamplingParams(logit_bias={2: 1.0}),
              SamplingParams(allowed_token_ids=(9,), logit_bias={9: -5.0, 10: 5.0}), SamplingParams(allowed_token_ids=(3,))]
    rows = [Row(i, p, [1, 2], 1) for i, p in enumerate(params)]
    got = Sampler(torch.device("cpu"), seed=0).process(logits, params, rows)
    expected = torch.full_like(logits, float("-inf"))
    expected[0, [3, 17, 40]] = logits[0, [3, 17, 40]]
    expected[1] = logits[1]
    expected[1, 2] += 1.0
    expected[2, 9] = logits[2, 9] - 5.0  # (the bias of a token left out changes nothing: it stays out)
    expected[3, 3] = logits[3, 3]
    torch.testing.assert_close(got, expected)
    assert torch.equal(logits, before)  # the model's logits (a CUDA graph's buffer) are not written


def test_greedy_and_random_rows_pick_only_allowed_token_ids():
    """Greedy rows whose argmax is left out, and 2,000 random rows at temperature 5 (every token likely)."""
    gen = torch.Generator().manual_seed(9)
    logits = torch.randn(2000, V, generator=gen)
    top = logits.argmax(-1)
    allowed = tuple(t for t in range(0, V, 7) if t != int(top[0]))
    params = [SamplingParams.greedy(allowed_token_ids=allowed),
              *(SamplingParams(temperature=5.0, seed=i, allowed_token_ids=allowed) for i in range(1999))]
    rows = [Row(i, p, [1], 1) for i, p in enumerate(params)]
    tokens = Sampler(torch.device("cpu"), seed=0)(logits, params, list(range(2000)), rows)
    reference = logits[0].clone()
    reference[[t for t in range(V) if t not in allowed]] = float("-inf")
    assert tokens[0] == int(reference.argmax()) != int(top[0])
    assert set(tokens) == set(allowed)  # all of them, and nothing else


def test_an_allowed_mask_is_made_once_per_request_and_forgotten_with_it():
    sampler = Sampler(torch.device("cpu"), seed=0)
    p = SamplingParams.greedy(allowed_token_ids=(4, 5))
    logits = torch.zeros(1, V)
    logits[0, 5] = 1.0
    for _ in range(3):
        assert sampler(logits, [p], [7], [Row(7, p, [1], 1)]) == [5]
    mask = sampler._disallowed[7][1]
    sampler(logits, [p], [7], [Row(7, p, [1], 1)])
    assert sampler._disallowed[7][1] is mask  # the same tensor: the ids went to the device once
    other = p.replace(allowed_token_ids=(4,))  # a seq_id seen with other params gets its own mask
    assert sampler(logits, [other], [7], [Row(7, other, [1], 1)]) == [4]
    sampler.forget(7)
    assert 7 not in sampler._disallowed


def test_min_p_never_samples_a_token_under_its_threshold():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.12, 0.08] + [0.0] * (V - 4)]) + 1e-12).repeat(2000, 1)
    p = SamplingParams(min_p=0.2)  # threshold 0.1: tokens 0..2 stay, token 3 (0.08) goes
    rows = [Row(i, p, [1], 1) for i in range(2000)]
    tokens = Sampler(torch.device("cpu"), seed=0)(logits, [p] * 2000, list(range(2000)), rows)
    assert set(tokens) == {0, 1, 2}


@pytest.mark.parametrize("k", [0, 1, 5])
def test_logprobs_are_the_raw_log_softmax_and_its_top_k(k):
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(3, V, generator=gen)
    params = [SamplingParams.greedy(logprobs=k, presence_penalty=2.0), SamplingParams(seed=5, logprobs=k),
              SamplingParams(seed=6)]
    rows = [Row(i, p, [1, 2, 3], 1) for i, p in enumerate(params)]
    sampler = Sampler(torch.device("cpu"), seed=0)
    tokens, logprobs = sampler.read(sampler.launch(logits, params, [0, 1, 2], rows))
    assert logprobs is not None
    reference = torch.log_softmax(logits.double(), dim=-1)
    for i in range(3):
        chosen, top, rank = logprobs[i]
        assert chosen == pytest.approx(float(reference[i, tokens[i]]), abs=1e-5)
        assert rank == 1 + int((reference[i] > reference[i, tokens[i]]).sum())  # the sampled token's place too
        values, ids = reference[i].topk(k)
        assert [t for t, _ in top] == ids.tolist()
        assert [lp for _, lp in top] == pytest.approx(values.tolist(), abs=1e-5)


def test_a_seeded_row_samples_the_same_tokens_whatever_shares_its_batch():
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(3, V, generator=gen)
    seeded = SamplingParams(seed=42, presence_penalty=0.5, min_p=0.05, logprobs=2)
    alone = Sampler(torch.device("cpu"), seed=0)
    crowd = Sampler(torch.device("cpu"), seed=99)
    others = [SamplingParams(frequency_penalty=1.0), SamplingParams(logit_bias={1: 3.0})]
    for _ in range(5):
        a = alone(logits[:1], [seeded], [0], [Row(0, seeded, [1, 2], 1)])
        b = crowd(logits[[1, 0, 2]], [others[0], seeded, others[1]], [5, 0, 6],
                  [Row(5, others[0], [3], 1), Row(0, seeded, [1, 2], 1), Row(6, others[1], [4], 1)])
        assert a == [b[1]]


@pytest.mark.parametrize("k", [0, 3])
def test_prompt_logprob_ranks_are_each_tokens_place_in_the_sorted_vocabulary(k):
    """``pack_logprobs``: per row the token's logprob, its top k and its rank = 1 + the tokens
    strictly more likely (the argmax is 1; ties share the better rank), checked against a sort of the row."""
    gen = torch.Generator().manual_seed(9)
    logits = torch.randn(6, V, generator=gen)
    logits[5, :4] = 10.0  # four tokens tied at the top of row 5
    reference = torch.log_softmax(logits, dim=-1)
    order = reference.argsort(dim=-1, descending=True)
    tokens = torch.tensor([int(order[0, 0]), int(order[1, 1]), int(order[2, 7]), int(order[3, V - 1]), 13, 2])
    rows = Sampler.read_ranked(Sampler.pack_logprobs(logits, tokens, k))
    assert len(rows) == 6
    for i, (chosen, top, rank) in enumerate(rows):
        row, token = reference[i], int(tokens[i])
        assert chosen == pytest.approx(float(row[token]), abs=1e-6)
        assert rank == 1 + sum(float(v) > float(row[token]) for v in row)  # the definition, counted in Python
        values, ids = row.topk(k)
        assert [t for t, _ in top] == ids.tolist()
        assert [lp for _, lp in top] == pytest.approx(values.tolist(), abs=1e-6)
    assert [rank for _, _, rank in rows[:4]] == [1, 2, 8, V]  # the place in the sorted row, past k too
    assert rows[5][2] == 1  # one of four tied at the top
    # read() unpacks the same rows, with the ids
    ids, read = Sampler.read(Sampler.pack_logprobs(logits, tokens, k))
    assert ids == tokens.tolist() and read == rows



def test_random_rows_sample_the_softmax_distribution():
    """The exponential race with its noise made from uniform draws (-log(1 - U), in place of torch's slow
    ``exponential_``) still samples softmax(logits / T): 40,000 rows of one 4-token distribution, each token's
    frequency within 4 standard errors of its probability, at two temperatures and under top-k."""
    logits = torch.tensor([2.0, 1.3, 0.5, -1.0])
    n = 40_000
    sampler = Sampler(torch.device("cpu"), seed=0)
    for params, probs in [
        (SamplingParams(temperature=1.0), logits.softmax(-1)),
        (SamplingParams(temperature=0.5), (logits / 0.5).softmax(-1)),
        (SamplingParams(temperature=1.0, top_k=2), torch.cat([logits[:2].softmax(-1), torch.zeros(2)])),
    ]:
        tokens = sampler(logits.repeat(n, 1), [params] * n, list(range(n)))
        freq = torch.bincount(torch.tensor(tokens), minlength=4).double() / n
        se = (probs.double() * (1 - probs.double()) / n).sqrt()
        assert ((freq - probs.double()).abs() <= 4 * se + 1e-12).all(), (params, freq, probs)


def test_a_seeded_row_gives_the_same_tokens_whatever_shares_its_batch():
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(1))
    seeded = SamplingParams(temperature=1.0, seed=1234)
    alone = [Sampler(torch.device("cpu"), seed=s)(logits[:1], [seeded], [7])[0] for s in (0, 1)]
    crowded = Sampler(torch.device("cpu"), seed=2)(logits, [SamplingParams(temperature=1.0), seeded,
                                                            SamplingParams(temperature=0.7)], [1, 7, 3])
    assert alone[0] == alone[1]
    crowded_alone = Sampler(torch.device("cpu"), seed=5)(logits[1:2], [seeded], [7])[0]
    assert crowded[1] == crowded_alone


def test_scratch_logits_are_masked_in_place_and_logprobs_stay_those_of_the_raw_logits():
    """``launch(scratch=True)``: the runner's fresh logits take the masks and biases themselves (no (N, V) copy);
    the sampled tokens are the same as from a copy, and a row asking for logprobs keeps the logits as they came."""
    gen = torch.Generator().manual_seed(11)
    logits = torch.randn(3, V, generator=gen)
    params = [SamplingParams.greedy(logit_bias={3: 50.0}), SamplingParams.greedy(allowed_token_ids=(7, 9)),
              SamplingParams.greedy(min_tokens=2, stop_token_ids=[int(logits[2].argmax())])]
    rows = [Row(i, p, [1, 2], 1, frozenset(p.stop_token_ids)) for i, p in enumerate(params)]
    copied = logits.clone()
    expected = Sampler(torch.device("cpu"), seed=0).read(Sampler(torch.device("cpu"), seed=0).launch(
        copied, params, [0, 1, 2], rows))[0]
    assert torch.equal(copied, logits)  # (not scratch: left as it came)
    scratch = logits.clone()
    sampler = Sampler(torch.device("cpu"), seed=0)
    assert sampler.read(sampler.launch(scratch, params, [0, 1, 2], rows, scratch=True))[0] == expected
    assert expected[:2] == [3, 9] and expected[2] != int(logits[2].argmax())  # (each row's processing took)
    assert scratch[0, 3] == logits[0, 3] + 50.0 and torch.isinf(scratch[1]).sum() == V - 2  # written in place
    with_logprobs = [p.replace(logprobs=2) for p in params]
    raw = logits.clone()
    tokens, logprobs = sampler.read(sampler.launch(raw, with_logprobs, [0, 1, 2], rows, scratch=True))
    assert tokens == expected and torch.equal(raw, logits) and logprobs is not None
    reference = torch.log_softmax(logits.double(), dim=-1)
    for i in range(3):
        assert logprobs[i][0] == pytest.approx(float(reference[i, tokens[i]]), abs=1e-5)


def test_the_gpu_race_never_picks_a_token_of_probability_zero_and_draws_from_p() -> None:
    """The GPU draw, ``argmax(p / E)``, ``E`` made from uniform noise: CUDA's ``uniform_`` returns exactly 0 now and
    then, and ``E = -log(1 - 0) = 0`` made ``p / E`` +inf (or NaN where p is 0), so that entry won whatever its
    probability — past top-k and every mask (found in review). Run here on the CPU with the GPU path's code: noise
    with zeros planted never picks a masked token, and the race's draws follow p."""
    from accelkit.serve.sampler import _exponential_, greedy_ids

    probs = torch.zeros(4096, V)
    probs[:, 3], probs[:, 7] = 0.25, 0.75  # (every other token masked: probability 0)
    noise = torch.rand(4096, V)
    noise[torch.rand(4096, V) < 0.05] = 0.0  # (planted: far more often than curand's 1 in 2^25)
    drawn = greedy_ids(probs.clone().div_(_exponential_(noise)))
    assert set(drawn.tolist()) <= {3, 7}
    only = torch.zeros(64, V)
    only[:, 5] = 1.0  # (top_k=1: one token left) — its own draw a 0
    noise = torch.rand(64, V)
    noise[:, 5] = 0.0
    assert set(greedy_ids(only.div_(_exponential_(noise))).tolist()) == {5}
    torch.manual_seed(0)
    drawn = greedy_ids(probs.clone().div_(_exponential_(torch.rand(4096, V))))
    share = (drawn == 7).double().mean().item()
    assert abs(share - 0.75) <= 4 * (0.75 * 0.25 / 4096) ** 0.5, share


def test_bad_words_mask_a_words_last_token_where_the_output_ends_with_the_rest_of_it() -> None:
    """vLLM's rule: a one-token word is masked always; a longer word's last token only where the output's last
    tokens are the word's first ones (the prompt does not count); rows without bad words are untouched."""
    params = [SamplingParams(bad_words=("x",))] * 3 + [SamplingParams()]
    words = ((7,), (3, 4, 5))
    rows = [Row(0, params[0], [1, 2, 3, 4], 2, bad_words_ids=words),  # output 3 4: the word's start → 5 masked
            Row(1, params[1], [3, 4, 9], 3, bad_words_ids=words),  # 3 4 in the prompt only: 5 stays
            Row(2, params[2], [1, 2, 4], 2, bad_words_ids=words),  # output 4, not 3 4: 5 stays
            Row(3, params[3], [1, 3, 4], 1)]  # no bad words
    logits = torch.zeros(4, V)
    x = Sampler(torch.device("cpu"), seed=0).process(logits, params, rows)
    masked = [set(torch.nonzero(torch.isinf(row)).flatten().tolist()) for row in x]
    assert masked == [{5, 7}, {7}, {7}, set()]
