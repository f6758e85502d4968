"""Collector plug-in shape: a config, ``available()`` (None, or why this collector cannot run here),
``sample()`` (read the hardware; called by the sampler thread every interval) and ``collect()`` (yield
the last sample as metric families; called on each scrape, never touches the hardware)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client.metrics_core import Metric


class Collector:
    """Base class; subclasses set ``name`` and implement ``available``, ``sample`` and ``families``."""

    name = "collector"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: list[Metric] = []

    def available(self) -> str | None:
        """None when the collector can run here, else one sentence saying why not."""
        return None

    def families(self) -> list[Metric]:
        """Read the hardware now and return the metric families."""
        raise NotImplementedError

    def sample(self) -> None:
        """Read the hardware; when that raises, the last sample is dropped (scrapes show no series — a gap,
        not a frozen value) and the error goes to the caller."""
        try:
            families = self.families()
        except Exception:
            with self._lock:
                self._last = []
            raise
        with self._lock:
            self._last = families

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            yield from self._last

    def close(self) -> None:
        """Release library handles (NVML shutdown …)."""
