"""`accelkit loadtest` end to end: --json, --save, the tables, usage errors (exit 2). The first test runs the
command as its own process; the rest call the CLI's entry point in this process (tests/conftest.py ``run_cli``:
the same parsing, output and exit codes, without a new interpreter per case)."""

import json

import pytest

from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
from accelkit.results import ResultStore
from tests.conftest import accelkit_subprocess, run_cli
from tests.integration.loadtest_raw_sse import RawSSEServer, tokens


def loadtest(*args, timeout=120):
    return run_cli("loadtest", *args, timeout=timeout)


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.05, itl_s=0.01, fail_every=5)) as s:
        yield s


def test_json_and_save(server, _isolated_home):
    proc = accelkit_subprocess("loadtest", "--base-url", server.base_url, "--model", "fake-model", "--num-prompts",
                               "10", "--random-input-len", "20", "--random-output-len", "5", "--request-rate", "50",
                               "--slo", "ttft_ms=2000,tpot_ms=500", "--percentiles", "50,99", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    p = doc["details"]["passes"][0]
    assert doc["kind"] == "loadtest" and p["completed"] + p["failed"] == 10 and p["failed"] >= 1
    assert p["failures"][0]["error"] == "HTTP 500: injected failure"
    assert p["goodput"] is not None and "per-request" in doc["details"]["goodput_definition"]
    with ResultStore(_isolated_home / "results.db") as store:
        stored = store.get(doc["result_id"]).result
    assert stored.kind == "loadtest" and stored.details["curve"][0]["rate"] == 50.0
    assert {"ttft_s", "tpot_s", "itl_s", "e2e_s"} <= set(stored.samples)


def test_malformed_chunk_is_one_failed_request():
    def script(n, body, chat):  # the 3rd request's 2nd chunk has a string for a delta
        return [{"choices": [{"index": 0, "delta": "oops"}]} if n == 3 and i == 1 else chunk
                for i, chunk in enumerate(tokens(body, chat))]
    with RawSSEServer(script) as raw:
        proc = loadtest("--base-url", raw.base_url, "--model", "m", "--endpoint", "chat", "--num-prompts", "6",
                        "--random-input-len", "4", "--random-output-len", "4", "--warmup", "0", "--no-save", "--json")
    assert proc.returncode == 0, proc.stderr
    p = json.loads(proc.stdout)["details"]["passes"][0]
    assert (p["completed"], p["failed"]) == (5, 1)
    assert p["failures"][0]["error"].startswith("malformed chunk ('delta' is a string, not an object)")


def test_sweep_prints_curve(server):
    proc = loadtest("--base-url", server.base_url, "--model", "fake-model", "--num-prompts", "4", "--endpoint", "chat",
                    "--random-input-len", "8", "--random-output-len", "3", "--sweep-rates", "10,inf", "--no-save")
    assert proc.returncode == 0, proc.stderr
    assert "Latency-throughput curve" in proc.stdout and "inf" in proc.stdout
    assert "Failed requests" in proc.stdout and "injected failure" in proc.stdout


def test_text_marks_unbacked_percentiles_and_a_timed_out_warmup():
    """The tables printed percentiles without the sample count behind them (a p99 of 5 requests looked like any
    other), and a warm-up cut off by --warmup-timeout was only in the JSON."""
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.3, itl_s=0.01)) as slow:
        proc = loadtest("--base-url", slow.base_url, "--model", "fake-model", "--num-prompts", "5",
                        "--random-input-len", "4", "--random-output-len", "3", "--percentiles", "50,90,99.9",
                        "--warmup", "1", "--warmup-timeout", "0.05", "--no-save")
    assert proc.returncode == 0, proc.stderr
    ttft = next(line for line in proc.stdout.splitlines() if "TTFT" in line)
    cells = [c.strip() for c in ttft.split("│")[1:-1]]
    assert cells[0] == "TTFT" and cells[1] == "5"  # n
    assert not cells[-3].endswith("*") and cells[-2].endswith("*") and cells[-1].endswith("*")  # p50 p90 p99.9
    assert "p90 needs ≥ 44 samples" in proc.stdout and "p99.9 needs ≥ 4603" in proc.stdout
    assert "warm-up timed out" in proc.stderr and "--warmup-timeout" in proc.stderr


def test_sweep_over_a_file_warns_of_the_prefix_cache(server, tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a b c", "output_len": 2}\n{"prompt": "d e f", "output_len": 2}\n')
    proc = loadtest("--base-url", server.base_url, "--model", "fake-model", "--num-prompts", "2", "--warmup", "0",
                    "--dataset", f"jsonl:{path}", "--sweep-rates", "50,inf", "--no-save")
    assert proc.returncode == 0, proc.stderr
    assert "prefix cache" in proc.stderr and "p99 needs ≥ 459" in proc.stdout


@pytest.mark.parametrize(("args", "needle"), [
    (("--slo", "ttft=100"), "--slo key 'ttft' is not known"),
    (("--slo", "ttft_ms=fast"), "--slo ttft_ms='fast' is not a number"),
    (("--dataset", "parquet:x"), "--dataset 'parquet:x' is not valid"),
    (("--dataset", "jsonl:/no/such.jsonl"), "no such file"),
    (("--request-rate", "-2"), "--request-rate '-2' is not valid"),
    (("--sweep-rates", "1,x"), "--sweep-rates 'x' is not valid"),
    (("--endpoint", "embeddings"), "'embeddings' is not one of 'completions', 'chat'"),
    # JSON has no Infinity: these made --json and the stored result invalid JSON
    (("--timeout", "inf", "--json"), "--timeout inf is out of range; expected a finite number of seconds > 0"),
    (("--warmup-timeout", "inf", "--json"), "--warmup-timeout inf is out of range; expected a finite number of seconds"),
])
def test_usage_errors_exit_2(server, args, needle):
    proc = loadtest("--base-url", server.base_url, "--model", "fake-model", *args)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("url", "reason"), [
    ("http://127.0.0.1:99999", "the port must be a whole number in 1-65535"),
    ("http://127.0.0.1:0", "the port must be a whole number in 1-65535"),
    ("http://127.0.0.1:x", "the port must be a whole number in 1-65535"),
    ("http://[::1", "the host does not parse"),
    ("http://", "it has no host"),
    ("http://127.0.0.1:8000?x=1", "a base URL has no ?query or #fragment"),
    ("ftp://127.0.0.1", "it must start with http:// or https://"),
])
def test_bad_base_url_exit_2(url, reason):
    proc = loadtest("--base-url", url, "--model", "m", "--num-prompts", "1", "--warmup", "0", "--no-save", "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--base-url {url!r} is not valid: {reason}" in lines[0], proc.stderr


def test_repeated_sweep_rate_exit_2(server):
    """Two passes at one rate stored their samples under one key ('ttft_s@2'): the first pass's were lost."""
    proc = loadtest("--base-url", server.base_url, "--model", "fake-model", "--num-prompts", "2", "--warmup", "0",
                    "--random-input-len", "4", "--random-output-len", "2", "--sweep-rates", "2,2", "--no-save", "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--sweep-rates item 2 = 2.0 repeats --sweep-rates item 1 = 2.0" in lines[0], proc.stderr


def test_bad_jsonl_line_exit_2(server, tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "hi"}\n{"prompt": 3}\n')
    proc = loadtest("--base-url", server.base_url, "--model", "fake-model", "--dataset", f"jsonl:{path}")
    assert proc.returncode == 2 and "line 2: field 'prompt'" in proc.stderr and "Traceback" not in proc.stderr


def test_unknown_model_exit_2(server):
    proc = loadtest("--base-url", server.base_url, "--model", "nope", "--num-prompts", "2")
    assert proc.returncode == 2 and "HTTP 404" in proc.stderr and "GET /v1/models lists 'fake-model'" in proc.stderr
