"""What a client can send to the HTTP front of `accelkit serve` below the routes — a CORS preflight from an origin not
allowed, a chunked body past --max-body-size, bytes that are not HTTP, a gzip body, WebSocket upgrades — each
answered with an OpenAI error object (or served), never plain text, a connection left open, or a client address
locked out. One real server on 127.0.0.1 for the module (raw sockets where the bytes matter)."""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import time

import httpx
import pytest

from accelkit.serve.testing import save_tiny_model
from tests.integration.serve_server_util import running_server

KEY = "sekrit"
AUTH = {"authorization": f"Bearer {KEY}"}
ORIGIN = "http://localhost:3000"
MAX_BODY = 4096
PER_CLIENT = 6
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = save_tiny_model(tmp_path_factory.mktemp("hunt-http-front") / "tiny", "tiny-llama")
    config = {"allowed_origins": (ORIGIN,), "max_body_bytes": MAX_BODY, "max_connections_per_client": PER_CLIENT}
    with running_server(str(model), api_key=KEY, max_queue=4, max_num_seqs=2, server=config) as (url, _):
        yield url


def _exchange(url: str, data: bytes, *, timeout_s: float = 3.0) -> tuple[bytes, bool]:
    """(what the server sent, whether it closed the connection) for ``data`` sent on a new connection: read until
    the server closes it, or ``timeout_s`` passes with it still open."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        with contextlib.suppress(OSError):  # (the server may answer and close before all of a request is written)
            sock.sendall(data)
        got = b""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return got, False
            except ConnectionResetError:
                return got, True
            if not chunk:
                return got, True
            got += chunk
        return got, False


def _error(response: bytes) -> tuple[int, dict]:
    head, _, body = response.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), response[:500]
    return int(head.split()[1]), json.loads(body)["error"]


def test_a_refused_cors_preflight_is_an_error_object_naming_the_origin(server):
    refused = httpx.options(f"{server}/v1/chat/completions", timeout=10, headers={
        "origin": "http://evil.example", "access-control-request-method": "POST"})
    assert refused.status_code == 400, refused.text
    err = refused.json()["error"]  # was Starlette's plain text "Disallowed CORS origin"
    assert err["code"] == "cors_refused" and "'http://evil.example'" in err["message"], err
    assert "--allowed-origins" in err["message"], err
    allowed = httpx.options(f"{server}/v1/chat/completions", timeout=10, headers={
        "origin": ORIGIN, "access-control-request-method": "POST",
        "access-control-request-headers": "authorization,content-type"})
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == ORIGIN


def test_a_chunked_body_past_max_body_size_gets_413_and_its_connection_closes(server):
    chunk = b" " * 1024
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(MAX_BODY // len(chunk) + 2))
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + KEY.encode()
            + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    got, closed = _exchange(server, head + body)  # (no last chunk: the client is still sending)
    status, err = _error(got)
    assert status == 413 and err["code"] == "request_too_large" and "--max-body-size" in err["message"], err
    assert closed, "the connection stayed open after the 413 (until --header-timeout)"


@pytest.mark.parametrize("data", [
    b"GET /health HTTP/1.1\r\nHost: localhost\r\nA header line without its colon\r\n\r\n",
    b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\0" * 64,  # a TLS ClientHello on the plain-HTTP port
    b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: +5\r\n\r\nhello",
], ids=["bad-header", "tls-hello", "bad-content-length"])
def test_bytes_that_are_not_http_get_an_error_object_and_the_connection_closes(server, data):
    got, closed = _exchange(server, data)
    status, err = _error(got)  # was uvicorn's plain text "Invalid HTTP request received."
    assert status == 400 and err["code"] == "invalid_http" and "plain HTTP" in err["message"], err
    assert closed
    assert httpx.get(f"{server}/health", timeout=10).status_code == 200


def test_a_compressed_body_gets_415_naming_the_encoding(server):
    body = json.dumps({"model": "tiny", "prompt": "w5", "max_tokens": 1}).encode()
    resp = httpx.post(f"{server}/v1/completions", content=gzip.compress(body), timeout=10, headers={
        **AUTH, "content-type": "application/json", "content-encoding": "gzip"})
    err = resp.json()["error"]  # was 400 "the request body is not valid JSON: it is not UTF-8 text (byte 1 ...)"
    assert resp.status_code == 415 and err["code"] == "unsupported_content_encoding", resp.text
    assert "'gzip'" in err["message"] and "uncompressed" in err["message"], err
    plain = httpx.post(f"{server}/v1/completions", content=body, timeout=10, headers={
        **AUTH, "content-type": "application/json", "content-encoding": "identity"})
    assert plain.status_code == 200, plain.text


def test_websocket_upgrade_requests_are_served_and_do_not_use_up_the_client_address(server):
    """With a WebSocket library installed (uvicorn[standard]), each upgraded connection left the per-address count
    for good: after --max-connections-per-client of them, every request from that address got 429."""
    upgrade = (b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + KEY.encode()
               + b"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
               b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
    host, port = server.removeprefix("http://").rsplit(":", 1)
    for _ in range(PER_CLIENT + 2):
        with socket.create_connection((host, int(port)), timeout=3) as sock:
            sock.sendall(upgrade)
            got = sock.recv(65536)
            while b"\r\n\r\n" not in got:
                got += sock.recv(65536)
        assert got.startswith(b"HTTP/1.1 200"), got[:300]
    time.sleep(0.2)  # (the closes reach the server)
    assert httpx.get(f"{server}/v1/models", headers=AUTH, timeout=10).status_code == 200


@pytest.mark.parametrize("key", [" ", "sekrit\n", " sekrit"], ids=["blank", "trailing-newline", "leading-space"])
def test_an_api_key_with_surrounding_whitespace_is_refused_at_start(cli, tmp_path, key):
    """A key no client can send (header values lose their surrounding whitespace): the server started, and every
    /v1 request got 401. Refused with exit 2 before the model loads, the key itself not printed."""
    model = tmp_path / "no-model"  # (the key is checked first: no model needed)
    model.mkdir()
    (model / "config.json").write_text("{}")
    proc = cli("serve", "--model", str(model), "--api-key", key, "--port", "0")
    assert proc.returncode == 2 and proc.stderr.count("error:") == 1, proc.stderr
    assert "--api-key" in proc.stderr and "whitespace" in proc.stderr and "sekrit" not in proc.stderr, proc.stderr


def test_a_model_card_has_vllms_fields_permission_included(server):
    """Typed clients of vLLM-style servers (Java, Kotlin, Scala) declare the card's ``permission`` list."""
    card = httpx.get(f"{server}/v1/models", headers=AUTH, timeout=10).json()["data"][0]
    assert {"id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission"} <= set(card), card
    (perm,) = card["permission"]
    assert perm["object"] == "model_permission" and perm["id"].startswith("modelperm-"), perm
    assert perm["allow_sampling"] is True and perm["allow_logprobs"] is True and perm["is_blocking"] is False, perm
    assert perm["organization"] == "*" and perm["group"] is None and perm["created"] == card["created"], perm


def test_head_is_answered_wherever_get_is(server):
    """`curl -I` and uptime monitors probe with HEAD: it got 405 on every route."""
    for path in ("/health", "/ping", "/version", "/v1/models", "/v1/models/tiny", "/v1/models/nope"):
        get = httpx.get(f"{server}{path}", headers=AUTH, timeout=10)
        head = httpx.head(f"{server}{path}", headers=AUTH, timeout=10)
        assert head.status_code == get.status_code and head.content == b"", (path, head.status_code, head.text)
        assert head.headers["content-length"] == get.headers["content-length"], path
    assert httpx.head(f"{server}/v1/completions", headers=AUTH, timeout=10).status_code == 405
    assert httpx.head(f"{server}/v1/models", timeout=10).status_code == 401  # (behind the key as GET is)


def test_an_unknown_model_id_is_named_bounded_in_the_404(server):
    resp = httpx.get(f"{server}/v1/models/{'a' * 20_000}", headers=AUTH, timeout=10)
    err = resp.json()["error"]
    assert resp.status_code == 404 and err["code"] == "model_not_found" and len(err["message"]) < 400, err["message"][:500]
    assert f"`{'a' * 200}…`" in err["message"], err["message"]
