"""`accelkit monitor`: serve ``/metrics`` for Prometheus — device collectors (NVML, amdsmi), the host,
job metrics from ``track()`` and anything else in accelkit's registry.

A sampler thread reads the hardware every ``interval`` seconds; scrapes return the latest sample, so a
scrape never waits on NVML and CPU utilisation is averaged over the interval. Device families from
several backends are merged, so each DCGM name appears once per scrape.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.metrics_core import Metric

from accelkit.monitor.collectors import AmdSmiCollector, Collector, HostCollector, NvmlCollector
from accelkit.monitor.config import ExporterConfig
from accelkit.monitor.registry import REGISTRY

log = logging.getLogger("accelkit.monitor")


def exposition_of(families: list[Metric]) -> bytes:
    """Prometheus text format of some families (outside any registry)."""

    class _Fixed:
        def collect(self) -> Iterator[Metric]:
            return iter(families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed())
    return generate_latest(registry)


class _DeviceMetrics:
    """Merges the DCGM-named families of every active device backend (one family per name)."""

    def __init__(self, backends: list[Collector]):
        self.backends = backends

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for backend in self.backends:
            for family in backend.collect():
                if family.name not in merged:  # a new family per scrape: the backends' samples stay as they are
                    merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                merged[family.name].samples.extend(family.samples)
        yield from merged.values()


class Exporter:
    """Samples collectors in a background thread and serves them through ``registry``."""

    def __init__(self, config: ExporterConfig | None = None, *, registry: CollectorRegistry = REGISTRY):
        self.config = config or ExporterConfig()
        self.registry = registry
        self.host = HostCollector()
        candidates: list[Collector] = [NvmlCollector(), AmdSmiCollector()]
        active = [c for c in candidates if c.available() is None]
        #: why each device library is not in use — printed once by the CLI, never on every scrape
        self.notes = [f"{c.name}: {c.available()}" for c in candidates if c.available() is not None]
        if self.host.rapl_note:
            self.notes.append(f"host: {self.host.rapl_note}")
        for c in candidates:
            if c not in active:
                c.close()
        # with no GPU the (inactive) NVML collector still declares the DCGM families, without series
        self.devices = active or [candidates[0]]
        self.has_gpu = bool(active)
        self._collectors = [self.host, *self.devices]
        self._device_view = _DeviceMetrics(self.devices)
        self._failing: set[str] = set()  # collectors whose last sample raised
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: WSGIServer | None = None
        self.port: int | None = None

    def sample_once(self) -> None:
        """Sample every collector; one that raises is logged (the first failure, and again after it
        recovered) and shows no series until it reads again — the sampler thread never dies of it."""
        for c in self._collectors:
            try:
                c.sample()
            except Exception as exc:
                if c.name not in self._failing:
                    log.warning("monitor: the %s collector failed (%s: %s); its series are left out until it "
                                "reads again", c.name, type(exc).__name__, exc)
                self._failing.add(c.name)
            else:
                if c.name in self._failing:
                    log.warning("monitor: the %s collector reads again", c.name)
                self._failing.discard(c.name)

    def collect_once(self) -> list[Metric]:
        """Sample once and return the host and device families (``--once``; no server). CPU utilisation is
        the change between two readings, so the sample waits until min(interval, 1 s) has passed since the
        host collector's first: taken at once, it covered the few ms since start-up and read 0 or 100 %."""
        time.sleep(max(0.0, min(self.config.interval, 1.0) - self.host.seconds_since_cpu_reading()))
        self.sample_once()
        return [*self.host.collect(), *self._device_view.collect()]

    def _loop(self) -> None:
        while not self._stop.wait(self.config.interval):
            self.sample_once()

    def start(self) -> int:
        """Register the collectors, start sampling and the HTTP server; returns the bound port."""
        self.sample_once()
        self.registry.register(self.host)
        self.registry.register(self._device_view)
        self._thread = threading.Thread(target=self._loop, name="accelkit-monitor-sampler", daemon=True)
        self._thread.start()
        self._server, _ = start_http_server(self.config.port, addr=self.config.host, registry=self.registry)
        self.port = self._server.server_port
        return self.port

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for view in (self.host, self._device_view):
            with contextlib.suppress(KeyError):
                self.registry.unregister(view)
        for c in self.devices:
            c.close()
