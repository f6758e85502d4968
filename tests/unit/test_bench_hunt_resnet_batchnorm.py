"""`bench resnet` with one image of 32 pixels a side: the last stage is 1×1, and training's BatchNorm has one value
per channel — the reference step died with "internal error (ValueError: Expected more than 1 value per channel …)
— a bug in accelkit". Refused in one line naming both flags; a batch of 2, or a larger side, still runs."""

from __future__ import annotations

import pytest

from accelkit.bench.workloads import make_workload
from accelkit.core import UserError


def test_one_image_whose_last_stage_is_one_pixel_is_refused_naming_the_flags():
    with pytest.raises(UserError, match=r"--batch-size 1 at --image-size 32 leaves the last stage's BatchNorm one value "
                                        r"per channel \(1×1 per image\)"):
        make_workload("resnet", {"size": "tiny", "image_size": 32, "batch_size": 1}).check("cpu")
    for fields in ({"image_size": 32, "batch_size": 2}, {"image_size": 64, "batch_size": 1}):
        make_workload("resnet", {"size": "tiny", **fields}).check("cpu")  # (2 values per channel: it trains)
