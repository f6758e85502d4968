"""`accelkit monitor`: serve ``/metrics`` for Prometheus — device collectors (NVML, amdsmi), the host,
job metrics from ``track()`` and anything else in accelkit's registry.

A sampler thread reads the hardware every ``interval`` seconds; scrapes return the latest sample, so a
scrape never waits on NVML and CPU utilisation is averaged over the interval. Device families from
several backends are merged, so each DCGM name appears once per scrape.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
import time
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.metrics_core import Metric

from accelkit.core import UserError
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
        self._closed = False  # stop() ran: the device libraries are closed
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
        """Bind the HTTP server, then register the collectors and start sampling; returns the bound port.

        The port is bound first: a busy port then leaves nothing behind (no sampler thread, no collectors in
        the registry, which would make every later exporter in the process fail on duplicate series).
        An exporter serves once: ``stop()`` closes its device libraries, so a new one is needed after it."""
        if self._closed:
            raise UserError("this Exporter was stopped (its device libraries are closed); create a new "
                            "Exporter(...) to serve again")
        if self._server is not None:
            raise UserError(f"this Exporter already serves on port {self.port}; start() it once (a second "
                            "endpoint needs its own Exporter(...) and registry)")
        host, port = self.config.host, self.config.port
        try:
            server, _ = start_http_server(port, addr=host, registry=self.registry)
        except (OSError, UnicodeError) as exc:  # UnicodeError: a host name the resolver cannot encode
            why = getattr(exc, "strerror", None) or str(exc)
            fix = ("pick another port (--port, ExporterConfig(port=...); 0 picks a free one) or stop what holds it"
                   if getattr(exc, "errno", None) in (errno.EADDRINUSE, errno.EACCES)
                   else "use an address of this machine as host (--host, ExporterConfig(host=...)), e.g. 127.0.0.1")
            raise UserError(f"cannot listen on {host}:{port} ({why}); {fix}") from exc
        registered = []
        try:
            self.sample_once()
            for view in (self.host, self._device_view):
                self.registry.register(view)
                registered.append(view)
        except BaseException as exc:  # serve nothing, leave the registry as it was
            for view in registered:
                self.registry.unregister(view)
            server.shutdown()
            server.server_close()
            if isinstance(exc, ValueError):  # prometheus' duplicate series: another exporter is in this registry
                raise UserError("another Exporter's collectors are already in this registry; stop() that one "
                                "first, or give this one its own registry=CollectorRegistry()") from exc
            raise
        self._server, self.port = server, server.server_port
        self._thread = threading.Thread(target=self._loop, name="accelkit-monitor-sampler", daemon=True)
        self._thread.start()
        return self.port

    def stop(self) -> None:
        """Stop serving and sampling, unregister the collectors and close the device libraries (idempotent;
        also closes an exporter that never started, as ``--once`` does)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:  # before closing NVML: a sample may still be reading it
            self._thread.join(timeout=10.0)  # the wait wakes at once; only a sample in progress delays it
        for view in (self.host, self._device_view):
            with contextlib.suppress(KeyError):
                self.registry.unregister(view)
        for c in self.devices:
            c.close()
