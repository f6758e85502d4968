"""`accelkit serve`'s torch threads on a CPU when --cpu-threads is not given (accelkit.serve.config.served_cpu_threads):
a core left to the HTTP server, as vLLM's CPU backend leaves one to its API server; OMP_NUM_THREADS, where set, wins."""

import pytest

from accelkit.serve.config import served_cpu_threads


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 1), (3, 2), (64, 63)])
def test_the_usable_cores_less_one_and_never_none(cores, threads):
    assert served_cpu_threads({}, cores) == threads


def test_omp_num_threads_leaves_the_count_to_torch():
    assert served_cpu_threads({"OMP_NUM_THREADS": "4"}, 64) is None
    assert served_cpu_threads({"PATH": "/usr/bin"}, 64) == 63
