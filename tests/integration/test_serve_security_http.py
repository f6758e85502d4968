"""What a client's request cannot do to `accelkit serve`: write log lines of its own (a path or a field name with a
newline in it), or — as a web page that rebinds its own name to 127.0.0.1 — use a server on loopback without an API
key. The CLI's entry point in this process, real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from accelkit.serve.testing import save_tiny_model
from tests.integration.serve_server_util import serve_in_process

ATTACKER = {"host": "attacker.example"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny_model(tmp_path_factory.mktemp("serve-security") / "tiny", "tiny-llama"))


def _request_log(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(("INFO: ", "WARNING: "))]


def test_a_loopback_server_without_a_key_answers_only_its_own_host_names_and_logs_one_line_per_request(model_dir):
    def check(url: str) -> None:
        port = url.rsplit(":", 1)[1]
        for path in ("/v1/models", "/health", "/metrics"):  # (the open routes too: a page must learn nothing)
            refused = httpx.get(f"{url}{path}", headers=ATTACKER)
            err = refused.json()["error"]
            assert refused.status_code == 400 and err["code"] == "invalid_host", refused.text
            assert "'attacker.example'" in err["message"] and "--allowed-hosts" in err["message"], err
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}", "127.0.0.2"):
            assert httpx.get(f"{url}/v1/models", headers={"host": host}).status_code == 200, host
        assert httpx.get(f"{url}/v1/models").status_code == 200  # what clients send: Host 127.0.0.1:PORT
        # a path and a field name with a newline (a CR, a tab) in them: each request is one log line all the same
        assert httpx.get(f"{url}/x%0AINFO:%20127.0.0.1%20GET%20/forged%20200%201.0%20ms%0D%09").status_code == 404
        body = json.dumps({"model": "tiny", "prompt": "w5", "max_tokens": 1, "a\nWARNING: forged": 1})
        resp = httpx.post(f"{url}/v1/completions", content=body, headers={"content-type": "application/json"})
        assert resp.status_code == 200, resp.text

    served = serve_in_process(model_dir, then=check)
    assert served.returncode == 0, served.stderr[-2000:]
    lines = _request_log(served.stderr)
    assert not any("forged" in line and not line.startswith(("INFO: 127.0.0.1 GET /x\\x0a", "WARNING: POST"))
                   for line in lines), lines
    assert "INFO: 127.0.0.1 GET /x\\x0aINFO: 127.0.0.1 GET /forged 200 1.0 ms\\x0d\\x09 404" in served.stderr, lines
    assert any(re.search(r"ignoring unknown field\(s\) a\\x0aWARNING: forged, as vLLM does", line) for line in lines), lines
    assert any(re.fullmatch(r"INFO: 127\.0\.0\.1 GET /v1/models 400 [\d.]+ ms", line) for line in lines), lines


def test_allowed_hosts_adds_names_and_a_bad_one_is_refused_at_start(model_dir, cli):
    bad = cli("serve", "--model", model_dir, "--allowed-hosts", "https://attacker.example")
    assert bad.returncode == 2 and bad.stderr.count("error:") == 1 and "--allowed-hosts" in bad.stderr, bad.stderr

    def check(url: str) -> None:
        assert httpx.get(f"{url}/v1/models", headers=ATTACKER).status_code == 200
        assert httpx.get(f"{url}/v1/models", headers={"host": "other.example"}).status_code == 400

    served = serve_in_process(model_dir, "--allowed-hosts", "Attacker.Example, proxy.internal", then=check)
    assert served.returncode == 0, served.stderr[-2000:]
