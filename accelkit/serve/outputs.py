"""What the engine hands back: per-request outputs with timings, and engine-wide counters."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestMetrics:
    """Monotonic timestamps (``time.monotonic()``, seconds) and token counts of one request."""

    arrival_time: float
    num_prompt_tokens: int
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    num_generation_tokens: int = 0
    num_preemptions: int = 0

    @property
    def queue_time_s(self) -> float | None:
        return None if self.first_scheduled_time is None else self.first_scheduled_time - self.arrival_time

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def prefill_time_s(self) -> float | None:
        if self.first_token_time is None or self.first_scheduled_time is None:
            return None
        return self.first_token_time - self.first_scheduled_time

    @property
    def decode_time_s(self) -> float | None:
        if self.last_token_time is None or self.first_token_time is None:
            return None
        return self.last_token_time - self.first_token_time

    @property
    def e2e_s(self) -> float | None:
        return None if self.finished_time is None else self.finished_time - self.arrival_time


@dataclass(slots=True)
class RequestOutput:
    """The state of one request after a step. ``new_*`` is what this step added (for streaming);
    ``text``/``token_ids`` are everything generated so far. ``finish_reason``: stop | length | abort | error;
    with ``error``, the request failed inside the engine (``error`` says why) and only this request ended."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    text: str
    token_ids: list[int]
    new_text: str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None
    metrics: RequestMetrics
    error: str | None = None


@dataclass(slots=True)
class EngineStats:
    """A snapshot for dashboards; counters are monotonic, under vLLM's metric names in comments."""

    num_running: int  # vllm:num_requests_running
    num_waiting: int  # vllm:num_requests_waiting
    kv_cache_usage: float  # vllm:kv_cache_usage_perc (a fraction, 0..1)
    num_preemptions: int  # vllm:num_preemptions
    prefix_cache_queries: int  # vllm:prefix_cache_queries (tokens)
    prefix_cache_hits: int  # vllm:prefix_cache_hits (tokens)
    prompt_tokens: int  # vllm:prompt_tokens
    generation_tokens: int  # vllm:generation_tokens
    num_steps: int
    last_step_num_tokens: int  # vllm:iteration_tokens_total observes this per step
    num_blocks: int
    block_size: int
    requests_finished: dict[str, int] = field(default_factory=dict)  # vllm:request_success by finished_reason
