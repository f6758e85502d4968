"""A server built again in the same process (a notebook, a test harness restarting it) on the same Prometheus
registry — the default one in `accelkit serve` — starts, serves over real HTTP and keeps its metrics."""

import httpx
import pytest
from prometheus_client import CollectorRegistry

from accelkit.serve.testing import save_tiny_model
from tests.integration.serve_server_util import running_server, settled_metric


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny_model(tmp_path_factory.mktemp("restart") / "tiny", "tiny-llama"))


def _complete(url):
    r = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": "w5 w6", "max_tokens": 3,
                                                  "temperature": 0, "ignore_eos": True}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def test_a_second_server_on_the_same_registry_starts_and_counts_on(model_dir):
    registry = CollectorRegistry()
    with running_server(model_dir, registry=registry) as (url, _):
        first = _complete(url)
        assert settled_metric(url, "vllm:generation_tokens_total", 3) == 3
    # before: ServingMetrics(registry) again raised "Duplicated timeseries", after the engine had loaded
    with running_server(model_dir, registry=registry) as (url, _):
        assert _complete(url) == first
        assert settled_metric(url, "vllm:generation_tokens_total", 6) == 6  # the process's counters go on
        assert settled_metric(url, "vllm:request_success_total", 2) == 2
        assert settled_metric(url, "vllm:num_requests_running", 0) == 0
