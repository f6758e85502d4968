"""A real Prometheus (Debian's package; .ci/run installs it) scrapes an accelkit exporter that also
tracks a job and holds the serving metrics, and its HTTP API returns the host metrics, the job's step-time
metric and the vLLM-named series under their own names."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request

import pytest

from tests.integration.serve_server_util import free_port

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None and not os.environ.get("CI"),
    reason="Debian's prometheus is not installed here (`apt-get install prometheus`; .ci/run installs it)",
)

JOB = textwrap.dedent("""
    import sys, time
    from accelkit.monitor import Exporter, ExporterConfig, track
    from accelkit.monitor.serving import ServingMetrics
    ServingMetrics.get().start("prom-test")  # what `accelkit serve` registers, in the same registry
    exporter = Exporter(ExporterConfig(port=0, interval=0.2))
    print(exporter.start(), flush=True)  # the port it bound
    deadline = time.monotonic() + float(sys.argv[1])
    with track("prom-test", samples_per_step=8, tokens_per_step=1024) as job:
        while time.monotonic() < deadline:
            time.sleep(0.05)
            job.step(loss=0.5)
    exporter.stop()
""")


def _query(port: int, promql: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scrapes_host_and_job_metrics(tmp_path):
    assert PROMETHEUS, "prometheus must be installed in CI"
    job = subprocess.Popen([sys.executable, "-c", JOB, "90"], stdout=subprocess.PIPE, text=True)
    exporter_port = int(job.stdout.readline())
    prom_port = free_port()  # Prometheus cannot say which port it bound; the exporter can
    config = tmp_path / "prometheus.yml"
    config.write_text(textwrap.dedent(f"""
        global: {{scrape_interval: 1s, evaluation_interval: 1s}}
        scrape_configs:
          - job_name: accelkit
            static_configs: [{{targets: ["127.0.0.1:{exporter_port}"]}}]
    """))
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        host = steps = running = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                host = _query(prom_port, "accelkit_host_memory_total_bytes")
                steps = _query(prom_port, 'accelkit_job_step_seconds_count{job_name="prom-test"}')
                running = _query(prom_port, 'vllm:num_requests_running{model_name="prom-test"}')
            except OSError:  # Prometheus still starting
                pass
            if host and steps and running:
                break
            time.sleep(0.5)
        assert host, "Prometheus never returned the host metrics"
        assert float(host[0]["value"][1]) > 1e8 and host[0]["metric"]["job"] == "accelkit"
        assert steps and float(steps[0]["value"][1]) >= 1
        # Prometheus 2.x asks for OpenMetrics first: answered in it, the vllm:* samples went out as vllm_*
        assert running and float(running[0]["value"][1]) == 0, "Prometheus stored no vllm:* series"
        assert _query(prom_port, 'vllm:prompt_tokens_total{model_name="prom-test"}')
        assert not _query(prom_port, "vllm_num_requests_running")
        cores = _query(prom_port, "accelkit_host_cpu_utilization_percent")
        assert len(cores) == os.cpu_count()
        tps = _query(prom_port, 'accelkit_job_tokens_per_second{job_name="prom-test"}')
        assert tps and float(tps[0]["value"][1]) > 0
    finally:
        prom.terminate()
        job.terminate()
        prom.wait(timeout=30)
        job.wait(timeout=30)
