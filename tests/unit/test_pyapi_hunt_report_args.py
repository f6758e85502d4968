"""build_report/write_report from Python: a store that is not a ResultStore (a path) and an output path that is a
directory or lies in a missing directory are one line naming what was passed, said before the report is built
(were an AttributeError from deep inside, IsADirectoryError, and a FileNotFoundError naming a temporary file)."""

import pytest

from accelkit.core import UserError
from accelkit.report import build_report, write_report
from accelkit.results import ResultStore


@pytest.fixture
def store(tmp_path):
    with ResultStore(tmp_path / "results.db") as s:
        yield s


def test_a_path_as_store_is_named(tmp_path):
    path = str(tmp_path / "results.db")
    for call in (lambda: build_report(path), lambda: write_report(tmp_path / "r.html", store=path)):
        with pytest.raises(TypeError) as caught:
            call()
        assert str(caught.value).startswith(f"store={path!r} is not a ResultStore; pass accelkit.results.ResultStore(")
    assert not (tmp_path / "r.html").exists()


def test_an_output_directory_is_refused_before_the_build(tmp_path, store):
    with pytest.raises(UserError) as caught:
        write_report(tmp_path, store=store)
    assert str(caught.value) == (f"path={str(tmp_path)!r} is a directory; give a file path such as "
                                 f"{str(tmp_path / 'report.html')!r}")


def test_a_missing_directory_is_named_not_the_temporary_file(tmp_path, store):
    out = tmp_path / "missing" / "report.html"
    with pytest.raises(UserError) as caught:
        write_report(out, store=store)
    message = str(caught.value)
    assert message == (f"path={str(out)!r}: the directory {str(tmp_path / 'missing')!r} does not exist; create it "
                       "first or choose another path")
    assert ".tmp" not in message and not (tmp_path / "missing").exists()
