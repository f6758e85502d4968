"""ResultStore's Python API names a bad argument and its fix: ``add("x")`` was a bare AttributeError, ``query(limit=
"3")`` and ``query(kind=3)`` bare TypeErrors, ``query(limit=2.5)`` "cannot read the results store (datatype mismatch);
check that it is readable", ``query(limit=-1)`` an empty list, and ``run_id=5`` stored where no ``run_id="5"`` finds it."""

import pytest

from accelkit.core import Measurement
from accelkit.results import ResultStore


@pytest.fixture
def store(tmp_path):
    with ResultStore(tmp_path / "r.db") as s:
        s.add(Measurement(kind="probe", name="p", hardware="cpu"))
        yield s


@pytest.mark.parametrize(("kwargs", "error", "starts"), [
    ({"limit": "3"}, TypeError, "limit='3' is not valid"),
    ({"limit": 2.5}, TypeError, "limit=2.5 is not valid"),
    ({"limit": -1}, ValueError, "limit=-1 is not valid"),
    ({"kind": 3}, TypeError, "kind=3 is not valid"),
    ({"hardware": [None]}, TypeError, "hardware=[None] is not valid"),
    ({"run_id": 5}, TypeError, "run_id=5 is not valid"),
])
def test_query_names_the_bad_argument(store, kwargs, error, starts):
    with pytest.raises(error) as caught:
        store.query(**kwargs)
    assert str(caught.value).startswith(starts) and "give " in str(caught.value)


def test_query_takes_good_limits(store):
    assert len(store.query(limit=0)) == 0 and len(store.query(limit=1)) == 1 and len(store.query()) == 1


@pytest.mark.parametrize("result", ["hello", None])
def test_add_refuses_what_is_not_a_result(store, result):
    with pytest.raises(TypeError, match=r"is not an accelkit.core Estimate or Measurement"):
        store.add(result)
    with pytest.raises(TypeError, match=r"^run_id=5 is not valid"):
        store.add(Measurement(kind="probe", name="p", hardware="cpu"), run_id=5)  # type: ignore[arg-type]
    assert store.count() == 1
