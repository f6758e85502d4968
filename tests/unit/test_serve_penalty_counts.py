"""The penalties' token counts (outside the KV budget) are bounded by the step's batch, not by how many penalised
requests are alive, and freed when none is left — and stay exact while rows move between sequences."""

from __future__ import annotations

import random

import torch

from accelkit.serve.sampler import Sampler, TokenCounts, Uploader
from accelkit.serve.sampling import SamplingParams
from tests.unit.test_serve_sampler_features import Row  # what the sampler reads of a sequence

V = 50
CPU = torch.device("cpu")


def reference(row: Row) -> tuple[torch.Tensor, torch.Tensor]:
    out = torch.bincount(torch.tensor(row.token_ids[row.num_prompt_tokens :], dtype=torch.long), minlength=V)
    prompt = torch.zeros(V, dtype=torch.bool)
    prompt[row.token_ids[: row.num_prompt_tokens]] = True
    return out.float(), prompt


def test_rows_are_bounded_by_the_batch_while_many_penalised_requests_wait():
    """40 penalised sequences alive, 8 in each step (the others preempted or waiting): every one used to keep
    its row until it finished, so the slab grew with the requests alive (64 rows here, V floats each, never
    given back) instead of with the batch."""
    rng = random.Random(0)
    p = SamplingParams(frequency_penalty=0.5, repetition_penalty=1.2)
    seqs = [Row(i, p, [rng.randrange(V) for _ in range(rng.randint(1, 6))], 0) for i in range(40)]
    for s in seqs:
        s.num_prompt_tokens = len(s.token_ids)
    counts = TokenCounts(CPU, V)
    upload = Uploader(CPU)
    for step in range(30):
        batch = rng.sample(seqs, 8)
        got_out, got_prompt = counts.gather(batch, upload)
        for i, s in enumerate(batch):  # exact, whether the row was kept or rebuilt
            want_out, want_prompt = reference(s)
            torch.testing.assert_close(got_out[i], want_out)
            assert torch.equal(got_prompt[i], want_prompt)
            s.token_ids += [rng.randrange(V) for _ in range(1 + step % 2)]
        assert counts.output.shape[0] <= 16  # the batch of 8, rounded up to TokenCounts.ROW_CHUNK
    assert counts.num_bytes == counts.num_rows * V * TokenCounts.ROW_BYTES_PER_TOKEN > 0


def test_the_slab_is_freed_when_no_penalised_sequence_is_left():
    sampler = Sampler(CPU, seed=0)
    p = SamplingParams(presence_penalty=1.0)
    rows = [Row(i, p, [3, 4, i % V], 2) for i in range(20)]
    logits = torch.zeros(len(rows), V)
    sampler.process(logits, [p] * len(rows), rows)
    counts = sampler._counts
    assert counts is not None and counts.output.shape[0] >= 20
    for r in rows[:-1]:
        sampler.forget(r.seq_id)
    assert counts.output.shape[0] >= 20  # one is still running
    sampler.forget(rows[-1].seq_id)
    assert counts.output.shape[0] == counts.prompt.shape[0] == 0 and counts.num_bytes == 0
    again = Row(99, p, [3, 4, 7, 7], 2)  # and a new one starts from nothing
    got = sampler.process(torch.zeros(1, V), [p], [again])
    torch.testing.assert_close(got[0], -torch.nn.functional.one_hot(torch.tensor(7), V).float())
