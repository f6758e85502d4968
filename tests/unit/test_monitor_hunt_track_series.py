"""track()'s gauges say what is true now: a step with no count (samples=0) withdraws the previous step's rate (it
stood for the zero-sample step), and a finished job's gauges leave the registry (they were scraped, frozen at the
last step's values, for the rest of the process) while its cumulative step count stays."""

import contextlib

import pytest
from prometheus_client import CollectorRegistry

from accelkit.core import UserError
from accelkit.monitor.track import track


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"job_name": "t", **labels})


def test_a_step_without_samples_withdraws_the_previous_rate():
    registry = CollectorRegistry()
    with track("t", samples_per_step=4, flops_per_step=1e9, peak_flops=1e12, registry=registry) as job:
        job.step()
        assert _value(registry, "accelkit_job_samples_per_second") is not None
        record = job.step(samples=0, flops=0)
        assert record.samples_per_s is None and record.mfu is None
        assert _value(registry, "accelkit_job_samples_per_second") is None  # was the previous step's rate
        assert _value(registry, "accelkit_job_mfu") is None
        job.step()  # the next counted step publishes again
        assert _value(registry, "accelkit_job_samples_per_second") > 0


@pytest.mark.parametrize("fails", [False, True])
def test_a_finished_job_leaves_only_its_totals(fails):
    registry = CollectorRegistry()
    with pytest.raises(RuntimeError) if fails else contextlib.nullcontext(), \
            track("t", samples_per_step=4, tokens_per_step=64, flops_per_step=1e9, peak_flops=1e12,
                  registry=registry) as job:
        job.step(loss=0.5)
        job.log(lr=1e-3)
        assert _value(registry, "accelkit_job_tokens_per_second") is not None
        if fails:
            raise RuntimeError("the training loop crashed")
    for name, labels in (("accelkit_job_samples_per_second", {}), ("accelkit_job_tokens_per_second", {}),
                         ("accelkit_job_mfu", {}), ("accelkit_job_last_step_seconds", {}),
                         ("accelkit_job_host_memory_bytes", {"kind": "rss"}),
                         ("accelkit_job_scalar", {"scalar": "loss"}), ("accelkit_job_scalar", {"scalar": "lr"})):
        assert _value(registry, name, **labels) is None, f"{name}{labels} outlived the job"
    assert _value(registry, "accelkit_job_steps_total") == 1  # cumulative: still true after the end
    assert _value(registry, "accelkit_job_step_seconds_count") == 1


def test_a_step_after_the_end_is_refused_and_publishes_nothing():
    registry = CollectorRegistry()
    with track("t", samples_per_step=4, registry=registry) as job:
        job.step()
    for call in (lambda: job.step(loss=1.0), lambda: job.log(loss=1.0)):
        with pytest.raises(UserError, match=r"^job 't' has ended .*start a new track\('t'\)$"):
            call()
    assert _value(registry, "accelkit_job_samples_per_second") is None
    assert _value(registry, "accelkit_job_scalar", scalar="loss") is None
    assert _value(registry, "accelkit_job_steps_total") == 1
