"""`accelkit monitor`: serve ``/metrics`` for Prometheus — device collectors (NVML, amdsmi), the host,
job metrics from ``track()`` and anything else in accelkit's registry.

Each collector (host, NVML, amdsmi) has its own sampler thread that reads the hardware every ``interval``
seconds; scrapes return the latest sample, so a scrape never waits on NVML and CPU utilisation is averaged
over the interval. A read that never returns (a hung driver call) holds up its own collector only: once its
last good read is older than max(3 × interval, 5 s) its series are left out — a gap, never a frozen value —
and the others go on. Device families from several backends are merged, so each DCGM name appears once per
scrape. ``/metrics`` is always Prometheus' text format 0.0.4, as ``accelkit serve`` writes it.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import Metric

from accelkit.core import UserError
from accelkit.monitor.collectors import AmdSmiCollector, Collector, HostCollector, NvmlCollector
from accelkit.monitor.config import ExporterConfig
from accelkit.monitor.registry import REGISTRY

log = logging.getLogger("accelkit.monitor")

#: a collector whose last good read is older than this many sampler intervals, and than STALE_FLOOR_S, is stuck
#: in a read (a hung driver call): its series are left out until it reads again
STALE_INTERVALS = 3
STALE_FLOOR_S = 5.0
#: how long stop() waits for the reads in progress, all together, before leaving their libraries open
STOP_WAIT_S = 10.0


def host_in_url(host: str) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets (``[::1]``); ``http://::1:9400/metrics`` cannot
    be fetched (found in review)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def metrics_app(registry: CollectorRegistry) -> Callable[..., Iterable[bytes]]:
    """The WSGI app behind ``/metrics`` (any path, as prometheus_client's): Prometheus' text format 0.0.4
    whatever the Accept header asks, gzip when accepted.

    Not prometheus_client's own server (found in review): it answers Prometheus 2.x's OpenMetrics-first Accept
    header with OpenMetrics, where (0.26) a name with a colon is declared as it is but its samples go out
    escaped — ``# TYPE vllm:prompt_tokens counter`` over ``vllm_prompt_tokens_total`` — so Prometheus stored
    ``vllm_*`` names and the dashboard's ``vllm:*`` queries came back empty. ``accelkit serve`` answers the same."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        method = environ["REQUEST_METHOD"]
        if method == "OPTIONS":
            status, headers, body = "200 OK", [("Allow", "OPTIONS,GET,HEAD")], b""
        elif method not in ("GET", "HEAD"):  # HEAD (curl -I, an uptime check) was a 405
            status, headers = "405 Method Not Allowed", [("Allow", "OPTIONS,GET,HEAD")]
            body = f"# HTTP 405: {method}; use GET\n".encode()
        elif environ.get("PATH_INFO") == "/favicon.ico":
            status, headers, body = "200 OK", [], b""
        else:
            names = parse_qs(environ.get("QUERY_STRING", "")).get("name[]")
            body = generate_latest(registry.restricted_registry(names) if names else registry)
            status, headers = "200 OK", [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)]
            if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
                body = gzip.compress(body)
                headers.append(("Content-Encoding", "gzip"))
        headers.append(("Content-Length", str(len(body))))
        start_response(status, headers)
        return [] if method == "HEAD" else [body]  # HEAD: GET's headers, no body

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line per scrape on stderr."""


def _serve(host: str, port: int, registry: CollectorRegistry) -> WSGIServer:
    """Bind ``host:port`` (IPv4 or IPv6, as the address resolves) and serve ``registry`` from a daemon thread."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]

    class Server(ThreadingMixIn, WSGIServer):
        address_family = family
        daemon_threads = True  # a scrape in progress never holds up the exit

    server = make_server(str(address[0]), port, metrics_app(registry), Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="accelkit-monitor-http", daemon=True).start()
    return server


def exposition_of(families: list[Metric]) -> bytes:
    """Prometheus text format of some families (outside any registry)."""

    class _Fixed:
        def collect(self) -> Iterator[Metric]:
            return iter(families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed())
    return generate_latest(registry)


class _LatestSamples:
    """The latest samples of some collectors, for the registry: one family per name (the DCGM-named families of
    several device backends merge), and a collector whose sample ``fresh`` refuses (stuck in a read) left out."""

    def __init__(self, backends: list[Collector], fresh: Callable[[Collector], bool] = lambda _: True):
        self.backends = backends
        self.fresh = fresh

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for backend in self.backends:
            if not self.fresh(backend):
                continue
            for family in backend.collect():
                if family.name not in merged:  # a new family per scrape: the backends' samples stay as they are
                    merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                merged[family.name].samples.extend(family.samples)
        yield from merged.values()


class Exporter:
    """Samples each collector in a background thread of its own and serves them through ``registry``."""

    def __init__(self, config: ExporterConfig | None = None, *, registry: CollectorRegistry = REGISTRY):
        # checked before any device library is opened: a dict or a port number was an AttributeError at start()
        # ('dict' object has no attribute 'interval'), after NVML had been initialised (found by the Python API hunt)
        if config is not None and not isinstance(config, ExporterConfig):
            raise TypeError(f"config={config!r} is not an ExporterConfig; pass ExporterConfig(host=..., port=..., "
                            "interval=...), or nothing for 127.0.0.1:9400")
        if not isinstance(registry, CollectorRegistry):
            raise TypeError(f"registry={registry!r} is not a prometheus_client CollectorRegistry; leave it out for "
                            "accelkit's (accelkit.monitor.REGISTRY) or pass CollectorRegistry()")
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
        #: a last good read older than this is a read stuck in the library: its series are left out
        self.stale_after_s = max(STALE_INTERVALS * self.config.interval, STALE_FLOOR_S)
        self._host_view = _LatestSamples([self.host], self._fresh)
        self._device_view = _LatestSamples(self.devices, self._fresh)
        self._failing: set[str] = set()  # collectors whose last sample raised
        self._stuck: set[str] = set()  # collectors left out because their last good read is too old
        self._said = threading.Lock()  # the sets above are changed by the sampler threads and the scrapes
        self._stop = threading.Event()
        self._threads: list[tuple[threading.Thread, Collector]] = []  # each collector's sampler
        self._server: WSGIServer | None = None
        self._closed = False  # stop() ran: the device libraries are closed
        self.port: int | None = None

    def _sample(self, c: Collector) -> None:
        """Sample one collector; one that raises is logged (the first failure, and again after it
        recovered) and shows no series until it reads again — its sampler thread never dies of it."""
        try:
            c.sample()
        except Exception as exc:
            with self._said:
                if c.name not in self._failing:
                    log.warning("monitor: the %s collector failed (%s: %s); its series are left out until it "
                                "reads again", c.name, type(exc).__name__, exc)
                self._failing.add(c.name)
        else:
            with self._said:
                if c.name in self._failing or c.name in self._stuck:
                    log.warning("monitor: the %s collector reads again", c.name)
                self._failing.discard(c.name)
                self._stuck.discard(c.name)

    def _fresh(self, c: Collector) -> bool:
        """Whether a scrape shows ``c``'s last sample: not when its last good read is older than
        ``stale_after_s`` — the collector is stuck in a read (a hung NVML call) and its values would be a
        frozen last value (found in review: one sampler thread read every collector, so a hung NVML call froze
        the host series too). Said once, until it reads again."""
        if c.read_at is None or time.monotonic() - c.read_at <= self.stale_after_s:
            return True
        with self._said:
            if c.name not in self._stuck and c.name not in self._failing:  # a failing one was said already
                log.warning("monitor: the %s collector has not read for over %g s (a call into its library does "
                            "not return); its series are left out until it reads again", c.name, self.stale_after_s)
            self._stuck.add(c.name)
        return False

    def sample_once(self) -> None:
        """Sample every collector, one after another."""
        for c in self._collectors:
            self._sample(c)

    def collect_once(self) -> list[Metric]:
        """Sample once and return the host and device families (``--once``; no server). CPU utilisation is
        the change between two readings, so the sample waits until min(interval, 1 s) has passed since the
        host collector's first: taken at once, it covered the few ms since start-up and read 0 or 100 %."""
        time.sleep(max(0.0, min(self.config.interval, 1.0) - self.host.seconds_since_cpu_reading()))
        self.sample_once()
        return [*self._host_view.collect(), *self._device_view.collect()]

    def _loop(self, c: Collector) -> None:
        while not self._stop.wait(self.config.interval):
            self._sample(c)

    def start(self) -> int:
        """Bind the HTTP server, then register the collectors and start sampling; returns the bound port.

        The port is bound first: a busy port then leaves nothing behind (no sampler threads, no collectors in
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
            server = _serve(host, port, self.registry)
        except (OSError, UnicodeError) as exc:  # UnicodeError: a host name the resolver cannot encode
            why = getattr(exc, "strerror", None) or str(exc)
            fix = ("pick another port (--port, ExporterConfig(port=...); 0 picks a free one) or stop what holds it"
                   if getattr(exc, "errno", None) in (errno.EADDRINUSE, errno.EACCES)
                   else "use an address of this machine as host (--host, ExporterConfig(host=...)), e.g. 127.0.0.1")
            raise UserError(f"cannot listen on {host_in_url(host)}:{port} ({why}); {fix}") from exc
        registered = []
        try:
            self.sample_once()
            for view in (self._host_view, self._device_view):
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
        for c in self._collectors:  # one each: a read stuck in one library holds up no other collector
            thread = threading.Thread(target=self._loop, args=(c,), name=f"accelkit-monitor-sampler-{c.name}",
                                      daemon=True)
            thread.start()
            self._threads.append((thread, c))
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
        deadline = time.monotonic() + STOP_WAIT_S
        for thread, c in self._threads:  # before closing NVML: a sample may still be reading it
            since = c.reading_since
            if since is not None and time.monotonic() - since > self.stale_after_s:
                continue  # stuck in the library: waiting on it only delays the exit
            thread.join(timeout=max(0.0, deadline - time.monotonic()))  # the wait wakes at once
        for view in (self._host_view, self._device_view):
            with contextlib.suppress(KeyError):
                self.registry.unregister(view)
        for c in self.devices:
            if c.reading_since is not None:  # shutting a library down under a call still in it can crash the process
                log.warning("monitor: the %s collector is still inside a call into its library; it is left open",
                            c.name)
                continue
            c.close()
