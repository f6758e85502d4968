"""`bench resnet` with one image of 32 pixels a side: the last stage is 1×1, and training's BatchNorm has one value
per channel — the reference step died ("FAILED fp32 (first call): ValueError: Expected more than 1 value per
channel …", exit 1). Refused in one line naming both flags and the smallest side that trains; the refusal's
arithmetic is checked against the model itself, on both sides of the boundary."""

from __future__ import annotations

import pytest

from accelkit.bench.workloads import make_workload
from accelkit.core import UserError


def test_one_image_whose_last_stage_is_one_pixel_is_refused_naming_the_flags():
    with pytest.raises(UserError, match=r"^--batch-size 1 with --image-size 32 leaves tiny-resnet's last stage 1×1 "
                                        r"pixels, .*; give --image-size 33 or more, or --batch-size 2 or more$"):
        make_workload("resnet", {"size": "tiny", "image_size": 32, "batch_size": 1}).check("cpu")
    for fields in ({"image_size": 33, "batch_size": 1}, {"image_size": 8, "batch_size": 2}):
        make_workload("resnet", {"size": "tiny", **fields}).check("cpu")


def test_the_refusal_agrees_with_the_model_in_training_at_the_boundary():
    torch = pytest.importorskip("torch")
    from accelkit.models.build import build_model

    workload = make_workload("resnet", {"size": "tiny", "batch_size": 1})
    model = build_model(workload.model_spec, device="cpu", seed=0).train()
    model(pixel_values=torch.randn(1, 3, 33, 33))  # 33 → last stage 2×2: trains, and check lets it through
    make_workload("resnet", {"size": "tiny", "batch_size": 1, "image_size": 33}).check("cpu")
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        model(pixel_values=torch.randn(1, 3, 32, 32))
    with pytest.raises(UserError):
        make_workload("resnet", {"size": "tiny", "batch_size": 1, "image_size": 32}).check("cpu")
