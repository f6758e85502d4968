"""Token sampling on the device: greedy, temperature, top-k, top-p, min-p, penalties, logit bias, allowed token ids,
structured outputs, min_tokens, logprobs, per-request seeds — one batch, one sync."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Collection
from collections.abc import Sequence as Rows
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from accelkit.serve.sampling import SamplingParams
from accelkit.serve.structured import apply_token_bitmask_


@dataclass(frozen=True, slots=True)
class _EarlyMasks:
    """A fill :meth:`Sampler.start_guides` began: for which rows (the list itself), which of them, at what width."""

    rows: Rows[Any]
    guided: list[int]
    vocab: int
    future: concurrent.futures.Future[torch.Tensor]

_PARAM_ROWS = 4  # temperature, top_k, top_p, is_greedy
_EXTRA_ROWS = 8  # … then presence, frequency and repetition penalties, min_p (only when some row uses a feature)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


class SampledRow(Protocol):
    """What the slower path reads of a row's sequence (``sequence.Sequence`` is one)."""

    seq_id: int
    params: SamplingParams
    token_ids: list[int]
    num_prompt_tokens: int
    stop_token_ids: frozenset[int]
    guide: object | None  # a structured.RequestGuide with SamplingParams.structured_outputs
    bad_words_ids: tuple[tuple[int, ...], ...]  # SamplingParams.bad_words as token id sequences


class TokenCounts:
    """How often each token occurs in each penalised sequence's output, and whether it occurs in its prompt,
    kept on the device across steps: one slab row per sequence, updated with the tokens added since its last
    step (usually one) and gathered for the step's rows.

    Kept incrementally rather than rebuilt each step from the token ids (a padded (rows, len) tensor and a
    ``scatter_add`` into (rows, V)): at 64 rows × 1K tokens, V=32000, on one CPU thread, the rebuild took
    2.6 ms per step — 0.95 ms of it building the padded array from the Python lists, host work proportional
    to the context — against 0.7 ms for this (the gather of 64 slab rows; host work proportional to the rows
    and the new tokens).

    Memory, outside the KV cache budget (``kv_cache_memory_bytes`` or ``gpu_memory_utilization`` does not count
    it): :data:`ROW_BYTES_PER_TOKEN` × V bytes a row — float32 counts and a bool prompt mask; 626 KiB at V=128,256.
    A request holds one row whatever its length. The slab holds at most as many rows as the largest batch of
    penalised sequences, rounded up to :data:`ROW_CHUNK` (so at most ``max_num_seqs`` rounded up): a sequence
    not in the step (preempted, waiting) gives its row up when a row is needed, and gets its counts rebuilt from
    its token ids (exactly: they are a function of them) when it is back. When no penalised sequence is left
    the slab is freed.
    """

    ROW_CHUNK = 16  # rows are added this many at a time
    ROW_BYTES_PER_TOKEN = 5  # float32 count + bool prompt mask, per vocabulary entry

    def __init__(self, device: torch.device, vocab: int) -> None:
        self.device, self.vocab = device, vocab
        self._slot: dict[int, int] = {}  # seq_id → slab row (insertion order: the oldest holder first)
        self._counted: dict[int, int] = {}  # seq_id → output tokens already counted
        self._release()

    @property
    def num_rows(self) -> int:
        return self.output.shape[0]

    @property
    def num_bytes(self) -> int:
        """Device memory held now: ``num_rows`` × V × :data:`ROW_BYTES_PER_TOKEN`."""
        return self.num_rows * self.vocab * self.ROW_BYTES_PER_TOKEN

    def _release(self) -> None:
        self.output = torch.zeros(0, self.vocab, device=self.device)
        self.prompt = torch.zeros(0, self.vocab, dtype=torch.bool, device=self.device)
        self._free: list[int] = []

    def forget(self, seq_id: int) -> None:
        """``seq_id`` finished: its row is free, and with no penalised sequence left the slab goes."""
        self._evict(seq_id)
        if not self._slot and self.num_rows:
            self._release()

    def _evict(self, seq_id: int) -> None:
        slot = self._slot.pop(seq_id, None)
        if slot is not None:
            self._free.append(slot)
            del self._counted[seq_id]

    def _grow(self, need: int) -> None:
        old = self.num_rows
        new = -(-need // self.ROW_CHUNK) * self.ROW_CHUNK
        self.output = torch.cat([self.output, self.output.new_zeros(new - old, self.vocab)])
        self.prompt = torch.cat([self.prompt, self.prompt.new_zeros(new - old, self.vocab)])
        self._free += range(new - 1, old - 1, -1)

    def gather(self, rows: Rows[SampledRow], upload: Uploader) -> tuple[torch.Tensor, torch.Tensor]:
        """(R, V) float32 output counts and (R, V) bool prompt presence of ``rows``, brought up to date."""
        missing = sum(r.seq_id not in self._slot for r in rows)
        if missing > len(self._free):  # rows of sequences not in this step first, then a larger slab
            in_step = {r.seq_id for r in rows}
            idle = [seq_id for seq_id in self._slot if seq_id not in in_step]
            for seq_id in idle[: missing - len(self._free)]:
                self._evict(seq_id)
            if missing > len(self._free):
                self._grow(self.num_rows + missing - len(self._free))
        slots: list[int] = []
        clear: list[int] = []  # slots taken now: a freed slot still holds its last sequence's counts
        out_slots: list[int] = []
        out_tokens: list[int] = []
        prompt_slots: list[int] = []
        prompt_tokens: list[int] = []
        for r in rows:
            slot = self._slot.get(r.seq_id)
            if slot is None:
                slot = self._slot[r.seq_id] = self._free.pop()
                self._counted[r.seq_id] = 0
                clear.append(slot)
                ids = r.token_ids[: r.num_prompt_tokens]
                prompt_slots += [slot] * len(ids)
                prompt_tokens += ids
            slots.append(slot)
            added = r.token_ids[r.num_prompt_tokens + self._counted[r.seq_id] :]
            if added:
                self._counted[r.seq_id] += len(added)
                out_slots += [slot] * len(added)
                out_tokens += added
        if clear:
            index = upload.ints(clear)
            self.output.index_fill_(0, index, 0.0)
            self.prompt.index_fill_(0, index, False)
        if prompt_tokens:
            self.prompt.index_put_((upload.ints(prompt_slots), upload.ints(prompt_tokens)),
                                   torch.ones((), dtype=torch.bool, device=self.device))
        if out_tokens:
            self.output.index_put_((upload.ints(out_slots), upload.ints(out_tokens)),
                                   torch.ones((), device=self.device), accumulate=True)
        index = upload.ints(slots)
        return self.output.index_select(0, index), self.prompt.index_select(0, index)


class Uploader:
    """Host arrays to the device without a synchronous copy: through pinned memory on CUDA (the caching host
    allocator keeps each pinned block until its asynchronous copy is done)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pinned = device.type == "cuda"

    def array(self, a: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(a)
        return t.pin_memory().to(self.device, non_blocking=True) if self._pinned else t

    def ints(self, values: list[int]) -> torch.Tensor:
        return self.array(np.asarray(values, dtype=np.int64))

    def floats(self, values: list[float]) -> torch.Tensor:
        return self.array(np.asarray(values, dtype=np.float32))


def greedy_ids(x: torch.Tensor) -> torch.Tensor:
    """``x.argmax(dim=-1)``: the first index of each row's largest value (NaN counts as largest). On a CPU
    through ``max``, which returns the same indices (ties and NaN included, a unit test checks) about 2.5× faster:
    torch's CPU ``argmax`` took 0.76 ms for 64 × 8,192 floats against 0.29 ms on one thread of this project's
    2-core Xeon (``benchmarks/cpu_hot_paths.py``), every greedy step."""
    return x.max(dim=-1).indices if x.device.type == "cpu" else x.argmax(dim=-1)


def inverse_transform(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One token per row of ``probs`` (N, V), each drawn with probability ``probs[i, t] / probs[i].sum()`` from
    ``uniform`` (N, 1) in [0, 1): the first ``t`` whose running sum passes ``u * total`` (``probs`` is
    overwritten with its running sums). A token of probability 0 is never drawn: its running sum equals its
    predecessor's, and the draw is held at or before the last token whose sum reaches the total.

    A CPU's sampler: one ``cumsum`` pass and two binary searches per row where the race draws a random number per
    vocabulary entry — 0.65 ms against 2.6 ms for 64 × 8,192 and 6.1 against 13.0 ms for 64 × 32,000 on one
    thread of this project's 2-core Xeon (``benchmarks/cpu_hot_paths.py``). float32 running sums resolve
    probabilities down to ~6e-8 of the total (near the end of a large vocabulary a token below that is drawn at
    that granularity)."""
    cum = probs.cumsum_(dim=-1)
    total = cum[:, -1:]
    ids = torch.searchsorted(cum, (uniform.to(cum.dtype) * total).contiguous(), right=True)
    last = torch.searchsorted(cum, total.contiguous(), right=False)  # the last token with probability > 0
    return torch.minimum(ids, last).clamp_(max=cum.shape[-1] - 1).squeeze(1)  # (a NaN row stays in the vocabulary)


def nucleus_drop(sorted_probs: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    """(N, V) bool, True for the tokens top-p removes from ``sorted_probs`` (each row in descending order): vLLM's
    and transformers' rule, the smallest set of most likely tokens whose mass reaches ``top_p`` — a token goes once
    the mass before it does (``>=``: four tokens of 0.25 at top_p=0.5 keep two, not three). A row with top_p=1.0
    keeps every token: its float32 running sum passes 1.0 in a large vocabulary's tail, which cut most of that tail
    from a row without top_p whenever a neighbour in its batch had one (and changed a seeded row's draws with it).
    The most likely token always stays, as vLLM keeps it: a top_p too small for float32 (1e-300 from a client) was
    0 there, dropped every token, and the draw took the vocabulary's last id whatever the logits."""
    before = sorted_probs.cumsum(-1) - sorted_probs  # the mass of the tokens more likely than each (0 for the first)
    drop = (before >= top_ps[:, None]) & (top_ps < 1.0)[:, None]
    drop[:, 0] = False
    return drop


def _held_stops(p: SamplingParams, row: SampledRow, vocab: int) -> list[int]:
    """The stop ids ``row`` may not draw yet (``min_tokens`` not reached), those inside the vocabulary (an id past
    it is never drawn)."""
    if p.min_tokens and len(row.token_ids) - row.num_prompt_tokens < p.min_tokens:
        return [t for t in row.stop_token_ids if t < vocab]
    return []


def _bad_word_ends(row: SampledRow, vocab: int) -> list[int]:
    """The tokens ``bad_words`` forbid ``row`` now (vLLM's rule): of each word's token sequence, its last token where
    the output's last tokens are the rest of it — a one-token word's always."""
    generated = len(row.token_ids) - row.num_prompt_tokens
    banned = []
    for ids in row.bad_words_ids:
        k = len(ids) - 1
        if k <= generated and (k == 0 or tuple(row.token_ids[len(row.token_ids) - k:]) == ids[:-1]) and ids[-1] < vocab:
            banned.append(ids[-1])
    return banned


def _with_greedy_rows(x: torch.Tensor, params: list[SamplingParams], greedy: torch.Tensor, sampled: torch.Tensor
                      ) -> torch.Tensor:
    """``sampled`` with the greedy rows' (``greedy``: (N,) bool) replaced by the argmax of ``x``; when no row is
    greedy (known on the host) the argmax is not computed."""
    return torch.where(greedy, greedy_ids(x), sampled) if any(p.is_greedy for p in params) else sampled


def _exponential_(uniform: torch.Tensor) -> torch.Tensor:
    """``uniform`` (values in [0, 1)) made Exp(1) in place: ``-log(U)``, in (0, +inf] — never 0. torch's own
    ``exponential_`` is one slow CPU loop (9.5 ms for a 64 x 8,192 batch on a 2-core Xeon, against 1.8 ms for
    ``uniform_`` and the log together: ``benchmarks/sampler_noise.py``) — at batch 64 the sampler was a third of a
    decode step at temperature 1.0, the default of every OpenAI client (``benchmarks/engine_step_breakdown.py``).

    Not ``-log(1 - U)``: CUDA's ``uniform_`` returns exactly 0 (curand's 1.0, mapped), about once in 2^25 draws,
    and that made ``E`` 0 — ``p / 0`` is +inf, and ``0 / 0`` NaN for a masked token, so the race picked that
    entry whatever its probability, past top-k/top-p/min-p, allowed ids and structured-output masks (~0.4% of
    sampled tokens at a 128K vocabulary; found in review, on the CPU with the GPU path's code: no GPU was lent).
    ``-log(U)`` makes such an entry +inf, capped at :data:`_MAX_EXPONENTIAL` so that ``p / E`` stays above 0 for
    every token the row allows (an allowed token whose every rival drew a 0 still wins over the masked ones, whose
    ``0 / E`` is 0); no float32 draw but 0 comes near the cap (``-log(2^-24)`` is 16.6)."""
    return uniform.log_().neg_().clamp_(max=_MAX_EXPONENTIAL)


_MAX_EXPONENTIAL = 100.0


class Sampler:
    """Samples one token per row of a logits batch.

    Random rows use, on a GPU, the exponential race ``argmax(p / E)``, ``E ~ Exp(1)`` (as ``-log(1 - U)`` of
    uniform noise) — the same distribution as ``multinomial(p)`` without its host sync; on a CPU, where drawing a
    random number per vocabulary entry costs more than the rest of the sampler, the inverse transform of one
    uniform per row over the running sums (:func:`inverse_transform`). Rows whose request has a ``seed`` draw their
    noise from their own generator, so a seeded request gives the same tokens whatever else shares its batches.

    The per-row settings reach the device in one copy from a pinned buffer (a tensor built from a Python
    list would be a synchronous copy each); the only host sync of a step is reading the sampled ids back.

    Penalties, ``min_p``, ``logit_bias``, ``allowed_token_ids``, structured outputs, ``min_tokens`` and logprobs run
    only in a batch where some row asks for one of them (``extras``); otherwise a step does what it did before they
    existed. In vLLM's order: ``allowed_token_ids`` or the structured-output mask, ``logit_bias`` and
    ``min_tokens`` masking, then the penalties (repetition, frequency, presence), then greedy argmax or
    temperature → min-p → top-k → top-p → the draw. Logprobs are the model's raw ones
    (``log_softmax`` of its logits, before any of that — vLLM's default ``logprobs_mode="raw_logprobs"``);
    with them, the step's one read brings back the ids and the logprobs together.
    """

    def __init__(self, device: torch.device, seed: int) -> None:
        self.device = device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self._seeded: dict[int, torch.Generator] = {}  # seq_id → that request's generator
        self._pinned = device.type == "cuda"
        self._host = torch.empty(0)
        self._upload_arrays = Uploader(device)
        self._counts: TokenCounts | None = None  # made when a penalty is first used
        # seq_id → (its allowed_token_ids, (V,) bool on the device, True where a token is NOT allowed): built in the
        # request's first step, so a step's host work is one lookup per such row whatever the number of ids
        self._disallowed: dict[int, tuple[tuple[int, ...], torch.Tensor]] = {}
        # structured outputs: the packed (rows, ceil(V / 32)) int32 bitmask a step's guided rows are filled into
        # (pinned on CUDA: uploaded without a sync; grown, never shrunk)
        self._bitmask = torch.empty(0, 0, dtype=torch.int32)
        self._mask_pool: concurrent.futures.ThreadPoolExecutor | None = None  # made for the first guided step
        self._early: _EarlyMasks | None = None  # masks start_guides is filling for the step now running
        # guided rows may draw before their mask (_check_first); counts of such draws the grammar allowed, and refused
        self.draw_first = True
        self.first_draws_allowed = 0
        self.first_draws_refused = 0
        self.mask_wait_seconds = 0.0  # the engine thread's time waiting for masks begun beside the forward

    def forget(self, seq_id: int) -> None:
        self._seeded.pop(seq_id, None)
        self._disallowed.pop(seq_id, None)
        if self._counts is not None:
            self._counts.forget(seq_id)

    def _generator(self, seq_id: int, seed: int) -> torch.Generator:
        gen = self._seeded.get(seq_id)
        if gen is None:
            gen = self._seeded[seq_id] = torch.Generator(device=self.device)
            gen.manual_seed(seed)
        return gen

    def _upload(self, params: list[SamplingParams], vocab: int, num_rows: int = _PARAM_ROWS) -> torch.Tensor:
        """(num_rows, N) float32 on the device: temperature (1 for greedy rows), top_k, top_p, is_greedy
        [, presence, frequency, repetition, min_p]."""
        n = len(params)
        if self._host.numel() < num_rows * n:  # grown rarely; the previous step's sync finished any copy from it
            self._host = torch.empty(_EXTRA_ROWS * max(n, 64), dtype=torch.float32, pin_memory=self._pinned)
        # a contiguous (rows, n) view of the flat buffer: a strided slice would be staged through an unpinned
        # copy, which makes the non-blocking copy synchronous
        host = self._host[: num_rows * n].view(num_rows, n)
        rows = host.numpy()
        # (a finite temperature past float32's range is uniform sampling either way: clamp it, no overflow warning)
        rows[0] = [min(p.temperature, _FLOAT32_MAX) if p.temperature > 0 else 1.0 for p in params]
        rows[1] = [min(p.top_k or vocab, vocab) for p in params]
        rows[2] = [p.top_p for p in params]
        rows[3] = np.fromiter((p.is_greedy for p in params), dtype=np.float32, count=n)
        if num_rows > _PARAM_ROWS:
            rows[4] = [p.presence_penalty for p in params]
            rows[5] = [p.frequency_penalty for p in params]
            rows[6] = [p.repetition_penalty for p in params]
            rows[7] = [p.min_p for p in params]
        return host.to(self.device, non_blocking=True) if self._pinned else host

    def __call__(self, logits: torch.Tensor, params: list[SamplingParams], seq_ids: list[int],
                 extras: Rows[SampledRow] | None = None) -> list[int]:
        """``logits``: (N, V) → N token ids (one host sync)."""
        tokens, _ = self.read(self.launch(logits, params, seq_ids, extras))
        return tokens

    @staticmethod
    def read(pending: torch.Tensor) -> tuple[list[int], list[tuple[float, list[tuple[int, float]], int]] | None]:
        """The step's one host sync: the ids :meth:`launch` queued, and, when it packed them, each row's
        (logprob of its token, [(id, logprob) of the most likely], the token's rank in the vocabulary) — as many as
        the batch's largest ``logprobs`` (the caller keeps each row's own number)."""
        values = pending.tolist()
        if not values or not isinstance(values[0], list):
            return values, None
        tokens = [int(v[0]) for v in values]
        return tokens, _ranked(values)

    @torch.inference_mode()
    def launch(self, logits: torch.Tensor, params: list[SamplingParams], seq_ids: list[int],
               extras: Rows[SampledRow] | None = None, *, scratch: bool = False) -> torch.Tensor:
        """``logits``: (N, V) → (N,) int64 token ids on the device, without waiting for them (no host sync:
        the caller reads them, with :meth:`read`, when it has nothing else to do). ``extras``: the rows'
        sequences, given when some row needs the slower path (``SamplingParams.needs_processing``); then, if
        some row asks for logprobs, the result is a packed (N, 2 + 2k) float64 tensor instead (see :meth:`read`).
        ``scratch``: ``logits`` is the caller's to overwrite (a tensor made for this step, read by nothing after
        this call): masks and biases are then applied to it in place instead of to a copy."""
        if extras is not None:
            return self._launch_extras(logits, params, seq_ids, extras, scratch)
        if all(p.is_greedy for p in params):
            return greedy_ids(logits)
        logits = logits.float()
        vocab = logits.shape[-1]
        settings = self._upload(params, vocab)
        temps, ks, top_ps, greedy = settings[0], settings[1].long(), settings[2], settings[3] > 0
        return _with_greedy_rows(logits, params, greedy, self._sample(logits, params, seq_ids, temps, ks, top_ps, None))

    def _sample(self, logits: torch.Tensor, params: list[SamplingParams], seq_ids: list[int], temps: torch.Tensor,
                ks: torch.Tensor, top_ps: torch.Tensor, min_ps: torch.Tensor | None) -> torch.Tensor:
        """Temperature → min-p → top-k → top-p → the draw (race or inverse transform), for every row (greedy rows
        are replaced by the caller)."""
        vocab = logits.shape[-1]
        scaled = logits / temps[:, None]
        if min_ps is not None:  # vLLM's: after temperature, before top-k/top-p
            probs = scaled.softmax(dim=-1)
            keep = probs >= probs.amax(dim=-1, keepdim=True) * min_ps[:, None]
            scaled = scaled.masked_fill(~keep, float("-inf"))
        if any(p.top_k is not None for p in params):
            kmax = max(min(p.top_k or vocab, vocab) for p in params)  # from the host: no sync
            top = scaled.topk(kmax, dim=-1).values  # (N, kmax), descending
            kth = top.gather(1, (ks - 1)[:, None])
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        if any(p.top_p < 1.0 for p in params):
            sorted_logits, order = scaled.sort(dim=-1, descending=True)
            drop = nucleus_drop(sorted_logits.softmax(-1), top_ps)
            scaled = scaled.scatter(1, order, sorted_logits.masked_fill(drop, float("-inf")))
        probs = scaled.softmax(dim=-1)
        cpu = probs.device.type == "cpu"
        # one uniform per row on a CPU (inverse transform), one per vocabulary entry on a GPU (the race)
        noise = torch.empty((probs.shape[0], 1) if cpu else probs.shape, device=probs.device).uniform_(
            generator=self.generator)
        for i, (p, seq_id) in enumerate(zip(params, seq_ids, strict=True)):
            if p.seed is not None and not p.is_greedy:
                noise[i].uniform_(generator=self._generator(seq_id, p.seed))
        if cpu:
            return inverse_transform(probs, noise)
        return greedy_ids(probs.div_(_exponential_(noise)))

    def _disallowed_mask(self, seq_id: int, allowed: tuple[int, ...], vocab: int, up: Uploader) -> torch.Tensor:
        """(V,) bool, True for the tokens ``allowed`` leaves out; made once per request (its ids uploaded once)."""
        cached = self._disallowed.get(seq_id)
        if cached is not None and cached[0] is allowed and cached[1].shape[0] == vocab:  # (params are frozen)
            return cached[1]
        mask = torch.ones(vocab, dtype=torch.bool, device=self.device)
        mask.index_fill_(0, up.ints(list(allowed)), False)
        self._disallowed[seq_id] = (allowed, mask)
        return mask

    def start_guides(self, rows: Rows[SampledRow], params: list[SamplingParams]) -> None:
        """Start filling the next-token bitmasks of the guided rows among ``rows`` (the rows this step samples, the
        list :meth:`launch` will get) on a helper thread, so that they are filled while the step's forward runs:
        a mask depends only on the tokens sampled before this step. :meth:`process` takes them when it gets there
        (and fills them itself if this was not called, or for other rows). llguidance fills with the GIL released."""
        self.settle_guides()
        guided = [i for i, (p, r) in enumerate(zip(params, rows, strict=True))
                  if p.allowed_token_ids is None and r.guide is not None]
        if not guided:
            return
        guide: Any = rows[guided[0]].guide
        vocab = int(guide.backend.vocab_size)
        if self._mask_pool is None:
            self._mask_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="accelkit-masks")
        self._early = _EarlyMasks(rows, guided, vocab, self._mask_pool.submit(self._fill_guides, rows, guided, vocab))

    def settle_guides(self) -> None:
        """Wait for masks :meth:`start_guides` began that no step took (its forward failed): the matchers are the
        helper thread's until it is done (every fill calls this first). What the fill raised is dropped here — the
        step it was for failed anyway."""
        early, self._early = self._early, None
        if early is not None:
            concurrent.futures.wait([early.future])

    def _guide_bitmask(self, rows: Rows[SampledRow], guided: list[int], vocab: int) -> torch.Tensor:
        """(N, ceil(V / 32)) int32 on the device: the next-token bitmask of each guided row, all ones for the other
        rows — those :meth:`start_guides` filled for these very rows, else filled here."""
        early, self._early = self._early, None
        host = None
        if early is not None:
            if early.rows is rows and early.guided == guided and (early.vocab + 31) // 32 == (vocab + 31) // 32:
                start = time.perf_counter()
                try:
                    host = early.future.result()  # (a fill that raised raises here, as it would have inline)
                finally:
                    self.mask_wait_seconds += time.perf_counter() - start
            else:  # begun for other rows (a step that failed): done with the matchers before they are used here
                concurrent.futures.wait([early.future])
        if host is None:
            host = self._fill_guides(rows, guided, vocab)
        return host.to(self.device, non_blocking=True) if self._pinned else host

    @torch.inference_mode()  # (on the helper thread too: the buffer is an inference tensor, mode is per thread)
    def _fill_guides(self, rows: Rows[SampledRow], guided: list[int], vocab: int) -> torch.Tensor:
        """The host bitmask (N, ceil(V / 32)): each guided row's guide advanced over the tokens sampled since its
        last step, then the rows of one backend filled in one pass (llguidance: on its own threads, the GIL
        released); every bit set in the other rows."""
        n, width = len(rows), (vocab + 31) // 32
        if self._bitmask.shape[0] < n or self._bitmask.shape[1] != width:
            self._bitmask = torch.empty(max(n, 16), width, dtype=torch.int32, pin_memory=self._pinned)
        host = self._bitmask[:n]
        host.fill_(-1)  # (every bit set: unguided rows keep every token)
        by_backend: dict[int, tuple[Any, list[tuple[Any, int]]]] = {}
        for i in guided:
            r = rows[i]
            guide: Any = r.guide
            guide.catch_up(r.token_ids, r.num_prompt_tokens)
            by_backend.setdefault(id(guide.backend), (guide.backend, []))[1].append((guide.matcher, i))
        for backend, matchers in by_backend.values():
            backend.fill_bitmasks(matchers, host)
        for i in guided:  # a hybrid reasoning model's first token may open its thinking instead (RequestGuide.opener)
            guide = rows[i].guide
            if guide.at_opening() and guide.opener < 32 * host.shape[1]:
                word = host[i].numpy().view(np.uint32)
                word[guide.opener // 32] |= np.uint32(1 << (guide.opener % 32))
        return host

    def process(self, logits: torch.Tensor, params: list[SamplingParams], rows: Rows[SampledRow],
                settings: torch.Tensor | None = None, *, in_place: bool = False,
                unmasked: Collection[int] = ()) -> torch.Tensor:
        """``logits`` (N, V) with ``allowed_token_ids``, ``logit_bias``, ``min_tokens`` masking and the penalties
        applied, in vLLM's order: what greedy rows take the argmax of and random rows sample from (after
        temperature). ``logits`` itself is left as it is (it may be a CUDA graph's output buffer), unless
        ``in_place``: then the masks and biases are written into it (no copy of an (N, V) tensor: on a CPU a fresh
        copy's page faults cost as much as applying a batch's structured-output masks). ``unmasked``: guided rows
        left without their structured-output mask (they sample first: :meth:`_check_first`)."""
        raw = logits.float()
        vocab = raw.shape[-1]
        up = self._upload_arrays
        if settings is None:
            settings = self._upload(params, vocab, _EXTRA_ROWS)
        # masks and biases as flat (row, token, value) lists: one index_put each for the batch
        mask_rows: list[int] = []
        mask_tokens: list[int] = []
        bias_rows: list[int] = []
        bias_tokens: list[int] = []
        biases: list[float] = []
        penalised: list[int] = []
        restricted: list[int] = []  # rows with allowed_token_ids, and their (V,) masks
        disallowed: list[torch.Tensor] = []
        guided: list[int] = []  # rows with a guide (SamplingParams refuses both on one request)
        for i, (p, r) in enumerate(zip(params, rows, strict=True)):
            if p.allowed_token_ids is not None:
                restricted.append(i)
                disallowed.append(self._disallowed_mask(r.seq_id, p.allowed_token_ids, vocab, up))
            elif r.guide is not None and i not in unmasked:
                guided.append(i)
            stops = _held_stops(p, r, vocab) + (_bad_word_ends(r, vocab) if p.bad_words else [])
            mask_rows += [i] * len(stops)
            mask_tokens += stops
            if p.logit_bias:
                bias_rows += [i] * len(p.logit_bias)
                bias_tokens += p.logit_bias.keys()
                biases += p.logit_bias.values()
            if p.presence_penalty or p.frequency_penalty or p.repetition_penalty != 1.0:
                penalised.append(i)
        writes = bool(mask_tokens or bias_tokens or restricted or guided)
        x = raw.clone() if writes and raw is logits and not in_place else raw
        if guided:  # one packed bitmask for the batch, one pass to apply it
            apply_token_bitmask_(x, self._guide_bitmask(rows, guided, vocab))
        if restricted:
            self._mask_restricted(x, restricted, disallowed, up)
        if bias_tokens:
            x.index_put_((up.ints(bias_rows), up.ints(bias_tokens)), up.floats(biases), accumulate=True)
        if mask_tokens:
            x.index_put_((up.ints(mask_rows), up.ints(mask_tokens)), torch.full((), float("-inf"), device=x.device))
        if penalised:
            x = self._penalise(x, [rows[i] for i in penalised], penalised, settings, up)
        return x

    @staticmethod
    def _mask_restricted(x: torch.Tensor, restricted: list[int], disallowed: list[torch.Tensor], up: Uploader) -> None:
        """``x`` (N, V) with -inf where the rows ``restricted`` have ``allowed_token_ids`` (their (V,) masks of what
        is not allowed, ``disallowed``): one masked fill for the batch, False in the other rows."""
        masks = torch.stack(disallowed)
        if len(restricted) < x.shape[0]:
            masks = masks.new_zeros(x.shape[0], x.shape[1]).index_copy_(0, up.ints(restricted), masks)
        x.masked_fill_(masks, float("-inf"))

    def _draw(self, x: torch.Tensor, params: list[SamplingParams], seq_ids: list[int], settings: torch.Tensor
              ) -> torch.Tensor:
        """(N,) ids drawn from the processed logits ``x`` (N, V): greedy rows' argmax, the others sampled with the
        settings :meth:`_upload` wrote for these rows."""
        if all(p.is_greedy for p in params):
            return greedy_ids(x)
        temps, ks, top_ps, greedy = settings[0], settings[1].long(), settings[2], settings[3] > 0
        min_ps = settings[7] if any(p.min_p > 0 for p in params) else None
        return _with_greedy_rows(x, params, greedy, self._sample(x, params, seq_ids, temps, ks, top_ps, min_ps))

    @staticmethod
    def _first_draw_rows(params: list[SamplingParams], rows: Rows[SampledRow]) -> list[int]:
        """The guided rows that draw their token before their mask (:meth:`_check_first`): those whose draw is
        the same with the mask applied after as before — greedy, or temperature alone (``top_k``, ``top_p`` and
        ``min_p`` cut the distribution relative to its best tokens, which the mask changes) and no ``seed`` — whose
        backend ``draws_first`` and whose guide expects its draw to be allowed (:meth:`RequestGuide.samples_first`).

        A seeded row that samples is masked first: drawing first gives the same distribution, not the same tokens
        (a refused draw takes a second number from the row's generator), and whether a row draws first depends on
        how long masks took — so the same seed would give other tokens on a busier server. A greedy row draws
        the same token either way."""
        first = []
        for i, (p, r) in enumerate(zip(params, rows, strict=True)):
            guide: Any = r.guide
            if (guide is None or not guide.backend.draws_first  # (allowed_token_ids never come with a guide)
                    or not (p.is_greedy or (p.top_k is None and p.top_p >= 1.0 and p.min_p == 0 and p.seed is None))):
                continue
            if guide.samples_first():
                first.append(i)
        return first

    def _check_first(self, x: torch.Tensor, tokens: torch.Tensor, params: list[SamplingParams], seq_ids: list[int],
                     rows: Rows[SampledRow], first: list[int], settings: torch.Tensor) -> torch.Tensor:
        """``tokens`` with the rows ``first`` (drawn from ``x`` without their structured-output mask) checked against
        their grammar, and those it refuses drawn again from their masked logits.

        The same distribution as masking first: a row keeps its first draw ``t`` when the grammar allows it
        (probability ``p(t)``), else draws from the masked ``p / P(allowed)`` with fresh noise, so ``t`` comes out
        with ``p(t) + (1 - P(allowed)) · p(t) / P(allowed) = p(t) / P(allowed)``; a greedy row's argmax, allowed, is
        also the masked argmax. The check takes about a microsecond (llguidance's ``validate_tokens``) where a mask over
        the vocabulary costs tens to hundreds, so a model that keeps to its format mostly skips the mask; a refused
        draw costs its mask and a second draw, on a CPU over its allowed ids alone (:meth:`_redraw_on_host`). It
        reads the first draws (a host sync): on a CPU, the only device this runs on in serving, that is a list
        copy."""
        idx = self._upload_arrays.ints(first)
        refused: list[int] = []
        for i, token in zip(first, tokens[idx].tolist(), strict=True):
            r = rows[i]
            guide: Any = r.guide
            guide.catch_up(r.token_ids, r.num_prompt_tokens)
            allowed = guide.allows(token)
            guide.record_first(allowed)
            if not allowed:
                refused.append(i)
        self.first_draws_allowed += len(first) - len(refused)
        self.first_draws_refused += len(refused)
        if not refused:
            return tokens
        if x.device.type == "cpu":  # each row drawn again over its allowed ids alone, in numpy
            self._redraw_on_host(x, tokens, params, seq_ids, rows, refused)
            return tokens
        ridx = self._upload_arrays.ints(refused)
        sub = x[ridx]  # (a copy: x stays as the other rows drew from it)
        apply_token_bitmask_(sub, self._guide_bitmask([rows[i] for i in refused], list(range(len(refused))),
                                                      sub.shape[-1]))
        tokens[ridx] = self._draw(sub, [params[i] for i in refused], [seq_ids[i] for i in refused], settings[:, ridx])
        return tokens

    def _redraw_on_host(self, x: torch.Tensor, tokens: torch.Tensor, params: list[SamplingParams], seq_ids: list[int],
                        rows: Rows[SampledRow], refused: list[int]) -> None:
        """Draw the ``refused`` rows of ``x`` (N, V) float32 on the CPU again into ``tokens``, each over the ids its
        mask allows: the argmax of those logits (greedy: the first of equal ones, as over the whole row), or the
        inverse transform of one uniform over their softmax at the row's temperature, from the generator the row
        draws from — what masking the row and drawing from the whole vocabulary gives, at the cost of the allowed
        ids (a refused draw is mostly at a grammar's punctuation, where a handful are) rather than of a batch of
        vocabulary-wide ops. A row whose allowed logits are not all finite takes their argmax (NaN and +inf count
        as largest, as in :func:`greedy_ids`). A mask always allows something (EOS at least: a failed matcher's)."""
        vocab = x.shape[-1]
        host = self._fill_guides([rows[i] for i in refused], list(range(len(refused))), vocab)
        bits = np.unpackbits(host.numpy().view(np.uint8), axis=1, count=min(vocab, 32 * host.shape[1]),
                             bitorder="little")
        logits = x.numpy()
        for k, i in enumerate(refused):
            ids = np.flatnonzero(bits[k])
            values = logits[i, ids].astype(np.float64)
            p = params[i]
            if p.is_greedy or not np.isfinite(values.max()):
                tokens[i] = int(ids[int(np.argmax(values))])
                continue
            weights = np.exp((values - values.max()) / min(p.temperature, _FLOAT32_MAX))
            cum = np.cumsum(weights)
            generator = self.generator if p.seed is None else self._generator(seq_ids[i], p.seed)
            u = float(torch.empty(1, device=x.device).uniform_(generator=generator))
            at = min(int(np.searchsorted(cum, u * cum[-1], side="right")),
                     int(np.searchsorted(cum, cum[-1], side="left")))  # (the last id of weight > 0)
            tokens[i] = int(ids[at])

    def _launch_extras(self, logits: torch.Tensor, params: list[SamplingParams], seq_ids: list[int],
                       rows: Rows[SampledRow], scratch: bool = False) -> torch.Tensor:
        raw = logits.float()
        settings = self._upload(params, raw.shape[-1], _EXTRA_ROWS)
        ks_lp = [p.logprobs for p in params if p.logprobs is not None]
        # guided rows that draw before their mask is computed: only where no mask is being filled beside the forward
        # (start_guides: those cost the step nothing)
        first = self._first_draw_rows(params, rows) if self.draw_first and self._early is None else []
        # (logprobs are of the model's logits, before any processing: then raw must stay as it came)
        x = self.process(raw, params, rows, settings, in_place=scratch and not ks_lp, unmasked=set(first))
        tokens = self._draw(x, params, seq_ids, settings)
        if first:
            tokens = self._check_first(x, tokens, params, seq_ids, rows, first, settings)
        if not ks_lp:
            return tokens
        return self.pack_logprobs(raw, tokens, max(ks_lp))

    @staticmethod
    def read_ranked(pending: torch.Tensor) -> list[tuple[float, list[tuple[int, float]], int]]:
        """The host sync of :meth:`pack_logprobs` rows: per row (logprob of its token, [(id, logprob) of the most
        likely], the token's rank) — as many as the batch's largest k."""
        return _ranked(pending.tolist())

    @staticmethod
    def pack_logprobs(logits: torch.Tensor, tokens: torch.Tensor, k: int) -> torch.Tensor:
        """(N, V) float32 logits and (N,) token ids → the (N, 3 + 2k) float64 rows :meth:`read` and
        :meth:`read_ranked` unpack: each id, its logprob (``log_softmax``), its rank in the vocabulary (vLLM's
        ``Logprob.rank``: 1 + the tokens strictly more likely, so the argmax is 1 and ties share the better rank —
        vLLM counts a tie against the token), the k most likely ids and their logprobs. Sampled tokens and prompt
        tokens alike; the rank is one compare-and-sum over (N, V) in the same batch, read back with the rest."""
        logprobs = logits.log_softmax(dim=-1)
        chosen = logprobs.gather(1, tokens[:, None])  # (N, 1)
        top = logprobs.topk(k, dim=-1) if k else None
        parts = [tokens[:, None].double(), chosen.double(),
                 (logprobs > chosen).sum(dim=-1, keepdim=True).add_(1).double()]
        if top is not None:
            parts += [top.indices.double(), top.values.double()]
        return torch.cat(parts, dim=1)  # float64 holds any token id exactly

    def _penalise(self, x: torch.Tensor, rows: list[SampledRow], index: list[int], settings: torch.Tensor,
                  up: Uploader) -> torch.Tensor:
        """vLLM's penalties on the rows ``index`` of ``x``: repetition over prompt and output, then frequency and
        presence over the output."""
        vocab = x.shape[-1]
        if self._counts is None or self._counts.vocab != vocab:
            self._counts = TokenCounts(x.device, vocab)
        counts, in_prompt = self._counts.gather(rows, up)
        idx = up.ints(index)
        sub = x.index_select(0, idx)
        presence, frequency, repetition = (settings[j].index_select(0, idx)[:, None] for j in (4, 5, 6))
        seen = counts > 0
        rep = torch.where(seen | in_prompt, repetition, torch.ones((), device=x.device))
        sub = torch.where(sub > 0, sub / rep, sub * rep)
        sub = sub - frequency * counts - presence * seen.float()
        return x.index_copy(0, idx, sub)


def _ranked(values: list[list[float]]) -> list[tuple[float, list[tuple[int, float]], int]]:
    """Packed rows on the host → (logprob of the token, [(id, logprob)] of the most likely, the token's rank)."""
    return [(v[1], _top(v, 3), int(v[2])) for v in values]


def _top(row: list[float], start: int) -> list[tuple[int, float]]:
    """The [(id, logprob)] of a packed row whose k ids and then k logprobs begin at ``start``."""
    k = (len(row) - start) // 2
    return [(int(t), lp) for t, lp in zip(row[start : start + k], row[start + k :], strict=True)]
