"""The CPU backend's compiled decode kernel against a float64 attention over the same paged cache (GQA, sliding
window, block sizes that do and do not divide the lengths, a query whose rows are not contiguous), and how the
engine chooses it: ``auto`` takes it on a CPU where it can run and gives way to ``sdpa`` where it cannot."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch

from accelkit.serve.attention import cpu as cpu_attention
from accelkit.serve.attention import make_attention_backend, resolve_attention_backend
from accelkit.serve.attention.base import StepTensors
from accelkit.serve.kv_cache import Int8KVCache, KVCache

CPU = torch.device("cpu")

# without a C compiler the engine runs sdpa instead (tested below too); CI installs one (.ci/run)
needs_cc = pytest.mark.skipif(
    shutil.which(os.environ.get("CC") or "cc") is None and not os.environ.get("CI"),
    reason="no C compiler here to build the CPU decode kernel (`apt-get install gcc`; .ci/run installs it)",
)


def _step(lens: list[int], tables: np.ndarray, block_size: int) -> StepTensors:
    n = len(lens)
    seq_lens = np.asarray(lens, dtype=np.int64)
    query_start = np.arange(n + 1, dtype=np.int64)
    slots = torch.tensor([int(tables[i, (ln - 1) // block_size]) * block_size + (ln - 1) % block_size
                          for i, ln in enumerate(lens)])
    return StepTensors(num_tokens=n, num_seqs=n, num_decodes=n, max_query_len=0, seq_lens_np=seq_lens,
                       query_start_np=query_start, block_tables_np=tables, positions=torch.tensor(seq_lens - 1),
                       slot_mapping=slots, seq_lens=torch.from_numpy(seq_lens), query_start=torch.from_numpy(query_start),
                       block_tables=torch.from_numpy(tables))


def _reference(q: torch.Tensor, cache: KVCache, tables: np.ndarray, lens: list[int], window: int | None) -> torch.Tensor:
    rep = q.shape[1] // cache.num_kv_heads
    out = []
    for i, ln in enumerate(lens):
        slots = [int(tables[i, t // cache.block_size]) * cache.block_size + t % cache.block_size for t in range(ln)]
        k = cache.k[0].reshape(-1, cache.num_kv_heads, cache.head_dim)[slots].double().repeat_interleave(rep, 1)
        v = cache.v[0].reshape(-1, cache.num_kv_heads, cache.head_dim)[slots].double().repeat_interleave(rep, 1)
        scores = torch.einsum("hd,thd->ht", q[i].double(), k) * cache.head_dim**-0.5
        if window is not None:
            scores[:, : max(0, ln - window)] = float("-inf")
        out.append(torch.einsum("ht,thd->hd", scores.softmax(-1), v).reshape(-1))
    return torch.stack(out)


@needs_cc
@pytest.mark.parametrize(("heads", "block_size", "window"), [((4, 4), 4, None), ((8, 2), 4, None), ((6, 2), 5, 7),
                                                            ((4, 1), 16, None)])
def test_the_decode_kernel_matches_float64_attention_over_the_paged_cache(heads, block_size, window):
    assert cpu_attention.decode_kernel()[1] is None, cpu_attention.decode_kernel()[1]
    num_heads, num_kv_heads = heads
    head_dim, num_blocks = 16, 96
    cache = KVCache(num_layers=1, num_blocks=num_blocks, block_size=block_size, num_kv_heads=num_kv_heads,
                    head_dim=head_dim, dtype=torch.float32, device=CPU)
    gen = torch.Generator().manual_seed(7)
    slots = num_blocks * block_size
    cache.write(0, torch.arange(slots), *(torch.randn(slots, num_kv_heads, head_dim, generator=gen) for _ in range(2)))
    lens = [1, 3, block_size, block_size + 1, 29, 40]
    order = torch.randperm(num_blocks, generator=gen).tolist()
    tables = np.zeros((len(lens), 12), dtype=np.int64)  # wider than needed, as the runner's is
    used = 0
    for i, ln in enumerate(lens):
        nb = -(-ln // block_size)
        tables[i, :nb] = order[used : used + nb]
        used += nb
    backend = make_attention_backend("cpu", cache, num_heads=num_heads, head_dim=head_dim, sliding_window=window)
    assert backend.name == "cpu"
    meta = backend.prepare(_step(lens, tables, block_size))
    # q as the model makes it: a column slice of a wider projection (rows not contiguous)
    qkv = torch.randn(len(lens), (num_heads + 2 * num_kv_heads) * head_dim, generator=gen)
    q = qkv[:, : num_heads * head_dim].view(len(lens), num_heads, head_dim)
    got = backend._decodes(q, 0, meta)[0]
    want = _reference(q, cache, tables, lens, window)
    assert (got.double() - want).abs().max().item() < 1e-5


@needs_cc
def test_the_kernel_starts_no_more_threads_than_the_step_has_sequences():
    """One work item per sequence: a team of torch's whole thread count for one sequence only adds threads to wake
    and a barrier to wait at (on a busy machine, for a thread taken off its core)."""
    block_size, lens = 4, [5, 9, 2]
    cache = KVCache(num_layers=1, num_blocks=8, block_size=block_size, num_kv_heads=2, head_dim=16,
                    dtype=torch.float32, device=CPU)
    tables = np.arange(9, dtype=np.int64).reshape(3, 3) % 8
    backend = make_attention_backend("cpu", cache, num_heads=4, head_dim=16, sliding_window=None)
    asked: list[int] = []
    kernel = backend._kernel

    def counting(*args):  # the real kernel, its last argument (the team's size) noted
        asked.append(args[-1])
        return kernel(*args)

    backend._kernel = counting
    threads = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        for n in (1, 3):
            meta = backend.prepare(_step(lens[:n], tables[:n], block_size))
            out = backend._decodes(torch.randn(n, 4, 16), 0, meta)[0]
            assert out.shape == (n, 64) and torch.isfinite(out).all()
    finally:
        torch.set_num_threads(threads)
    assert asked == [1, 3]


@needs_cc
def test_auto_takes_the_kernel_on_a_cpu_and_gives_way_to_sdpa_where_it_cannot_read_the_cache():
    assert resolve_attention_backend("auto", CPU) == "cpu"
    with pytest.raises(ValueError, match=r"attention_backend='cpu' runs on a CPU"):
        resolve_attention_backend("cpu", torch.device("cuda"))
    shape = dict(num_layers=1, num_blocks=8, block_size=4, num_kv_heads=2, head_dim=8, device=CPU)
    heads = dict(num_heads=4, head_dim=8, sliding_window=None)
    assert make_attention_backend("cpu", KVCache(dtype=torch.float32, **shape), chosen_by_auto=True, **heads).name == "cpu"
    for cache in (Int8KVCache(dtype=torch.float32, **shape), KVCache(dtype=torch.bfloat16, **shape)):
        assert make_attention_backend("cpu", cache, chosen_by_auto=True, **heads).name == "sdpa"
        with pytest.raises(ValueError, match=r"attention_backend='cpu': the CPU decode kernel reads float32 caches"):
            make_attention_backend("cpu", cache, **heads)


def test_without_a_compiler_auto_falls_back_and_names_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_attention, "_kernel", None)
    monkeypatch.setattr(cpu_attention, "_kernel_problem", None)
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    kernel, problem = cpu_attention.decode_kernel()
    assert kernel is None and problem and "no-such-cc" in problem
    cache = KVCache(num_layers=1, num_blocks=8, block_size=4, num_kv_heads=2, head_dim=8, dtype=torch.float32, device=CPU)
    assert make_attention_backend("cpu", cache, num_heads=4, head_dim=8, sliding_window=None, chosen_by_auto=True).name == "sdpa"
