"""What the HTML report needs to draw a load test: the latency-throughput curve and the TTFT/TPOT/ITL/E2E
distributions per rate, from a stored Measurement (or its dict). Pure data, no plotting library."""

from __future__ import annotations

import math
from typing import Any

from accelkit.core import Measurement

__all__ = ["plot_data"]

SERIES = ("ttft_s", "tpot_s", "itl_s", "e2e_s")


def _rate_value(rate: float | str) -> float:
    return math.inf if rate == "inf" else float(rate)


def plot_data(result: Measurement | dict[str, Any]) -> dict[str, Any]:
    """``{"curve": [points sorted by rate], "distributions": {rate label: {"ttft_ms": [...], …}},
    "x": "request_throughput", "goodput_definition": …}``. Each curve point has rate (number or 'inf'),
    request_throughput, output_throughput, goodput and ttft_ms/tpot_ms/itl_ms/e2e_ms as {p50, p90, p99}."""
    data = result.to_dict() if isinstance(result, Measurement) else result
    if data.get("kind") != "loadtest":
        raise ValueError(f"plot_data needs a 'loadtest' result, got kind={data.get('kind')!r}")
    details, samples = data.get("details", {}), data.get("samples", {})
    curve = sorted(details.get("curve", []), key=lambda p: _rate_value(p["rate"]))
    distributions: dict[str, dict[str, list[float]]] = {}
    rates = [p["rate"] for p in details.get("curve", [])]
    for rate in rates:
        label = f"{_rate_value(rate):g}"
        suffix = f"@{label}" if len(rates) > 1 else ""
        distributions[label] = {
            name.replace("_s", "_ms"): [x * 1e3 for x in samples.get(name + suffix, [])] for name in SERIES
        }
    return {
        "curve": curve,
        "distributions": distributions,
        "x": "request_throughput",
        "goodput_definition": details.get("goodput_definition"),
        "title": data.get("name"),
    }
