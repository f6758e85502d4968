"""The exporter's /metrics answered HEAD (`curl -I`, an uptime check) with 405 Method Not Allowed: HEAD gets GET's
status and headers, without the body."""

from prometheus_client import CollectorRegistry, Gauge

from accelkit.monitor.exporter import metrics_app


def _call(app, method: str) -> tuple[str, dict[str, str], bytes]:
    said = {}

    def start_response(status, headers):
        said.update(status=status, headers=dict(headers))

    body = b"".join(app({"REQUEST_METHOD": method, "PATH_INFO": "/metrics", "QUERY_STRING": ""}, start_response))
    return said["status"], said["headers"], body


def test_head_gets_the_headers_of_get_without_a_body():
    registry = CollectorRegistry()
    Gauge("accelkit_test_value", "A value.", registry=registry).set(3)
    app = metrics_app(registry)
    head, get = _call(app, "HEAD"), _call(app, "GET")
    assert head[0] == get[0] == "200 OK" and head[1] == get[1] and head[2] == b""
    assert b"accelkit_test_value 3.0" in get[2] and int(get[1]["Content-Length"]) == len(get[2])
    status, headers, _ = _call(app, "POST")
    assert status.startswith("405") and headers["Allow"] == "OPTIONS,GET,HEAD"
