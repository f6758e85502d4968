"""Load tester for any OpenAI-compatible server (accelkit serve, vLLM, TGI, SGLang), measuring as
`vllm bench serve` does. No torch import.

``run_loadtest(LoadTestConfig(...)) -> Measurement`` (``await run_loadtest_async(...)`` in async code) · ``plot_data(result)`` for the report ·
``compute_metrics(records, duration_s)`` for the pure aggregation · ``OutputConstraint`` (or
``parse_constraint("regex:[0-9]+")``) as ``LoadTestConfig(structured_outputs=...)`` to count valid outputs.
"""

from __future__ import annotations

from typing import Any

from accelkit.loadtest.config import SLO, LoadTestConfig, parse_rate
from accelkit.loadtest.metrics import RequestRecord, compute_metrics
from accelkit.loadtest.plot import plot_data
from accelkit.loadtest.structured import OutputConstraint, parse_constraint

__all__ = ["SLO", "LoadTestConfig", "OutputConstraint", "RequestRecord", "compute_metrics", "parse_constraint",
           "parse_rate", "plot_data", "run_loadtest", "run_loadtest_async"]


def __getattr__(name: str) -> Any:
    if name in ("run_loadtest", "run_loadtest_async"):  # imports httpx: only when a test is run
        from accelkit.loadtest import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
