"""Collector plug-in shape: a config, ``available()`` (None, or why this collector cannot run here),
``sample()`` (read the hardware; called by the collector's sampler thread every interval) and ``collect()``
(yield the last sample as metric families; called on each scrape, never touches the hardware)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from prometheus_client.metrics_core import Metric


class Collector:
    """Base class; subclasses set ``name`` and implement ``available``, ``sample`` and ``families``."""

    name = "collector"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: list[Metric] = []
        #: monotonic time the last good read finished (None before one): the exporter leaves a sample out once
        #: it is too old — a read that never returns (a hung driver call) must not freeze the series
        self.read_at: float | None = None
        #: monotonic time the read in progress began (None between reads): the exporter does not close a
        #: library under a call still running in it
        self.reading_since: float | None = None

    def available(self) -> str | None:
        """None when the collector can run here, else one sentence saying why not."""
        return None

    def families(self) -> list[Metric]:
        """Read the hardware now and return the metric families."""
        raise NotImplementedError

    def sample(self) -> None:
        """Read the hardware; when that raises, the last sample is dropped (scrapes show no series — a gap,
        not a frozen value) and the error goes to the caller."""
        self.reading_since = time.monotonic()
        try:
            families = self.families()
        except Exception:
            with self._lock:
                self._last = []
            raise
        finally:
            self.reading_since = None
        with self._lock:
            self._last, self.read_at = families, time.monotonic()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            yield from self._last

    def close(self) -> None:
        """Release library handles (NVML shutdown …)."""
