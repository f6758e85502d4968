"""The listening socket of `accelkit serve`, bound before anything slow: a busy port or a wrong host is said at
once. Its own module (socket only) so that the CLI can bind it before it imports torch or the web server."""

from __future__ import annotations

import socket

BACKLOG = 2048  # connections the kernel holds until the server accepts them (uvicorn's own default)


def bind_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (not yet listening); ValueError naming the flag and the fix."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ValueError(f"--host {host!r} is not an address this machine has ({reason}); use 127.0.0.1, "
                         "0.0.0.0 or one of its interface addresses") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does; a listening port stays busy
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        fix = "pick another --port" if exc.errno in (98, 13, 48) else "use an address of this machine as --host"
        raise ValueError(f"cannot listen on {host}:{port} ({exc.strerror}); {fix}") from None
    return sock
