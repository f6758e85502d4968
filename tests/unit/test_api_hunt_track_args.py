"""track() refuses what it would ignore or misread: a preset name as ``model`` (a bare AttributeError), ``model`` with
``flops_per_step`` (the model was ignored), ``seq_len`` without ``model`` (ignored: no tokens/s)."""

import pytest
from prometheus_client import CollectorRegistry

from accelkit.core import UserError
from accelkit.models import get_preset
from accelkit.monitor.track import track


@pytest.mark.parametrize(("kwargs", "starts"), [
    ({"model": "tiny-llama", "samples_per_step": 2, "seq_len": 16}, "model='tiny-llama' is not a ModelSpec; pass"),
    ({"model": get_preset("tiny-llama"), "samples_per_step": 2, "seq_len": 16, "flops_per_step": 5.0},
     "model= and flops_per_step= both count"),
    ({"samples_per_step": 2, "seq_len": 16}, "seq_len=16 is read only with model="),
])
def test_track_refuses_an_argument_it_would_ignore(kwargs, starts):
    with pytest.raises(UserError) as caught, track("bad", registry=CollectorRegistry(), **kwargs):
        pass
    assert str(caught.value).startswith(starts) and "give" in str(caught.value)
