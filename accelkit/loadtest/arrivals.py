"""When each request is sent: gamma-distributed gaps, as `vllm bench serve` draws them.

A gap is Gamma(shape=burstiness, scale=1 / (rate · burstiness)): its mean is 1/rate whatever the
burstiness, and its coefficient of variation is 1/sqrt(burstiness). Burstiness 1.0 gives exponential gaps
(a Poisson process); below 1 the arrivals come in bursts, above 1 they are steadier. Rate inf sends every
request at time 0.

As vLLM's ``get_request`` (without a ramp-up): every request, the first included, waits one gap, and the
cumulative delays are then rescaled so that the last request arrives at exactly n / rate — the sum of n
random gaps misses that by a few percent, which moved the measured throughput from seed to seed. The
gaps come from Python's ``random.Random(seed)`` (vLLM draws them with numpy's global generator), so a
schedule is reproducible from its seed but not draw-for-draw vLLM's.
"""

from __future__ import annotations

import math
import random

__all__ = ["arrival_offsets", "describe_arrivals"]


def arrival_offsets(num_requests: int, request_rate: float, burstiness: float = 1.0, *, seed: int = 0) -> list[float]:
    """Send times in seconds from the start of a pass, non-decreasing, one per request; the last is n / rate."""
    if num_requests < 0:
        raise ValueError(f"num_requests={num_requests} is out of range; expected >= 0")
    if not request_rate > 0:
        raise ValueError(f"request_rate={request_rate!r} is out of range; expected > 0 or inf")
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise ValueError(f"burstiness={burstiness!r} is out of range; expected a finite number > 0")
    if math.isinf(request_rate):
        return [0.0] * num_requests
    rng = random.Random(seed)
    theta = 1.0 / (request_rate * burstiness)  # vLLM's gamma scale
    cumulative, t = [], 0.0
    for _ in range(num_requests):
        t += rng.gammavariate(burstiness, theta)
        cumulative.append(t)
    if t == 0.0:  # no requests, or every gap underflowed to 0 (a tiny burstiness): nothing to rescale, as vLLM
        return cumulative
    factor = num_requests / request_rate / t
    return [c * factor for c in cumulative]


def describe_arrivals(request_rate: float, burstiness: float) -> str:
    """One line for reports: 'Poisson, 4 req/s' / 'gamma (burstiness 0.5), 4 req/s' / 'all at once (rate inf)'."""
    if math.isinf(request_rate):
        return "all at once (rate inf)"
    shape = "Poisson" if burstiness == 1.0 else f"gamma (burstiness {burstiness:g}, CV {1 / math.sqrt(burstiness):.3g})"
    return f"{shape}, {request_rate:g} req/s"
