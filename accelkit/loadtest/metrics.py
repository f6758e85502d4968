"""Per-request records and their aggregation, with `vllm bench serve`'s definitions (pure Python).

A request's *token times* are its output-bearing chunks, then its finish chunk (the first with a
``finish_reason``) when that one carried no text: a request ended by EOS streams the EOS step so, and the
server's usage counts it. For the requests that succeeded (a token time and no error):

- TTFT  = first token time − send time (the first text chunk; the finish chunk when no text came)
- ITL   = gaps between consecutive token times, pooled over all requests
- TPOT  = (E2E − TTFT) / (output tokens − 1), per request, only when output tokens > 1
- E2E   = last token time − send time (the finish chunk, or the last text chunk if it came later)
- request throughput      = completed requests / duration
- output token throughput = Σ completion tokens / duration
- total token throughput  = (Σ prompt tokens + Σ completion tokens) / duration
- peak concurrency = most successful requests in flight at once, send → last token time (failed ones not counted)
- goodput = requests meeting every SLO given / duration. This is vLLM's *per-request* goodput, not
  DistServe's "highest rate at which X% of requests meet the SLOs". As in vLLM, a request with one
  output token counts TPOT = 0 for the SLO check.

``duration`` is the wall time of the pass, from its start (first arrival) to the end of the last request.
Token counts come from the server's ``usage``; a request without usage counts its token times and its
target prompt length instead (and the result says how many did). Means and percentiles are as
numpy computes them (linear interpolation); ``std`` is the population standard deviation (numpy's
default, which vLLM reports). An empty distribution is reported as None, where vLLM prints 0.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from accelkit.core.stats import min_samples_for, percentile, summarize
from accelkit.loadtest.config import SLO

__all__ = ["RequestRecord", "compute_metrics", "distribution", "http_429_count", "is_backed", "peak_concurrency", "pkey"]


@dataclass(slots=True)
class RequestRecord:
    """What one request saw. Times are seconds: ``send_s``/``done_s`` from the start of the pass,
    ``chunk_times_s`` from ``send_s`` (so ``chunk_times_s[0]`` is the TTFT)."""

    index: int
    input_len: int  #: target prompt length from the dataset
    max_tokens: int  #: output length asked for
    scheduled_s: float = 0.0  #: arrival time drawn for it
    send_s: float | None = None  #: when the HTTP request went out (after any concurrency wait)
    done_s: float | None = None  #: when the response ended or failed
    chunk_times_s: list[float] = field(default_factory=list)  #: each output-bearing chunk, from send
    finish_s: float | None = None  #: the first chunk with a finish_reason, from send (None: none came)
    finish_reason: str | None = None  #: its finish_reason ('stop', 'length', …)
    prompt_tokens: int | None = None  #: usage.prompt_tokens, when the server sent usage
    completion_tokens: int | None = None  #: usage.completion_tokens
    status_code: int | None = None
    error: str | None = None
    output_text: str | None = None  #: the output (chat: delta.content), kept only with structured outputs
    validity: str | None = None  #: structured outputs: 'valid', 'invalid' or 'truncated' (None: not checked)
    invalid_reason: str | None = None  #: why an invalid output breaks the constraint

    @property
    def token_times_s(self) -> list[float]:
        """The output-bearing chunks, then the finish chunk when it came after them carrying no text (the
        EOS step): the times TTFT, ITL, TPOT and E2E are taken from."""
        t = self.chunk_times_s
        if self.finish_s is not None and (not t or self.finish_s > t[-1]):
            return [*t, self.finish_s]
        return t

    @property
    def success(self) -> bool:
        return self.error is None and bool(self.token_times_s)

    @property
    def ttft_s(self) -> float | None:
        t = self.token_times_s
        return t[0] if t else None

    @property
    def e2e_s(self) -> float | None:
        t = self.token_times_s
        return t[-1] if t else None

    @property
    def itl_s(self) -> list[float]:
        return [b - a for a, b in itertools.pairwise(self.token_times_s)]

    @property
    def output_tokens(self) -> int:
        """usage.completion_tokens, else the number of token times (a text-less finish chunk counts as the
        EOS step, as the server's usage would)."""
        return self.completion_tokens if self.completion_tokens is not None else len(self.token_times_s)

    @property
    def input_tokens(self) -> int:
        """usage.prompt_tokens, else the dataset's target length."""
        return self.prompt_tokens if self.prompt_tokens is not None else self.input_len

    @property
    def tpot_s(self) -> float | None:
        """(E2E − TTFT) / (output tokens − 1); None with fewer than 2 output tokens."""
        n = self.output_tokens
        if not self.success or n <= 1:
            return None
        return (self.e2e_s - self.ttft_s) / (n - 1)  # type: ignore[operator]

    def to_dict(self) -> dict[str, Any]:
        """Compact JSON record (chunk times are summarised; the ITL samples keep them; the output text is not kept).
        ``validity``/``invalid_reason`` only when the output was checked."""
        checked = {} if self.validity is None else {"validity": self.validity, "invalid_reason": self.invalid_reason}
        return {
            "index": self.index, "input_len_target": self.input_len, "max_tokens": self.max_tokens,
            "scheduled_s": _r(self.scheduled_s), "send_s": _r(self.send_s), "done_s": _r(self.done_s),
            "ttft_s": _r(self.ttft_s), "e2e_s": _r(self.e2e_s), "tpot_s": _r(self.tpot_s),
            "num_output_chunks": len(self.chunk_times_s), "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "status_code": self.status_code, "error": self.error,
            **checked,
        }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def pkey(q: float) -> str:
    """50 → 'p50', 99.9 → 'p99.9'."""
    return f"p{q:g}"


def distribution(samples_s: Sequence[float], percentiles: Iterable[float], *, scale: float = 1e3) -> dict[str, Any]:
    """n, mean, median, std (population), min, max and the percentiles, in seconds × ``scale``
    (ms by default); every statistic None when there are no samples. ``unbacked`` lists the
    percentiles given that too few samples back (MLPerf LoadGen's rule for any percentile,
    :func:`accelkit.core.stats.min_samples_for`)."""
    qs = sorted(set(percentiles))
    if not samples_s:
        return {"n": 0, "mean": None, "median": None, "std": None, "min": None, "max": None,
                **{pkey(q): None for q in qs}, "unbacked": []}
    xs = sorted(samples_s)
    stats = summarize(xs)
    std_pop = math.sqrt(math.fsum((x - stats.mean) ** 2 for x in xs) / len(xs))
    return {
        "n": stats.n, "mean": stats.mean * scale, "median": stats.median * scale, "std": std_pop * scale,
        "min": stats.min * scale, "max": stats.max * scale,
        **{pkey(q): percentile(xs, q) * scale for q in qs},
        "unbacked": [pkey(q) for q in qs if not is_backed(q, stats.n)],
    }


def is_backed(q: float, n: int) -> bool:
    """Whether n samples back the q-th percentile (LoadGen's rule; p100 never)."""
    need = min_samples_for(q)
    return need is not None and n >= need


def peak_concurrency(records: Iterable[RequestRecord]) -> int:
    """Most successful requests in flight at once, each from its send to its last token time (send + E2E), as vLLM's
    "Peak concurrent requests": a failed request is not counted — a refusal (HTTP 429 …) held no place on the server."""
    events = []
    for r in records:
        if r.success and r.send_s is not None:
            events += [(r.send_s, 1), (r.send_s + r.e2e_s, -1)]  # type: ignore[operator]
    events.sort(key=lambda e: (e[0], e[1]))  # at a tie, an end before a start (half-open intervals)
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def http_429_count(records: Iterable[RequestRecord]) -> int:
    """Requests the server refused with HTTP 429 Too Many Requests (a queue or connection limit)."""
    return sum(r.status_code == 429 for r in records)


def is_good(record: RequestRecord, slo: SLO) -> bool:
    """Meets every SLO given (<=). A successful request with one output token has TPOT 0 here (vLLM)."""
    if not record.success:
        return False
    checks = ((slo.ttft_ms, record.ttft_s), (slo.tpot_ms, record.tpot_s or 0.0), (slo.e2e_ms, record.e2e_s))
    return all(limit is None or value * 1e3 <= limit for limit, value in checks)  # type: ignore[operator]


def compute_metrics(
    records: Sequence[RequestRecord], duration_s: float, *, percentiles: Sequence[float] = (50, 90, 99),
    slo: SLO | None = None,
) -> dict[str, Any]:
    """The metrics of one pass. Distributions are in ms; throughputs per second of ``duration_s``."""
    if duration_s <= 0:
        raise ValueError(f"duration_s={duration_s!r} is out of range; expected > 0")
    ok = [r for r in records if r.success]
    failed = [r for r in records if not r.success]
    total_input = sum(r.input_tokens for r in ok)
    total_output = sum(r.output_tokens for r in ok)
    qs = sorted(set(percentiles) | {50.0, 90.0, 99.0})
    slo = slo or SLO()
    good = sum(is_good(r, slo) for r in ok) if not slo.is_empty else None
    return {
        "num_requests": len(records),
        "completed": len(ok),
        "failed": len(failed),
        "duration_s": duration_s,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(ok) / duration_s,
        "output_throughput": total_output / duration_s,
        "total_token_throughput": (total_input + total_output) / duration_s,
        "goodput": None if good is None else good / duration_s,
        "good_requests": good,
        **_latencies(ok, qs),
        "peak_concurrency": peak_concurrency(records),
        "http_429": http_429_count(records),
        "lengths": _lengths(records, ok, qs),
        "failures": _failures(failed),
    }


def _latencies(ok: Sequence[RequestRecord], qs: Sequence[float]) -> dict[str, Any]:
    """TTFT, TPOT, inter-token and end-to-end distributions (ms) of the successful requests."""
    return {
        "ttft_ms": distribution([r.ttft_s for r in ok], qs),  # type: ignore[misc]
        "tpot_ms": distribution([t for r in ok if (t := r.tpot_s) is not None], qs),
        "itl_ms": distribution([g for r in ok for g in r.itl_s], qs),
        "e2e_ms": distribution([r.e2e_s for r in ok], qs),  # type: ignore[misc]
    }


def _lengths(records: Sequence[RequestRecord], ok: Sequence[RequestRecord], qs: Sequence[float]) -> dict[str, Any]:
    """The lengths asked for (every request) and served (the successful ones), in tokens."""
    return {
        "input_target": distribution([r.input_len for r in records], qs, scale=1),
        "max_tokens": distribution([r.max_tokens for r in records], qs, scale=1),
        "prompt_tokens": distribution([r.prompt_tokens for r in ok if r.prompt_tokens is not None], qs, scale=1),
        "completion_tokens": distribution([r.output_tokens for r in ok], qs, scale=1),
        "requests_without_usage": sum(r.completion_tokens is None for r in ok),
    }


def _failures(failed: Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """Each distinct error, most common first, with its count and the first ten requests it ended."""
    errors = Counter(r.error or "no output-bearing chunk" for r in failed)
    return [{"error": text, "count": n,
             "request_indexes": [r.index for r in failed if (r.error or "no output-bearing chunk") == text][:10]}
            for text, n in errors.most_common()]
