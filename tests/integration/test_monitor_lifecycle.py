"""Exporter start/stop on real sockets and a real prometheus registry, and track()'s argument checks."""

from __future__ import annotations

import math
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from accelkit.core import UserError
from accelkit.models import get_preset
from accelkit.monitor import Exporter, ExporterConfig, track


def _registry() -> CollectorRegistry:
    """A registry made as accelkit's REGISTRY is (auto_describe: duplicate series are refused), fresh per test."""
    return CollectorRegistry(auto_describe=True)


def _samplers() -> int:
    return sum(t.name.startswith("accelkit-monitor-sampler") for t in threading.enumerate())


def _scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def test_a_busy_port_is_one_error_and_leaves_nothing_behind(busy_port):
    # start() registered the collectors and started the sampler before binding: a busy port raised a bare
    # OSError and left both behind, so every later exporter on that registry failed on duplicate series
    registry, before = _registry(), _samplers()
    failed = Exporter(ExporterConfig(host="127.0.0.1", port=busy_port), registry=registry)
    with pytest.raises(UserError) as caught:
        failed.start()
    message = str(caught.value)
    assert message.startswith(f"cannot listen on 127.0.0.1:{busy_port} (Address already in use); pick another port")
    assert "\n" not in message
    assert _samplers() == before
    assert b"accelkit_host" not in generate_latest(registry)

    _a_new_exporter_serves(registry)
    failed.stop()


def _a_new_exporter_serves(registry) -> None:
    """What a failed or stopped exporter left in ``registry`` does not keep a new one from serving there."""
    exporter = Exporter(ExporterConfig(host="127.0.0.1", port=0, interval=0.1), registry=registry)
    port = exporter.start()
    try:
        assert "accelkit_host_memory_total_bytes" in _scrape(port)
    finally:
        exporter.stop()


def test_stop_ends_the_sampler_and_a_second_start_is_refused():
    # stop() then start() served HTTP again while the sampler exited at once (its stop event stayed set),
    # so every series froze at its last value
    registry = _registry()
    exporter = Exporter(ExporterConfig(host="127.0.0.1", port=0, interval=0.1), registry=registry)
    exporter.start()
    with pytest.raises(UserError, match=r"already serves on port \d+"):
        exporter.start()
    threads = [thread for thread, _ in exporter._threads]
    exporter.stop()
    assert len(threads) == 2 and not any(thread.is_alive() for thread in threads)  # host, and NVML's (no GPU)
    assert b"accelkit_host" not in generate_latest(registry)
    with pytest.raises(UserError, match=r"was stopped .*create a new Exporter"):
        exporter.start()
    exporter.stop()  # idempotent
    _a_new_exporter_serves(registry)


def test_two_exporters_on_one_registry_is_one_error():
    registry = _registry()
    first = Exporter(ExporterConfig(host="127.0.0.1", port=0), registry=registry)
    first.start()
    try:
        second = Exporter(ExporterConfig(host="127.0.0.1", port=0), registry=registry)
        with pytest.raises(UserError, match="already in this registry; stop"):
            second.start()
        assert second._threads == [] and second._server is None
    finally:
        first.stop()


def test_monitor_cli_on_a_busy_port_is_one_line_exit_2(cli, busy_port):
    proc = cli("monitor", "--port", str(busy_port), timeout=120)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("note: ")]
    assert errors == [f"error: cannot listen on 127.0.0.1:{busy_port} (Address already in use); pick another port "
                      "(--port, ExporterConfig(port=...); 0 picks a free one) or stop what holds it"]


@pytest.fixture
def busy_ipv6_port() -> Iterator[int]:
    try:
        sock = socket.socket(socket.AF_INET6)
        sock.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here ({exc})")
    with sock:
        sock.listen()
        yield sock.getsockname()[1]


def test_an_ipv6_host_is_bracketed_in_the_error(cli, busy_ipv6_port):
    # "cannot listen on ::1:PORT" read as a host "::1:PORT" with no port
    proc = cli("monitor", "--host", "::1", "--port", str(busy_ipv6_port), timeout=120)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if not line.startswith("note: ")]
    assert len(errors) == 1 and errors[0].startswith(
        f"error: cannot listen on [::1]:{busy_ipv6_port} (Address already in use); pick another port"), errors


def test_monitor_prints_an_ipv6_url_that_can_be_fetched(busy_ipv6_port):
    # it printed http://::1:PORT/metrics, which no client can fetch; and SIGTERM ends it with exit 0
    proc = subprocess.Popen([sys.executable, "-m", "accelkit", "monitor", "--host", "::1", "--port", "0"],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while "serving metrics on" not in line:
            line = proc.stderr.readline()
            assert line, "the exporter exited before serving"
        url = re.search(r"http://\S+/metrics", line).group(0)
        assert url.startswith("http://[::1]:")
        assert "accelkit_host_memory_total_bytes" in urllib.request.urlopen(url, timeout=10).read().decode()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


TINY = get_preset("tiny-llama")


@pytest.mark.parametrize(("kwargs", "starts"), [
    # each message names the argument passed, not a count derived from it ("tokens_per_step=-40 must be > 0")
    ({"model": TINY, "samples_per_step": 8, "seq_len": -5}, "seq_len=-5 must be a whole number >= 1"),
    ({"model": TINY, "samples_per_step": 0.5, "seq_len": 16}, "samples_per_step=0.5 must be a whole number >= 1"),
    ({"model": TINY, "samples_per_step": 8, "seq_len": 16.5}, "seq_len=16.5 must be a whole number >= 1"),
    ({"model": TINY, "samples_per_step": "8", "seq_len": 16}, "samples_per_step='8' is not a number"),
    ({"flops_per_step": 1e9, "peak_flops": math.nan}, "peak_flops=nan must be a finite number > 0"),
    ({"flops_per_step": 1e9, "peak_flops": math.inf}, "peak_flops=inf must be a finite number > 0"),
    ({"flops_per_step": 1e9, "peak_flops": "989e12"}, "peak_flops='989e12' is not a number"),
    ({"flops_per_step": -1.0}, "flops_per_step=-1.0 must be a finite number > 0"),
    ({"tokens_per_step": True}, "tokens_per_step=True is not a number"),
])
def test_track_rejects_bad_arguments_by_their_own_name(kwargs, starts):
    with pytest.raises(UserError) as caught, track("bad", registry=CollectorRegistry(), **kwargs):
        pass
    message = str(caught.value)
    assert message.startswith(starts) and "\n" not in message
    assert "pass " in message or "give flops_per_step=" in message  # and the fix


def test_track_counts_flops_from_whole_float_counts():
    spec = get_preset("tiny-llama")
    with track("ok", model=spec, samples_per_step=8.0, seq_len=16, registry=CollectorRegistry()) as job:
        assert job.tokens_per_step == 8 * 16 and job.flops_per_step and job.flops_per_step > 0


@pytest.mark.parametrize(("step", "starts"), [
    ({"samples": -1}, "samples=-1 must be a finite number >= 0"),
    ({"tokens": math.nan}, "tokens=nan must be a finite number >= 0"),
    ({"flops": "1e9"}, "flops='1e9' is not a number"),
    ({"loss": "abc"}, "loss='abc' is not a number"),
])
def test_a_bad_step_count_publishes_nothing(step, starts):
    registry = CollectorRegistry()
    with track("t", samples_per_step=4, flops_per_step=1e9, peak_flops=1e12, registry=registry) as job:
        with pytest.raises(UserError) as caught:
            job.step(**step)
        assert str(caught.value).startswith(starts)
        assert registry.get_sample_value("accelkit_job_steps_total", {"job_name": "t"}) is None
        assert registry.get_sample_value("accelkit_job_samples_per_second", {"job_name": "t"}) is None
        record = job.step(samples=0)  # zero is a count (nothing published for it), not an error
        assert record.samples_per_s is None and record.mfu is not None and record.mfu > 0
