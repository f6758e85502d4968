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
