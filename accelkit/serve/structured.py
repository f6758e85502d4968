"""Structured outputs (guided decoding): the interface between the engine and a grammar engine, and the compiler
that keeps a compile from hurting anything else.

In the spirit of vLLM's ``v1/structured_output/backend_types.py``:

- a :class:`StructuredBackend` compiles a :class:`~accelkit.serve.sampling.StructuredOutputs` spec into a
  :class:`CompiledGrammar` (immutable, shared by every request with the same spec) and fills the next-token
  bitmasks of a step's guided rows in one pass;
- a :class:`GrammarMatcher` is one request's place in its grammar: it accepts the tokens sampled, rolls back,
  and says when the grammar is terminated (EOS consumed).

Masks are packed bits: one int32 per 32 tokens, bit ``t % 32`` of word ``t // 32`` set when token ``t`` is allowed
(llguidance's and xgrammar's layout). :func:`apply_token_bitmask_` applies them to a (rows, V) logits tensor.

:class:`GrammarCompiler` runs every compile on its own small thread pool (never the event loop's, never the
engine thread), at most :data:`MAX_COMPILE_WORKERS` at a time, waits at most :data:`COMPILE_TIMEOUT_S` for one
(a ValueError naming the limit after that), compiles a spec once when several requests bring it at the same time,
and keeps compiled grammars in an LRU bounded by :data:`MAX_GRAMMAR_CACHE_BYTES`. The backend bounds the work
inside one compile and one mask (llguidance's fuel and state limits), so a compile that outlives its wait still
ends, and holds one worker until it does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import functools
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from accelkit.core.device import usable_cores
from accelkit.serve.sampling import StructuredOutputs

if TYPE_CHECKING:
    import torch

COMPILE_TIMEOUT_S = 5.0  # longest a request waits for its spec to compile (queueing included)
MAX_COMPILE_WORKERS = 2  # compiles running at once; more wait (and time out) in the queue
MAX_GRAMMAR_CACHE_BYTES = 64 << 20  # compiled grammars kept (each weighed by malloc's growth across its compile)
MAX_CACHED_ERRORS = 256  # specs known not to compile: refused again without compiling
COMPILE_NICE = 10  # compile threads run this much nicer than the server (Linux): the engine and HTTP go first


class GrammarMatcher(Protocol):
    """One request's place in its grammar. Used by one thread at a time (the engine's)."""

    #: what computing its last mask took, in ns (0 until measured): where masks are cheap, drawing before them saves
    #: nothing (RequestGuide.samples_first)
    mask_ns: int

    def accept_tokens(self, token_ids: Sequence[int]) -> bool:
        """Advance over ``token_ids`` (EOS included: it terminates the grammar); False if one was not allowed
        (the matcher is then in an error state and allows only EOS)."""

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens."""

    def is_terminated(self) -> bool:
        """EOS was accepted (or the matcher failed): only EOS is allowed from here on."""

    def allows(self, token_id: int) -> bool:
        """Whether ``token_id`` may come next — what its mask's bit would say — without advancing."""


class CompileTimeout(ValueError):
    """A spec that did not compile within the compiler's time limit (a ValueError, as every refusal of a spec): no
    fault of the spec's alone — the server may have been compiling others."""


class CompiledGrammar(Protocol):
    """A compiled spec: immutable (but for the running share below), shared across requests and threads."""

    #: the running share of its requests' first draws that it allowed (where a new request's own share starts: see
    #: SAMPLE_FIRST_GRAMMAR_WEIGHT); written by the engine thread only
    first_draw_share: float

    @property
    def num_bytes(self) -> int:
        """An estimate of the memory it holds (what the compiler's cache is bounded by)."""

    def matcher(self) -> GrammarMatcher:
        """A fresh matcher at the grammar's start."""


Native = Callable[..., Any]  # how a backend's compile calls its grammar engine: native(fn, *args, **kwargs)


def run_here(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """A :data:`Native` that calls ``fn`` on this thread."""
    return fn(*args, **kwargs)


class StructuredBackend(Protocol):
    """A grammar engine over one tokenizer's vocabulary of ``vocab_size`` ids."""

    name: str
    vocab_size: int
    #: whether its guided rows may draw before their mask (the sampler's ``_check_first``): worth it where a mask
    #: costs far more than checking one token
    draws_first: bool

    def prepare(self, spec: StructuredOutputs) -> Any:
        """What :meth:`compile` takes as ``prepared``: the compile's Python-side work (parsing and rewriting the spec,
        writing the engine's grammar), done apart because it holds the interpreter lock. ValueError as compile."""

    def compile(self, spec: StructuredOutputs, prepared: Any = None, *, native: Native = run_here) -> CompiledGrammar:
        """``spec`` compiled (from :meth:`prepare`'s result, or doing that work itself when None); ValueError with one
        line naming the field (``structured_outputs.regex: ...``). ``native(fn, *args)`` runs each call into the
        grammar engine that does the compile's heavy work (:class:`GrammarCompiler`: on a niced thread)."""

    def fill_bitmasks(self, rows: Sequence[tuple[GrammarMatcher, int]], bitmask: torch.Tensor) -> None:
        """Write each matcher's next-token mask into row ``i`` of ``bitmask`` ((R, ceil(vocab_size / 32)) int32 on
        the CPU, contiguous), all rows in one pass."""


# Drawing before the mask (RequestGuide.samples_first) pays where a mask costs far more than checking a token and the
# model's draws are mostly kept. So a request draws first only while its last computed mask took at least
# SAMPLE_FIRST_MIN_MASK_NS (a JSON string's mask, which llguidance's slices precompute, takes a few µs: no gain; a
# bounded string's or a pattern's, tens to hundreds), and while the running share of its first draws the grammar
# allowed (each draw weighs SAMPLE_FIRST_WEIGHT) is at least SAMPLE_FIRST_MIN — a refused draw costs its mask and a
# second draw. Every SAMPLE_FIRST_RETRY-th step it does the other thing: a drawing request masks (what a mask costs
# here is measured again), a masking one tries a draw (a model off its format for a while can come back to it).
# A request starts from its grammar's share (CompiledGrammar.first_draw_share: every request's first draws over that
# grammar, each weighing SAMPLE_FIRST_GRAMMAR_WEIGHT), not from SAMPLE_FIRST_MIN: a short request (a choice: a few
# tokens) otherwise paid for a refused draw before its own share said stop, on every request.
SAMPLE_FIRST_MIN_MASK_NS = 20_000
SAMPLE_FIRST_WEIGHT = 0.25
SAMPLE_FIRST_GRAMMAR_WEIGHT = 0.05
SAMPLE_FIRST_MIN = 0.5
SAMPLE_FIRST_RETRY = 8


class RequestGuide:
    """What a guided sequence carries (``Sequence.guide``): its matcher, the backend that fills its mask, how many
    of its output tokens the matcher has accepted (the sampler feeds it the ones added since), and how often a token
    drawn without its mask was one the grammar allows (:meth:`samples_first`)."""

    __slots__ = ("allowed_share", "backend", "consumed", "grammar", "matcher", "opener", "steps")

    def __init__(self, backend: StructuredBackend, matcher: GrammarMatcher, grammar: CompiledGrammar) -> None:
        self.backend, self.matcher, self.grammar, self.consumed = backend, matcher, grammar, 0
        # (first draws allowed, a running share: one refusal stops them), from what the grammar's requests saw
        self.allowed_share = grammar.first_draw_share
        self.steps = 0
        # a token the output may open with besides what the grammar allows (a hybrid reasoning model's <think>,
        # SamplingParams.structured_outputs_deferred_by_token_id: the sequence then puts this guide to sleep); -1: none
        self.opener = -1

    def at_opening(self) -> bool:
        """Whether this step's token may be :attr:`opener` (no output token yet)."""
        return self.opener >= 0 and self.consumed == 0

    def allows(self, token_id: int) -> bool:
        """Whether the next token may be ``token_id`` (:meth:`catch_up` first)."""
        if token_id == self.opener and self.at_opening():
            return True
        return token_id < self.backend.vocab_size and self.matcher.allows(token_id)

    def samples_first(self) -> bool:
        """Whether this step draws its token before computing its mask (the sampler then checks the token, and
        computes the mask and draws again only if the grammar refuses it): where masks cost enough, while most
        first draws were allowed; every SAMPLE_FIRST_RETRY-th step the other way (see SAMPLE_FIRST_MIN_MASK_NS)."""
        self.steps += 1
        if self.matcher.mask_ns < SAMPLE_FIRST_MIN_MASK_NS:
            return False
        return (self.allowed_share >= SAMPLE_FIRST_MIN) != (self.steps % SAMPLE_FIRST_RETRY == 0)

    def record_first(self, allowed: bool) -> None:
        """Count a first draw the grammar allowed (or refused), in this request's share and in its grammar's."""
        self.allowed_share += SAMPLE_FIRST_WEIGHT * (float(allowed) - self.allowed_share)
        self.grammar.first_draw_share += SAMPLE_FIRST_GRAMMAR_WEIGHT * (float(allowed) - self.grammar.first_draw_share)

    def start_after(self, num_output_tokens: int) -> None:
        """Let the grammar begin after the first ``num_output_tokens`` output tokens (a reasoning model's thinking,
        :attr:`SamplingParams.structured_outputs_after_token_id`): they are not the matcher's."""
        self.consumed = num_output_tokens

    def catch_up(self, token_ids: Sequence[int], num_prompt_tokens: int = 0) -> None:
        """Accept the output tokens (``token_ids`` past its first ``num_prompt_tokens``) sampled since the last
        call (usually one). After EOS (with ``ignore_eos`` the sequence goes on) the matcher is terminated and the
        mask allows EOS only: nothing more to accept."""
        new = token_ids[num_prompt_tokens + self.consumed:]  # (only the new ones: not a copy of the whole output)
        if new and not self.matcher.is_terminated():
            self.matcher.accept_tokens(new)  # (tokens the mask let through: it fails only past a backend limit)
        self.consumed = len(token_ids) - num_prompt_tokens


# a step's guided rows are filled on the backend's thread pool from this many usable cores up; below, one after
# another on the calling thread: on a 2-core CPU, where torch runs on both, handing 16 rows to llguidance's pool took
# longer than filling them in turn (benchmarks/structured_outputs.py --fill)
PARALLEL_FILL_MIN_CORES = 4


def parallel_fill() -> bool:
    """Whether a backend fills a step's rows on its thread pool on this machine (see PARALLEL_FILL_MIN_CORES)."""
    return usable_cores() >= PARALLEL_FILL_MIN_CORES


class EosBits:
    """Where the EOS ids sit in a packed bitmask row (word, bit), for what both backends do with them: check that a
    start mask allows more than EOS, and write a row that allows EOS only (a matcher that failed or ended)."""

    __slots__ = ("words",)

    def __init__(self, eos_token_ids: Collection[int], vocab_size: int) -> None:
        self.words = [(t // 32, 1 << (t % 32)) for t in sorted(eos_token_ids) if t < vocab_size]

    def allows_more(self, row: torch.Tensor) -> bool:
        """Whether the int32 mask ``row`` (CPU) allows some token besides EOS."""
        import numpy as np

        words = row.numpy().view(np.uint32).copy()
        for word, bit in self.words:
            words[word] &= ~np.uint32(bit)
        return bool(words.any())

    def only(self, row: torch.Tensor) -> None:
        """Write EOS only into the int32 mask ``row`` (CPU)."""
        import numpy as np

        words = row.numpy().view(np.uint32)
        words[:] = 0
        for word, bit in self.words:
            words[word] |= np.uint32(bit)


def apply_token_bitmask_(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set ``logits`` (R, V) to -inf where ``bitmask`` (R, W) int32, on the same device, has a 0 bit; ids past
    32 * W are masked too. In place. On the CPU by numpy on the calling thread: the words inverted, unpacked to a
    "disallowed" bool mask and written with one ``copyto`` (a torch op here would run on torch's intra-op threads,
    whose barrier costs milliseconds a step on a loaded machine — 8–20 ms measured on a busy 2-core VM, against
    0.3–1.4 ms this way; llguidance's torch helper is a ``torch.compile`` kernel: 40 s to compile on a busy CPU
    before the first step); on an accelerator by shifts (a handful of elementwise kernels, no host sync)."""
    import torch

    vocab = logits.shape[1]
    width = bitmask.shape[1] * 32
    if vocab > width:
        logits[:, width:] = float("-inf")
    if logits.device.type == "cpu":
        import numpy as np

        count = min(vocab, width)
        disallowed = np.unpackbits(np.invert(bitmask.numpy()).view(np.uint8), axis=1, count=count,
                                   bitorder="little").view(np.bool_)
        head = logits[:, :count]
        if head.dtype in (torch.float32, torch.float64, torch.float16):
            np.copyto(head.numpy(), -np.inf, where=disallowed)
        else:  # (bfloat16: no numpy view)
            head.masked_fill_(torch.from_numpy(disallowed), float("-inf"))
        return
    allowed = unpack_bits(bitmask, vocab)
    logits[:, : allowed.shape[1]].masked_fill_(~allowed, float("-inf"))


def unpack_bits(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """(R, W) int32 packed bits → (R, min(vocab, 32 W)) bool, on ``bitmask``'s device, by shifts (no host sync)."""
    import torch

    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)  # (32,)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1  # (R, W, 32): bit j of word w is token 32 w + j
    return bits.view(bitmask.shape[0], -1)[:, :vocab].bool()


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


@functools.cache
def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    try:
        libc = ctypes.CDLL(None)
        fn = libc.mallinfo2  # glibc ≥ 2.33
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return cast("Callable[[], _MallInfo2]", fn)


def allocated_bytes() -> int | None:
    """Bytes malloc has handed out and not had back (glibc's ``mallinfo2``: every arena, mmapped chunks included),
    or None where that cannot be read. llguidance's Rust allocates through malloc, so the change across a compile
    is what the compiled grammar holds — which Python cannot see: ``a{100000}`` holds ~16 MiB of lexer tables, its
    grammar text is 9 characters. Process-wide: another thread's allocations in the meantime count too (~8 µs)."""
    fn = _mallinfo2()
    if fn is None:
        return None
    info = fn()
    return int(info.uordblks + info.hblkhd)


def lower_thread_priority(increment: int) -> None:
    """Make the calling thread ``increment`` nicer than the process (Linux, where each thread has its own nice
    value; elsewhere nothing). A compile is CPU work on the machine's cores: on a 2-core server two busy compiles
    at the same priority as the engine thread would take two thirds of the CPU from every decode step. Niced, they
    get the time the engine and the event loop leave (CFS weighs nice 10 at about a tenth of nice 0)."""
    if not sys.platform.startswith("linux"):
        return
    try:  # (relative to the main thread, whose id is the process id: a thread started by a niced one still gets +10)
        base = os.getpriority(os.PRIO_PROCESS, os.getpid())
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, base + increment))
    except OSError:  # (a sandbox without the permission: the thread keeps the process's priority)
        pass


class GrammarCompiler:
    """Compiles specs with a backend made on first use (``make_backend``: the tokenizer's conversion takes a while,
    so it runs on the pool too), cached by spec. Any thread; :meth:`compile_async` from an event loop."""

    def __init__(self, make_backend: Callable[[], StructuredBackend], *, timeout_s: float = COMPILE_TIMEOUT_S,
                 max_workers: int = MAX_COMPILE_WORKERS, max_cache_bytes: int = MAX_GRAMMAR_CACHE_BYTES) -> None:
        if timeout_s <= 0 or max_workers < 1 or max_cache_bytes < 1:
            raise ValueError(f"timeout_s={timeout_s}, max_workers={max_workers}, max_cache_bytes={max_cache_bytes}: "
                             "each must be positive")
        self.timeout_s, self.max_cache_bytes = timeout_s, max_cache_bytes
        self._make_backend = make_backend
        self._backend_made: concurrent.futures.Future[StructuredBackend] | None = None
        # a compile's Python side runs on _pool's threads at the server's own priority; the grammar engine's own work
        # on _native_pool's, niced (see _compile). Each pool's threads are started by a thread at the server's
        # priority (a thread inherits its creator's nice value): _pool's by a caller of compile, _native_pool's by
        # _pool's threads — and by the first caller for the backend's making
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="accelkit-compile")
        self._native_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers, thread_name_prefix="accelkit-compile-native", initializer=lower_thread_priority,
            initargs=(COMPILE_NICE,))
        self._lock = threading.Lock()
        self._grammars: OrderedDict[StructuredOutputs, tuple[CompiledGrammar, int]] = OrderedDict()  # (its weight)
        self._errors: OrderedDict[StructuredOutputs, str] = OrderedDict()
        self.cached_bytes = 0
        # spec → (its compile in flight, requests waiting on it): N requests with one spec share one compile
        self._inflight: dict[StructuredOutputs, tuple[concurrent.futures.Future[CompiledGrammar], list[int]]] = {}
        self.num_compiles = 0  # compiles started (a cache hit or a shared compile starts none)
        # told how each spec was settled (any thread; it must not raise): "compiled" / "refused" (a compile ended,
        # with its seconds), "timeout" (a caller stopped waiting at timeout_s) and, for compile_async — the server's
        # request path; make_request looks the spec up again — "hit" (compiled or refused before) or "shared" (a
        # compile in flight joined). The server's /metrics counts them
        self.observer: Callable[[str, float | None], None] | None = None

    # ---- public --------------------------------------------------------------------------------------------

    def compile(self, spec: StructuredOutputs) -> CompiledGrammar:
        """The compiled ``spec``, waiting at most ``timeout_s`` (after the backend is made, on the first call: that
        is the tokenizer's conversion, not the spec's compile); ValueError naming what is wrong or the limit."""
        self._backend_future().result()
        future, waiters, _ = self._submit(spec)
        try:
            return future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            self._give_up(spec, future, waiters)
            self._observe("timeout")
            raise CompileTimeout(self._timeout_message(spec)) from None

    async def compile_async(self, spec: StructuredOutputs) -> CompiledGrammar:
        """:meth:`compile` for an event loop: it awaits, the loop stays free, no thread of its pool is taken. A spec
        already compiled (or refused) returns (or raises) at once, without suspending: wrapping a finished future
        still costs a wake-up of the loop through its self-pipe and a turn of it, on every guided request."""
        backend = self._backend_future()
        if not backend.done():
            await asyncio.wrap_future(backend)
        backend.result()  # (a backend that cannot be made: its ValueError)
        future, waiters, how = self._submit(spec)
        if how == "settled":
            self._observe("hit")
            return future.result()
        if how == "shared":
            self._observe("shared")
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), self.timeout_s)
        except TimeoutError:
            self._give_up(spec, future, waiters)
            self._observe("timeout")
            raise CompileTimeout(self._timeout_message(spec)) from None

    def guide(self, grammar: CompiledGrammar) -> RequestGuide:
        """A request's guide over a grammar this compiler compiled."""
        return RequestGuide(self._backend_future().result(), grammar.matcher(), grammar)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._native_pool.shutdown(wait=False, cancel_futures=True)

    # ---- internals -----------------------------------------------------------------------------------------

    def _timeout_message(self, spec: StructuredOutputs) -> str:
        return (f"structured_outputs.{spec.kind}: did not compile within the {self.timeout_s:g} s compile limit "
                "(the server was compiling others, or this one is too complex); simplify it or retry")

    def _observe(self, event: str, seconds: float | None = None) -> None:
        if self.observer is not None:
            self.observer(event, seconds)

    def _submit(self, spec: StructuredOutputs) -> tuple[concurrent.futures.Future[CompiledGrammar], list[int], str]:
        """(the spec's compile, its waiter count, how it was found: "new" — a compile started —, "shared" — one in
        flight joined — or "settled": compiled or refused before, the future done)."""
        with self._lock:
            cached = self._grammars.get(spec)
            grammar = cached[0] if cached is not None else None
            error = self._errors.get(spec)
            if grammar is None and error is None:
                entry = self._inflight.get(spec)
                how = "shared" if entry is not None else "new"
                if entry is None:
                    future = self._pool.submit(self._compile, spec)
                    entry = self._inflight[spec] = (future, [0])
                    self.num_compiles += 1
                entry[1][0] += 1
                return entry[0], entry[1], how
            done: concurrent.futures.Future[CompiledGrammar] = concurrent.futures.Future()
            if grammar is not None:
                self._grammars.move_to_end(spec)
                done.set_result(grammar)
            else:
                done.set_exception(ValueError(error))
            return done, [1], "settled"

    def _give_up(self, spec: StructuredOutputs, future: concurrent.futures.Future[CompiledGrammar],
                 waiters: list[int]) -> None:
        """A waiter timed out: the last one to leave cancels a compile still in the queue (a running one ends by
        the backend's own limits; its result is cached)."""
        with self._lock:
            waiters[0] -= 1
            if waiters[0] <= 0 and future.cancel():
                self._inflight.pop(spec, None)

    def _native(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on a niced thread (a backend's ``native``), this thread waiting for it."""
        return self._native_pool.submit(fn, *args, **kwargs).result()

    def _compile(self, spec: StructuredOutputs) -> CompiledGrammar:
        """On a compile thread at the server's priority: the spec's parsing and rewriting, the checks of what the
        grammar engine built, the cache's bookkeeping (an evicted grammar is freed here: llguidance frees a lexer's
        tables holding the interpreter lock) — all of it Python, holding the interpreter lock. Only the grammar
        engine's own work (``native``: llguidance's Rust, the lock released) runs on a niced thread: a niced thread
        that holds the lock on a busy machine is scheduled rarely and keeps it long, and every other thread — the
        event loop, the engine — waits for the lock meanwhile (profiles of the hostile-request benchmark found the
        niced compile threads holding it in the rewrite of large schemas, then in freeing evicted grammars)."""
        start = time.perf_counter()
        try:
            backend = self.backend()
            prepared = backend.prepare(spec)
            before = allocated_bytes()
            grammar = backend.compile(spec, prepared, native=self._native)
        except ValueError as exc:
            with self._lock:
                self._inflight.pop(spec, None)
                self._errors[spec] = str(exc)
                while len(self._errors) > MAX_CACHED_ERRORS:
                    self._errors.popitem(last=False)
            self._observe("refused", time.perf_counter() - start)
            raise
        except BaseException:
            with self._lock:
                self._inflight.pop(spec, None)
            raise
        after = allocated_bytes()
        # what it holds: malloc's growth across the compile where that can be read (a compile beside it may add its
        # own: the weight errs high, the cache evicts sooner), never less than the backend's own estimate
        weight = max(grammar.num_bytes, after - before if before is not None and after is not None else 0)
        evicted: list[CompiledGrammar] = []
        with self._lock:
            self._inflight.pop(spec, None)
            if spec not in self._grammars and weight <= self.max_cache_bytes:
                self._grammars[spec] = (grammar, weight)
                self.cached_bytes += weight
                while self.cached_bytes > self.max_cache_bytes:
                    _, (old, old_weight) = self._grammars.popitem(last=False)
                    evicted.append(old)
                    self.cached_bytes -= old_weight
        evicted.clear()  # freed after the lock (milliseconds for a large lexer): look-ups of the cache do not wait
        self._observe("compiled", time.perf_counter() - start)
        return grammar

    def _backend_future(self) -> concurrent.futures.Future[StructuredBackend]:
        """The backend, made once on the pool (a backend that cannot be made raises its ValueError every time)."""
        with self._lock:
            if self._backend_made is None:
                self._backend_made = self._native_pool.submit(self._make_backend)
            return self._backend_made

    def backend(self) -> StructuredBackend:
        """The backend (made on the first call, on the pool; ValueError where it cannot be made)."""
        return self._backend_future().result()
