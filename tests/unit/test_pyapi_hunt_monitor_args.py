"""Exporter() and track() name a wrongly typed argument in one line: a dict as the exporter's config (was an
AttributeError at start(), after the device libraries were opened), a string as registry (was "cannot create weak
reference to 'str' object"), a number as the job name (became a label silently), a string as training (counted a
training step), training=False without model= (ignored), and tokens_per_step=0 with model= (replaced by batch × seq,
where without model= it is refused)."""

import pytest
from prometheus_client import CollectorRegistry

from accelkit.core import UserError
from accelkit.models import get_preset
from accelkit.monitor import Exporter, track


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"config": {"port": 0}}, "config={'port': 0} is not an ExporterConfig; pass ExporterConfig("),
    ({"registry": "reg"}, "registry='reg' is not a prometheus_client CollectorRegistry; leave it out"),
])
def test_exporter_names_a_wrongly_typed_argument(kwargs, message):
    with pytest.raises(TypeError) as caught:
        Exporter(**kwargs)
    assert str(caught.value).startswith(message)


SPEC = get_preset("tiny-llama")


@pytest.mark.parametrize(("job", "kwargs", "error", "message"), [
    (3, {}, UserError, "job=3 is not a name; give the job a non-empty string"),
    ("j", {"registry": "reg"}, TypeError, "registry='reg' is not a prometheus_client CollectorRegistry"),
    ("j", {"flops_per_step": 1e9, "training": "no"}, UserError, "training='no' is not True or False"),
    ("j", {"flops_per_step": 1e9, "training": False}, UserError, "training=False is read only with model="),
    ("j", {"model": SPEC, "samples_per_step": 2, "seq_len": 16, "tokens_per_step": 0}, UserError,
     "tokens_per_step=0 must be a finite number > 0"),
])
def test_track_names_a_wrongly_typed_argument(job, kwargs, error, message):
    kwargs.setdefault("registry", CollectorRegistry())
    with pytest.raises(error) as caught, track(job, **kwargs):
        pass
    assert str(caught.value).startswith(message)


def test_track_still_counts_a_forward_pass_with_a_model():
    with track("infer", model=SPEC, samples_per_step=2, seq_len=16, training=False,
               registry=CollectorRegistry()) as job:
        assert job.tokens_per_step == 32
        assert job.flops_per_step is not None and job.flops_per_step > 0


@pytest.mark.parametrize("host", ["", "  "])
def test_an_exporter_host_that_names_no_address_is_refused_up_front(host):
    """It was taken, and start() then said 'cannot listen on :9400 (Name or service not known)'."""
    from accelkit.monitor.config import ExporterConfig

    with pytest.raises(ValueError, match=r"\(--host\) names no address; give 127\.0\.0\.1"):
        ExporterConfig(host=host)
