"""`resnet`: an image-classification training step with SGD on synthetic images (ResNet-50/152/tiny)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from accelkit.bench.variants import Variant, apply
from accelkit.bench.workloads.base import (
    ACT_BYTES,
    EVAL_ROWS,
    MAX_SIZE,
    BenchWorkload,
    Prepared,
    Step,
    check_fits,
    evaluate_fn,
    model_seed,
    train_step,
)
from accelkit.core import ModelSpec, UserError
from accelkit.core import Workload as WorkloadSpec
from accelkit.core.spec import Spec, spec_field
from accelkit.models import resolve_model
from accelkit.models.build import build_model

SIZES = {"tiny": "tiny-resnet", "50": "resnet-50", "152": "resnet-152"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ResNetConfig(Spec):
    """ResNet training step (forward, cross-entropy, backward, SGD with momentum)."""

    size: Literal["tiny", "50", "152"] = spec_field("50", doc="tiny (stages 1-1-1-1 on 64² images), 50 or 152.")
    model: str | None = spec_field(None, doc="Any CNN preset or config.json instead of --size.")
    batch_size: int = spec_field(32, min=1, max=MAX_SIZE, doc="Images per step.")
    image_size: int | None = spec_field(None, min=8, max=MAX_SIZE, doc="Image side in pixels; None = the model's (224, tiny 64).")
    lr: float = spec_field(0.1, min=0.0, finite=True, doc="SGD learning rate (momentum 0.9).")


class ResNet(BenchWorkload):
    name = "resnet"
    config_cls = ResNetConfig
    task = "train"
    summary = "image-classification training step with SGD (ResNet-50/152/tiny), images/s"
    is_cnn = True

    @property
    def model_spec(self) -> ModelSpec:
        spec = resolve_model(self.config.model or SIZES[self.config.size])
        if spec.family != "resnet":
            raise UserError(f"--model {self.config.model} is a {spec.family} model; resnet needs a ResNet: give "
                            f"--size {'|'.join(SIZES)} or --model {', '.join(SIZES.values())} (or a ResNet config.json)")
        return spec

    @property
    def image_size(self) -> int:
        return self.config.image_size or self.model_spec.image_size or 224

    @property
    def label(self) -> str:
        return f"resnet {self.model_spec.name} train b{self.config.batch_size} {self.image_size}px"

    def spec(self) -> WorkloadSpec:
        return WorkloadSpec(
            model=self.model_spec, task="train", batch_size=self.config.batch_size, seq_len=self.image_size,
            optimizer="sgd",
        )

    def check(self, device: str) -> None:
        spec, c, side = self.model_spec, self.config, self.image_size
        halvings = 1 + len(spec.stage_depths)  # the stem's conv and pool, then every stage after the first: stride 2
        last = -(-side // 2 ** halvings)  # (each rounds up, and ⌈⌈s/2⌉/2⌉ = ⌈s/4⌉)
        if c.batch_size * last * last < 2:  # training's BatchNorm raised "Expected more than 1 value per channel"
            given = f"--image-size {side}" if c.image_size else f"image size {side} (the model's; --image-size sets it)"
            raise UserError(f"--batch-size {c.batch_size} with {given} leaves {spec.name}'s last stage {last}×{last} "
                            "pixels, so its BatchNorm sees one value per channel, which training cannot normalize; "
                            f"give --image-size {2 ** halvings + 1} or more, or --batch-size 2 or more")
        # fp32 input images, and the stem's output (half the side) kept for the backward
        data = c.batch_size * spec.num_channels * side * side * 4 + c.batch_size * spec.stem_width * (side // 2) ** 2 * ACT_BYTES
        check_fits(spec.num_params() * 4, device, spec.name, data_bytes=data,  # weights, grads, momentum
                   shape={"--batch-size": c.batch_size, "--image-size": side})

    def prepare(self, variant: Variant, device: str, *, seed: int) -> Prepared:
        import torch

        spec, c, side = self.model_spec, self.config, self.image_size
        gen = model_seed(seed)
        images = torch.randn(c.batch_size, spec.num_channels, side, side, generator=gen).to(device)
        labels = torch.randint(0, spec.num_labels or 1000, (c.batch_size,), generator=gen).to(device)
        if variant.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        model = build_model(spec, device=device, seed=seed).train()
        notes: list[str] = []  # what the recipe did, for the run's notes
        model = apply(model, variant, example_inputs=(images,), device=device, train=True, notes=notes)
        optimizer = torch.optim.SGD(model.parameters(), lr=c.lr, momentum=0.9)

        def loss() -> torch.Tensor:
            logits = model(pixel_values=images).logits
            return torch.nn.functional.cross_entropy(logits.float(), labels)

        return Prepared(
            steps=[Step("train step", train_step(model, optimizer, loss, variant, device), c.batch_size, "images",
                        returns_loss=True)],
            evaluate=evaluate_fn(model, variant, device, lambda: model(pixel_values=images[:EVAL_ROWS]).logits),
            notes=notes,
        )
