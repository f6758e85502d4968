"""`accelkit monitor --dashboard` prints the Grafana dashboard and exits: --once, --port, --interval given with it
were dropped without a word (`monitor --once --dashboard` printed the dashboard, no sample, exit 0)."""

import json

import pytest

from tests.conftest import main_in_process


@pytest.mark.parametrize(("flags", "named"), [
    (("--once",), "--once"),
    (("--port", "9500", "--interval", "2"), "--port, --interval"),
    (("--host", "0.0.0.0"), "--host"),
])
def test_a_flag_the_dashboard_never_reads_is_refused(capsys, flags, named):
    code, out, err = main_in_process(capsys, "monitor", "--dashboard", *flags)
    assert (code, out) == (2, "")
    assert err.strip() == (f"error: --dashboard prints the Grafana dashboard and exits, so {named} would do nothing; "
                           "give --dashboard alone, or leave it out to sample (--once) or serve")


def test_the_dashboard_alone_and_with_json_still_prints(capsys):
    for flags in ((), ("--json",)):
        code, out, err = main_in_process(capsys, "monitor", "--dashboard", *flags)
        assert code == 0, err
        assert json.loads(out)["uid"] == "accelkit-overview"


@pytest.mark.parametrize(("flags", "named"), [(("--port", "9500"), "--port"),
                                              (("--host", "0.0.0.0", "--port", "1"), "--host, --port")])
def test_once_refuses_the_server_flags(capsys, flags, named):
    """`monitor --once --port 9500` printed a sample and served nothing: the port was dropped without a word."""
    code, out, err = main_in_process(capsys, "monitor", "--once", *flags)
    assert (code, out) == (2, "")
    assert err.strip().startswith(f"error: --once samples and prints, serving nothing, so {named} would do nothing;")
