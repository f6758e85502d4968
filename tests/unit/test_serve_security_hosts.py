"""Which Host headers the server answers (DNS rebinding), how --allowed-hosts is read, and a client's text made one
log line (``printable(single_line=True)``)."""

from __future__ import annotations

import pytest

from accelkit.core.terminal import printable
from accelkit.serve.config import ServerConfig
from accelkit.serve.server.middleware import HostCheck


def _check(allowed: str | None = None, *, api_key: str | None = None, address: str = "127.0.0.1") -> HostCheck:
    config = ServerConfig(served_model_name="tiny", allowed_hosts=allowed, api_key=api_key)
    check = HostCheck(config.host_names, api_key=config.api_key is not None)
    check.listening_on(address)
    return check


def _refused(check: HostCheck, *hosts: bytes) -> str | None:
    return check.refused([(b"accept", b"*/*"), *((b"host", h) for h in hosts)])


@pytest.mark.parametrize("host", [b"localhost", b"localhost:8000", b"LocalHost.:1", b"127.0.0.1", b"127.0.0.1:8000",
                                  b"127.0.0.5:80", b"[::1]", b"[::1]:8000"])
def test_on_loopback_without_a_key_its_own_names_are_answered(host):
    assert _refused(_check(), host) is None


@pytest.mark.parametrize("host", [b"attacker.example", b"attacker.example:8000", b"localhost.attacker.example",
                                  b"127.0.0.1.attacker.example", b"", b"[::1", b"10.0.0.5:8000"])
def test_on_loopback_without_a_key_any_other_host_is_refused(host):
    assert _refused(_check(), host) == host.decode()


def test_every_host_header_is_checked_and_a_request_without_one_passes():
    check = _check()
    assert _refused(check, b"localhost", b"attacker.example") == "attacker.example"
    assert _refused(check) is None  # (every browser sends one)


@pytest.mark.parametrize(("allowed", "answered"), [("attacker.example", True), ("Attacker.Example.", True),
                                                   ("other.example", False), ("*", True)])
def test_allowed_hosts_adds_names_any_port(allowed, answered):
    assert (_refused(_check(allowed), b"ATTACKER.example:8000") is None) is answered


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "10.0.0.5"])
def test_beyond_loopback_any_host_is_answered(address):
    assert _refused(_check(address=address), b"attacker.example") is None


def test_with_an_api_key_any_host_is_answered():
    assert _refused(_check(api_key="k"), b"attacker.example") is None


def test_before_the_listening_address_is_known_any_host_is_answered():
    assert HostCheck((), api_key=False).refused([(b"host", b"attacker.example")]) is None


@pytest.mark.parametrize("given", ["https://a.example", "a.example:8000", "a.example/x", "", "a,,b", "a b", "-a"])
def test_an_allowed_host_that_is_no_host_name_is_refused(given):
    with pytest.raises(ValueError, match=r"allowed_hosts .* is not a host name; give names or addresses"):
        ServerConfig(served_model_name="tiny", allowed_hosts=given)


def test_allowed_hosts_are_read_as_a_host_header_is_compared():
    config = ServerConfig(served_model_name="tiny", allowed_hosts=" A.example., [FE80::1], 10.0.0.5 ,*")
    assert config.host_names == ("a.example", "fe80::1", "10.0.0.5", "*")


def test_single_line_escapes_newlines_and_tabs_too():
    assert printable("a\nb\tc\x1b\r") == "a\nb\tc\\x1b\\x0d"  # (other callers keep their newlines and tabs)
    assert printable("a\nb\tc\x1b\r", single_line=True) == "a\\x0ab\\x09c\\x1b\\x0d"
