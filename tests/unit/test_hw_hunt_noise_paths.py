"""accelkit/_noise.py drops torchao's known-harmless `Failed to load …_C_mxfp8….so` line wherever torchao is
installed: a path with a space (`/Users/Jane Doe/…`) let it through, since the file was matched as one run of
non-spaces. Any other failed library still shows."""

import logging

import pytest

import accelkit  # noqa: F401  (installs the filters)

HOME = "/Users/Jane Doe/My Projects/.venv/lib/python3.11/site-packages/torchao"


@pytest.mark.parametrize("message", [
    f"Failed to load {HOME}/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c10",
    f"Failed to load {HOME}/_C_cutlass_90a.abi3.so: libcuda.so.1: cannot open shared object file",
    "Failed to load /opt/venv/lib/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: undefined symbol",
])
def test_known_harmless_line_is_dropped_whatever_the_path(message: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        logging.getLogger("torchao").warning(message)
    assert not caplog.records


@pytest.mark.parametrize("message", [
    f"Failed to load {HOME}/_C.abi3.so: undefined symbol _C_mxfp8",
    "Failed to load /opt/venv/lib/torchao/_C.abi3.so: cannot open /opt/x/_C_mxfp8.so",
])
def test_another_library_failing_still_shows(message: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        logging.getLogger("torchao").warning(message)
    assert [r.getMessage() for r in caplog.records] == [message]
