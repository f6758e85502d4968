"""What `accelkit loadtest` said nothing about: with --json the run's warnings (a warm-up cut off by --warmup-timeout,
a file dataset re-sent by every sweep pass …) were printed by the table view only, so a --json run dropped them; and
a request whose connection the server reset (a server killed mid-run) failed with the text 'ReadError: ', naming
nothing; and with --json a run whose requests failed (a server that died half-way) said nothing of them at all,
exit 0, its throughput counting the survivors."""

from __future__ import annotations

import json
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from accelkit.core import AccelkitError
from accelkit.loadtest import LoadTestConfig, run_loadtest
from tests.conftest import main_in_process


class _Stream(BaseHTTPRequestHandler):
    """Every POST: two text chunks, a finish chunk, usage and [DONE] (a well-formed OpenAI completions stream)."""

    protocol_version = "HTTP/1.0"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if "fail" in str(body.get("prompt")):
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"error": {"message": "engine died"}}).encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunks = [{"choices": [{"index": 0, "text": " a", "finish_reason": None}]},
                  {"choices": [{"index": 0, "text": " b", "finish_reason": "length"}]},
                  {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}]
        self.wfile.write(b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Stream)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_json_run_still_prints_its_warnings_on_stderr(capsys, server, tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "hello there"}\n{"prompt": "general kenobi"}\n', encoding="utf-8")
    code, out, err = main_in_process(capsys, "loadtest", "--base-url", server, "--model", "m",
                                     "--dataset", f"jsonl:{path}", "--num-prompts", "2", "--random-output-len", "2",
                                     "--sweep-rates", "1000,inf", "--warmup-timeout", "0", "--no-save",
                                     "--no-progress", "--json")
    assert code == 0, err
    doc = json.loads(out)  # stdout is the document alone
    assert doc["details"]["warmup"]["timed_out"] is True
    assert "warning: the warm-up timed out" in err and "--warmup-timeout 0" in err
    assert f"warning: --dataset jsonl:{path} sends the same prompts every pass" in err


def test_json_run_says_how_many_requests_failed(capsys, server, tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "fine"}\n{"prompt": "fail me"}\n{"prompt": "fail too"}\n{"prompt": "ok"}\n',
                    encoding="utf-8")
    code, out, err = main_in_process(capsys, "loadtest", "--base-url", server, "--model", "m", "--dataset",
                                     f"jsonl:{path}", "--num-prompts", "4", "--random-output-len", "2", "--warmup", "0",
                                     "--no-save", "--no-progress", "--json")
    assert code == 0, err
    assert json.loads(out)["details"]["passes"][0]["failed"] == 2
    assert err.strip().splitlines() == ["warning: 2 of 4 requests failed and count in no latency or throughput: 2 × "
                                        "'HTTP 500: engine died' (details.passes[].failures)"]


def _resetting_server() -> tuple[socket.socket, threading.Thread]:
    """Answers one request with a stream header and one chunk, then resets the connection (RST), as a killed
    server's kernel does."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                         b'data: {"choices": [{"index": 0, "text": " a"}]}\n\n')
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


def test_a_reset_connection_says_what_happened():
    listener, thread = _resetting_server()
    port = listener.getsockname()[1]
    config = LoadTestConfig(base_url=f"http://127.0.0.1:{port}", model="m", num_prompts=1, random_input_len=2,
                            random_output_len=2, warmup=0, timeout_s=10)
    try:
        with pytest.raises(AccelkitError) as info:
            run_loadtest(config, on_notice=lambda line: None)
    finally:
        thread.join(timeout=10)
        listener.close()
    assert str(info.value).endswith("first error: ReadError: the connection broke while reading the response (the "
                                    "server reset or closed it)")
