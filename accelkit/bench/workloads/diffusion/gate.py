"""The accuracy gate for images: a variant's final latents and decoded image of the seeded evaluation call against
the fp32 run's — the same prompts, the same initial noise — by two figures:

- **latent cosine**: cosine similarity of the final latents (every row flattened together), at least
  ``LATENT_COSINE_MIN``;
- **image PSNR**: 10·log10(1 / MSE) of the decoded images in [0, 1], the worst image of the slice, at least
  ``IMAGE_PSNR_MIN_DB``.

Why these bounds: a denoiser's rounding errors are integrated over every step, so a 16-bit run drifts from fp32
further than one forward would. The tiny presets on a CPU (128², 4 steps, seed 0; docs/bench.md): bf16 latent
cosine 0.9998-0.9999 and PSNR 42-48 dB, fp16 62-68 dB; a broken variant — the denoiser's output projection negated
— cosine 0.27 and 15 dB. The bounds sit between the two with room on both sides (0.99 and 30 dB). A trained model
at 28-50 steps may drift further than a random tiny one: a failure there is a reason to look at the images (the
evaluation call's, kept nowhere by the bench), not proof of a broken recipe.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from accelkit.core.bench_result import OutputGate

if TYPE_CHECKING:
    import torch

LATENT_COSINE_MIN = 0.99
IMAGE_PSNR_MIN_DB = 30.0
CRITERION = (f"final latents cosine ≥ {LATENT_COSINE_MIN} and decoded image PSNR ≥ {IMAGE_PSNR_MIN_DB:g} dB (worst "
             "image, pixels in [0, 1]) against the fp32 run of the same seeded call")


def cosine(reference: torch.Tensor, output: torch.Tensor) -> float:
    """Cosine similarity of two tensors flattened, summed in float64."""
    import torch

    ref, out = reference.double().flatten(), output.double().flatten()
    norms = float(torch.linalg.vector_norm(ref) * torch.linalg.vector_norm(out))
    return float((ref * out).sum()) / norms if norms > 0 else 0.0


def psnr_db(reference: torch.Tensor, output: torch.Tensor) -> float:
    """The lowest PSNR over the images (rows) of a batch, pixels in [0, 1]: 10·log10(1 / MSE); inf when equal."""
    errors = (output.double() - reference.double()).pow(2).flatten(1).mean(1)
    worst = float(errors.max())
    return math.inf if worst == 0 else 10 * math.log10(1.0 / worst)


def image_gate(reference: torch.Tensor, output: torch.Tensor, latent_numel: int) -> OutputGate:
    """The gate on an evaluation output of rows [latents (``latent_numel`` values) | image pixels]."""
    import torch

    thresholds = {"latent_cosine": LATENT_COSINE_MIN, "image_psnr_db": IMAGE_PSNR_MIN_DB}
    if not bool(torch.isfinite(output).all()):
        bad = int((~torch.isfinite(output)).sum())
        return OutputGate(criterion=CRITERION, passed=False, thresholds=thresholds,
                          figures={"latent_cosine": None, "image_psnr_db": None},
                          note=f"the output has inf/NaN ({bad} of {output.numel()} values): an overflow")
    lat_ref, lat_out = reference[:, :latent_numel], output[:, :latent_numel]
    img_ref, img_out = reference[:, latent_numel:], output[:, latent_numel:]
    latent, psnr = cosine(lat_ref, lat_out), psnr_db(img_ref, img_out)
    figures: dict[str, float | None] = {"latent_cosine": latent, "image_psnr_db": psnr,
                                        "image_max_abs_error": float((img_out - img_ref).abs().max())}
    passed = latent >= LATENT_COSINE_MIN and psnr >= IMAGE_PSNR_MIN_DB
    # an identical image has an infinite PSNR: not JSON, so it is recorded as None with the note saying why
    note = None
    if math.isinf(psnr):
        figures["image_psnr_db"] = None
        note = "the images are identical to the fp32 run's (PSNR infinite)"
    return OutputGate(criterion=CRITERION, passed=passed, figures=figures, thresholds=thresholds, note=note)
