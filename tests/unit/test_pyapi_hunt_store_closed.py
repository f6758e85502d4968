"""A ResultStore used after close() (or after its `with` block) says so, instead of sending the user to check that
a file which is fine is readable."""

import pytest

from accelkit.core import AccelkitError, Measurement
from accelkit.results import ResultStore


def test_a_closed_store_says_it_was_closed(tmp_path):
    with ResultStore(tmp_path / "results.db") as store:
        pass
    closed = "this ResultStore was closed (close() or the end of its `with` block); open a new ResultStore(...)"
    for action, call in (("read", store.query), ("read", store.count), ("read", lambda: store.schema_version),
                         ("read", store.integrity_ok),
                         ("write", lambda: store.add(Measurement(kind="bench", name="x")))):
        with pytest.raises(AccelkitError) as caught:
            call()
        assert str(caught.value) == f"cannot {action} the results store {tmp_path / 'results.db'}: {closed}"
