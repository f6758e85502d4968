"""Fault isolation for one engine step: whose request a failure belongs to, and whether the engine survives it.

A step runs the tokens of many requests as one batch, so an exception from the model runner does not say
whose tokens caused it. :func:`execute_isolating` re-runs a failed batch in halves until every failure is
pinned to single requests; the rest of the batch gets its tokens as if nothing had happened. Re-running is
safe because a step writes only the K/V slots of its own new tokens (private blocks: a cached prefix block is
full and never written) and no bookkeeping advances until ``execute`` returns — the retry recomputes the same
slots. A failing batch of N requests costs at most ``2N - 1`` extra runs, and only when something failed.

A sequence that ended while the failed attempt ran (the engine's overlapped postprocessing of the previous
step met a stop string) is never re-run: its blocks and its host block-table row are already back in their
pools, possibly another sequence's by now, so a re-run would write its K/V into someone else's blocks.

When no request of a step succeeded, the failure may be the device's rather than a request's (a CUDA
"sticky" error such as an illegal memory access fails every later call). :func:`canary_ok` then runs one
token of a fresh one-token sequence: if even that fails, the engine is dead (:class:`EngineDeadError`, and
``/health`` says why); if it succeeds, the failed requests were the problem and the engine carries on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from accelkit.serve.block_manager import BlockManager
from accelkit.serve.sampling import SamplingParams
from accelkit.serve.scheduler import ScheduledBatch
from accelkit.serve.sequence import Sequence

log = logging.getLogger("accelkit.serve")

Execute = Callable[[ScheduledBatch], list[int | None]]
_MAX_MESSAGE = 500  # characters of an exception's text that reach a client


class EngineDeadError(RuntimeError):
    """The engine cannot run any step any more (device lost, bookkeeping beyond repair)."""


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception on one line, cut to a length fit for an HTTP error body or a CLI error."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def execute_isolating(execute: Execute, batch: ScheduledBatch, *, retry: Execute | None = None,
                      settle: Callable[[], None] | None = None) -> tuple[list[int | None], dict[int, Exception]]:
    """Run ``batch``; on an exception, bisect it to find the requests that fail on their own.

    Returns ``(sampled, failures)``: ``sampled[i]`` as ``execute`` gives it for every row that ran (None for
    failed rows, and for rows whose sequence had finished before they could be re-run), and ``failures`` maps
    a failed row of ``batch`` to its exception. Raises only :class:`EngineDeadError` (the engine, not a request,
    failed: nothing to bisect) and ``KeyboardInterrupt`` and friends.

    After a failed first attempt, ``settle`` runs once (the engine finishes the previous step's postprocessing
    there, if the failure came before it ran); the re-runs then go through ``retry`` (default ``execute``) and
    leave out every sequence finished by then.
    """
    tokens, first = _attempt(execute, batch)
    if first is None:
        return tokens, {}
    if settle is not None:
        settle()
    retry = retry or execute
    sampled: list[int | None] = [None] * len(batch.seqs)
    failures: dict[int, Exception] = {}

    def run(rows: list[int]) -> Exception | None:
        sub = ScheduledBatch(seqs=[batch.seqs[i] for i in rows], num_tokens=[batch.num_tokens[i] for i in rows])
        tokens, exc = _attempt(retry, sub)
        if exc is None:
            for i, token in zip(rows, tokens, strict=True):
                sampled[i] = token
        return exc

    def bisect(rows: list[int], exc: Exception) -> None:
        """``rows`` failed together with ``exc``; run each half on its own."""
        if len(rows) == 1:
            failures[rows[0]] = exc
            return
        mid = len(rows) // 2
        for part in (rows[:mid], rows[mid:]):
            sub_exc = run(part)
            if sub_exc is not None:
                bisect(part, sub_exc)  # outside the except clause: no chained tracebacks in the log

    rows = [i for i, seq in enumerate(batch.seqs) if not seq.is_finished]
    if len(rows) < len(batch.seqs):  # the batch that failed is not the one left: try what is left first
        first = run(rows) if rows else None
        if first is None:
            return sampled, failures
    bisect(rows, first)
    return sampled, failures


def _attempt(execute: Execute, batch: ScheduledBatch) -> tuple[list[int | None], Exception | None]:
    try:
        return execute(batch), None
    except EngineDeadError:
        raise
    except Exception as exc:
        return [], exc


def canary_ok(execute: Execute, release: Callable[[Sequence], None], block_manager: BlockManager) -> bool | None:
    """Run the one-token prefill of a throwaway sequence. True: the device computes; False: it does not;
    None: no KV block was free to try (the caller keeps going — the next step tells)."""
    seq = Sequence("accelkit-canary", [0], SamplingParams.greedy(1))
    if not block_manager.allocate(seq, [], 1):
        return None
    try:
        execute(ScheduledBatch(seqs=[seq], num_tokens=[1]))
        return True
    except Exception as exc:
        log.error("engine canary failed: %s", describe(exc), exc_info=exc)
        return False
    finally:
        block_manager.free(seq)
        release(seq)
