"""`accelkit results import -` reads standard input: empty, not UTF-8 or closed input is one error line naming
standard input and what to pipe in (exit 2), never a traceback, JSON parser position, or a hang."""

import io
import json
import sys

import pytest

from tests.conftest import main_in_process


def _stdin(data: bytes) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")


@pytest.mark.parametrize(("data", "says"), [
    (b"", "standard input is empty"),
    (b" \n\t\n", "standard input is empty"),
    (b"\xff\xfe{}", "standard input is not UTF-8 text"),
    (None, "standard input is closed"),
])
def test_unreadable_stdin_is_one_error_line(capsys, monkeypatch, data, says):
    monkeypatch.setattr(sys, "stdin", None if data is None else _stdin(data))
    code, out, err = main_in_process(capsys, "results", "import", "-")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "", (code, out, err)
    assert len(lines) == 1 and lines[0].startswith(f"error: {says}; pipe in what `accelkit results export --format "
                                                   "json` writes"), lines


def test_stdin_with_an_export_is_imported(capsys, monkeypatch, tmp_path):
    """The same path reads a real export: the errors above are only for input that holds none."""
    from accelkit.core import Measurement
    from accelkit.results import ResultStore

    with ResultStore(tmp_path / "results.db") as other:
        other.add(Measurement(kind="probe", name="hw probe x", hardware="cpu: x", throughput=1.0, details={}))
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path))
    code, exported, err = main_in_process(capsys, "results", "export", "--format", "json")
    assert code == 0, err
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "stdin", _stdin(exported.encode()))
    code, out, err = main_in_process(capsys, "results", "import", "-", "--json")
    assert code == 0, err
    assert json.loads(out)["imported"] == 1
