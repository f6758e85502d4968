"""What a load test runs: the endpoint, the dataset, the arrival model, the SLOs and the sweep.

Defaults follow `vllm bench serve` (1000 prompts, rate inf, burstiness 1.0, random 1024 in / 128 out,
greedy sampling) so that a run with the same flags measures the same thing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from accelkit.core.spec import Spec, spec_field
from accelkit.loadtest.structured import OutputConstraint

Endpoint = Literal["completions", "chat"]

#: path of each endpoint under the server's base URL (the public OpenAI API, nothing else)
ENDPOINT_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}

SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")

#: the random dataset's prompts are built in memory before the first request: ~6 bytes a word, so ~1.2 GB here
MAX_RANDOM_WORDS = 200_000_000
# a pass's arrivals may span at most this (7 days): a rate so low that the schedule runs past it is a typo (1e-9 for
# 1e9), and its first gap alone would keep the command waiting, silently, for the span's share of that time
MAX_PASS_SCHEDULE_S = 7 * 86400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SLO(Spec):
    """Per-request service-level objectives in milliseconds; None means not checked. A request is
    "good" when it meets every SLO given (measured value <= the SLO), as `vllm bench serve --goodput`."""

    ttft_ms: float | None = spec_field(None, min=0.0, finite=True, doc="Time to first output-bearing chunk, ms.")
    tpot_ms: float | None = spec_field(None, min=0.0, finite=True, doc="Time per output token after the first, ms.")
    e2e_ms: float | None = spec_field(
        None, min=0.0, finite=True, doc="Send to the end of the request (its finish chunk), ms.")

    @property
    def is_empty(self) -> bool:
        return self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None

    @classmethod
    def parse(cls, text: str | None, *, field: str = "--slo") -> SLO:
        """'ttft_ms=200,tpot_ms=50' → SLO; a bad key or value raises ValueError naming ``field``."""
        if text is None or not text.strip():
            return cls()
        values: dict[str, float] = {}
        for item in text.split(","):
            item = item.strip()
            if not item:
                continue
            key, sep, raw = item.partition("=")
            key = key.strip()
            if not sep:
                raise ValueError(f"{field} item {item!r} is not key=value; e.g. {field} ttft_ms=200,tpot_ms=50")
            if key not in SLO_KEYS:
                raise ValueError(f"{field} key {key!r} is not known; use {', '.join(SLO_KEYS)}")
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"{field} {key}={raw.strip()!r} is not a number of milliseconds") from None
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{field} {key}={raw.strip()} must be a positive number of milliseconds")
            if key in values:  # the last one silently won: a run judged against an SLO the user did not mean
                raise ValueError(f"{field} gives {key} twice ({key}={values[key]:g} and {key}={value:g}); give each "
                                 f"SLO once, e.g. {field} ttft_ms=200,tpot_ms=50")
            values[key] = value
        return cls(**values)


def parse_rate(text: str, *, field: str = "--request-rate") -> float:
    """'4' → 4.0, 'inf' → math.inf; anything else (or <= 0) raises ValueError naming ``field``."""
    raw = text.strip().lower()
    if raw in ("inf", "infinity"):
        return math.inf
    try:
        rate = float(raw)
    except ValueError:
        raise ValueError(f"{field} {text!r} is not valid; give requests per second (> 0) or inf") from None
    if not rate > 0 or math.isnan(rate):
        raise ValueError(f"{field} {text!r} is not valid; give requests per second (> 0) or inf")
    return rate


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadTestConfig(Spec):
    """One load test: a pass per request rate (with the random dataset each pass draws fresh prompts)."""

    base_url: str = spec_field(doc="Server root, e.g. http://127.0.0.1:8000 (a trailing /v1 is accepted; not /v1/completions).")
    model: str = spec_field(doc="Model name the server knows (`GET /v1/models`).")
    endpoint: Endpoint = spec_field("completions", doc="completions (/v1/completions) or chat (/v1/chat/completions).")
    dataset: str = spec_field("random", doc="random, sharegpt:PATH or jsonl:PATH.")
    num_prompts: int = spec_field(1000, min=1, max=1_000_000, doc="Requests per pass (warm-up requests not included).")
    request_rate: float = spec_field(math.inf, doc="Mean arrivals per second; inf sends every request at once.")
    burstiness: float = spec_field(1.0, doc="Gamma shape of the gaps: 1.0 Poisson, < 1 burstier, > 1 steadier.")
    max_concurrency: int | None = spec_field(None, min=1, max=1_000_000, doc="Most requests in flight; None: no cap.")
    random_input_len: int = spec_field(1024, min=1, max=1_000_000, doc="random dataset: prompt length in words (one token or more each, by the server's tokenizer).")
    random_output_len: int = spec_field(128, min=1, max=1_000_000,
                                        doc="random dataset (and jsonl lines without output_len): max_tokens.")
    random_range_ratio: float = spec_field(0.0, min=0.0, doc="random dataset: lengths uniform in L·[1−x, 1+x], x < 1.")
    sharegpt_output_len: int | None = spec_field(
        None, min=1, max=1_000_000, doc="sharegpt dataset: max_tokens of every request (vLLM's --sharegpt-output-len); "
        "None: the reference reply's estimated length.")
    ignore_eos: bool = spec_field(False, doc="Send ignore_eos=true (vLLM/SGLang extension) so every request runs to max_tokens.")
    structured_outputs: OutputConstraint | None = spec_field(
        None, doc="Every request asks for this structured output, and each output is checked against it.")
    guided_fields: bool = spec_field(False, doc="Send the constraint under vLLM's older guided_json/guided_regex/"
                                                "guided_choice names (servers from before structured_outputs).")
    slo: SLO = spec_field(default_factory=SLO, doc="Per-request SLOs for goodput.")
    percentiles: tuple[float, ...] = spec_field((50.0, 90.0, 99.0), doc="Percentiles to report, each in (0, 100].")
    sweep_rates: tuple[float, ...] | None = spec_field(None, doc="One pass per rate (replaces request_rate).")
    warmup: int = spec_field(1, min=0, max=1_000_000, doc="Requests sent before the measured passes and excluded from metrics.")
    warmup_timeout_s: float = spec_field(120.0, min=0.0, doc="Warm-up stops (requests cancelled) after this long.")
    api_key: str | None = spec_field(None, doc="Sent as 'Authorization: Bearer KEY'; never stored.")
    seed: int = spec_field(0, doc="Seeds the dataset sample and the arrival gaps (sweep pass i: seed + i).")
    timeout_s: float = spec_field(600.0, min=0.0, doc="Per-request limit; a request past it fails with that text.")

    def validate(self) -> None:
        _check_base_url(self.base_url)
        if not self.model.strip():
            raise ValueError("model is empty; give the name the server serves (see GET /v1/models)")
        self._check_rates()
        self._check_shape()
        self._check_limits()

    def _check_rates(self) -> None:
        """Each rate > 0 and within a schedule the pass can keep; sweep rates given once each."""
        for name, rate in [("request_rate", self.request_rate)] + [
            (f"sweep_rates[{i}]", r) for i, r in enumerate(self.sweep_rates or ())
        ]:
            if not rate > 0:
                raise ValueError(f"{name}={rate!r} is out of range; expected > 0 requests/s or inf")
            span = self.num_prompts / rate  # when the pass's last request is sent
            if span > MAX_PASS_SCHEDULE_S:
                raise ValueError(f"{name}={rate:g} spreads {self.num_prompts} requests over {span / 86400:.3g} days "
                                 f"(num_prompts / rate; the first waits one gap of {1 / rate:.3g} s on average); "
                                 f"give at least {self.num_prompts / MAX_PASS_SCHEDULE_S:.3g} requests/s, or inf")
        if self.sweep_rates is not None and not self.sweep_rates:
            raise ValueError("sweep_rates is empty; give at least one rate or leave it out")
        # each pass's samples are stored under '<name>@<rate:g>': two rates with one label would overwrite
        sweep = self.sweep_rates or ()
        labels: dict[str, int] = {}
        for j, rate in enumerate(sweep):
            i = labels.setdefault(f"{rate:g}", j)
            if i != j:
                raise ValueError(f"sweep_rates[{j}]={rate!r} repeats sweep_rates[{i}]={sweep[i]!r} (both label their "
                                 f"samples '@{rate:g}'); give each rate once, differing in the first 6 significant digits")

    def _check_shape(self) -> None:
        """The arrivals' burstiness, the prompt lengths' range, the percentiles and the API key."""
        if not (self.burstiness > 0 and math.isfinite(self.burstiness)):
            raise ValueError(f"burstiness={self.burstiness!r} is out of range; expected a finite number > 0")
        if self.random_range_ratio >= 1.0:
            raise ValueError(f"random_range_ratio={self.random_range_ratio!r} is out of range; expected 0 <= x < 1")
        for i, q in enumerate(self.percentiles):
            if not 0 < q <= 100:
                raise ValueError(f"percentiles[{i}]={q!r} is out of range; expected 0 < q <= 100")
        if not self.percentiles:
            raise ValueError("percentiles is empty; e.g. 50,90,99")
        if self.api_key is not None and not (self.api_key.isascii() and self.api_key.isprintable() and self.api_key):
            raise ValueError("api_key holds characters an HTTP Authorization header cannot carry (it must be printable "
                             "ASCII and not empty); check the key")

    def _check_limits(self) -> None:
        """Finite timeouts, structured outputs that can end, and prompts that fit in memory."""
        # finite: both go into the stored config and --json, and JSON has no Infinity
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ValueError(f"timeout_s={self.timeout_s!r} is out of range; expected a finite number of seconds > 0 "
                             "(e.g. 3600 for very long requests)")
        if not math.isfinite(self.warmup_timeout_s):
            raise ValueError(f"warmup_timeout_s={self.warmup_timeout_s!r} is out of range; expected a finite number "
                             "of seconds >= 0 (e.g. 3600 for a slow-starting server)")
        if self.structured_outputs is not None and self.ignore_eos:
            # past a complete match the server may only emit EOS (or breaks the match): every output would end at
            # max_tokens, counted truncated, and the run would measure EOS padding
            raise ValueError("ignore_eos and structured_outputs together: a constrained output ends where its match "
                             "ends; drop --ignore-eos (raise --random-output-len if outputs are cut short)")
        if self.sharegpt_output_len is not None and not self.dataset.startswith("sharegpt:"):
            raise ValueError(f"sharegpt_output_len applies to a sharegpt:PATH dataset, not {self.dataset!r}; for the "
                             "random dataset (and jsonl lines without output_len) give random_output_len")
        if self.guided_fields and self.structured_outputs is None:
            raise ValueError("guided_fields names the fields that carry structured_outputs; give structured_outputs "
                             "too, or drop guided_fields")
        words = (self.num_prompts + self.warmup) * self.random_input_len * (1 + self.random_range_ratio)
        if self.dataset == "random" and words > MAX_RANDOM_WORDS:
            # the count is of what is built: the warm-up's prompts too, each up to its longest (range ratio)
            raise ValueError(f"(num_prompts={self.num_prompts} + warmup={self.warmup}) × random_input_len="
                             f"{self.random_input_len} × (1 + random_range_ratio={self.random_range_ratio:g}) = "
                             f"{words:,.0f} words of prompts to build in memory, at their longest (at most "
                             f"{MAX_RANDOM_WORDS:,}); lower --num-prompts or --random-input-len")

    @property
    def rates(self) -> tuple[float, ...]:
        """The request rate of each pass, in run order."""
        return self.sweep_rates if self.sweep_rates is not None else (self.request_rate,)

    @property
    def root_url(self) -> str:
        """The server root: ``base_url`` without a trailing / or /v1."""
        root = self.base_url.rstrip("/")
        return root[: -len("/v1")] if root.endswith("/v1") else root

    @property
    def url(self) -> str:
        """The full endpoint URL."""
        return self.root_url + ENDPOINT_PATHS[self.endpoint]

    @property
    def models_url(self) -> str:
        """``GET /v1/models``: the names the server serves."""
        return self.root_url + "/v1/models"

    def public_dict(self) -> dict[str, Any]:
        """``to_dict`` for storage: the API key redacted, inf rates as the string 'inf' (valid JSON)."""
        data = self.to_dict()
        data["api_key"] = None if self.api_key is None else "<redacted>"
        data["request_rate"] = rate_json(self.request_rate)
        if self.sweep_rates is not None:
            data["sweep_rates"] = [rate_json(r) for r in self.sweep_rates]
        return data


def _check_base_url(url: str) -> None:
    """Parse the base URL now, so that a bad one is one line here and not an exception deep in httpx (a
    port over 65535 overflowed in the socket layer; 'http://[::1' raised InvalidURL; 'http://' failed
    every request)."""
    reason = None
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # urlsplit only checks the [...] of an IPv6 host
        parts, reason = None, f"the host does not parse ({exc})"
    if parts is not None:
        try:
            port = parts.port
        except ValueError:  # not a number, or past 65535
            port, reason = None, "the port must be a whole number in 1-65535"
        host = parts.hostname
        if parts.scheme not in ("http", "https") or not url.lower().startswith(parts.scheme + "://"):
            reason = "it must start with http:// or https://"
        elif not host:
            reason = "it has no host"
        elif any(c.isspace() or not c.isprintable() for c in host):
            reason = "the host holds a space or a control character"
        elif port == 0:
            reason = "the port must be a whole number in 1-65535"
        elif parts.query or parts.fragment:
            reason = "a base URL has no ?query or #fragment"
        elif (endpoint := _endpoint_path_in(url)) is not None:  # http://HOST:PORT/v1/completions, as vLLM users type
            name, path = endpoint
            root = url.rstrip("/")[: -len(path)] or url
            raise ValueError(f"base_url={url!r} ends in the endpoint path {path}, which loadtest adds itself: give the "
                             f"server root {root!r}" + ("" if name == "completions" else f" with --endpoint {name}")
                             + " (as vllm bench serve's --base-url)")
    if reason is not None:
        raise ValueError(f"base_url={url!r} is not valid: {reason}; expected http://HOST:PORT or https://HOST[:PORT], "
                         "e.g. http://127.0.0.1:8000")


def _endpoint_path_in(url: str) -> tuple[str, str] | None:
    """(endpoint, its path) where ``url`` ends in an endpoint's path (a trailing / too): loadtest adds that path to
    the base URL, so ``--base-url http://h:8000/v1/completions`` asked for /v1/completions/v1/completions (a 404 at
    warm-up, exit 1)."""
    path = urlsplit(url).path.rstrip("/").lower()
    return next(((name, p) for name, p in ENDPOINT_PATHS.items() if path.endswith(p)), None)


def rate_json(rate: float) -> float | str:
    """JSON has no infinity: a rate of inf is stored as the string 'inf'."""
    return "inf" if math.isinf(rate) else rate
