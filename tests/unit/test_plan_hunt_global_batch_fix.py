"""A global batch no dp divides: the error offered "a --global-batch that is a multiple of one" — of one what, when dp
had one value (resnet-50 or llama on 3 devices)? It names the multiple and the nearest global batches, and those plan."""

from __future__ import annotations

import re

import pytest

from accelkit.core import Cluster, Recipe, UserError, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import search


def test_the_global_batch_error_names_batches_that_plan():
    w = Workload(model=get_preset("llama-3.1-8b"), task="train", seq_len=4096, recipe=Recipe(precision="bf16"))
    cluster = Cluster(device=get_device("h100"), num_devices=3)
    with pytest.raises(UserError) as info:
        search(w, cluster, global_batch=32)
    message = str(info.value)
    assert message.endswith("dp can only be 3; give a --global-batch that is a multiple of 3, e.g. 30 or 33"), message
    for batch in map(int, re.search(r"e\.g\. (\d+) or (\d+)$", message).groups()):  # type: ignore[union-attr]
        best = search(w, cluster, global_batch=batch)[0]
        assert best.layout.dp == 3 and 3 * best.layout.micro_batch * best.layout.grad_accum == batch
