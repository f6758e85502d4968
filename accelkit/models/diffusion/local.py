"""A diffusers pipeline directory on disk (``save_pretrained`` output, or a hub snapshot copied over) → DiffusionSpec,
from its JSON configs alone: ``model_index.json`` names the pipeline class, each component folder holds its
``config.json``. Weights, if the folders have them, are loaded by ``build.load_pipeline``; without them the bench
builds the same architecture with random weights."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelkit.core import UserError
from accelkit.models.diffusion.pipeline import denoiser_count
from accelkit.models.diffusion.spec import (
    CLIP_TOKENS,
    ENCODER_SLOTS,
    PIPELINE_CLASS,
    DiffusionFamily,
    DiffusionSpec,
    TextEncoder,
)
from accelkit.models.diffusion.text import encoder_count
from accelkit.models.diffusion.unet import vae_decoder, vae_params

#: the pipeline defaults a directory does not hold: steps, guidance, T5 tokens (max_sequence_length)
_DEFAULTS = {"sd3": (28, 7.0, 256), "flux": (28, 3.5, 512), "sdxl": (50, 5.0, 0)}
_ENCODER_KIND = {"CLIPTextModel": "clip", "CLIPTextModelWithProjection": "clip-projection",
                 "T5EncoderModel": "t5"}
_WEIGHTS = ("*.safetensors", "*.bin")


def is_pipeline_dir(path: str) -> bool:
    return (Path(path) / "model_index.json").is_file()


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}; a diffusers pipeline directory holds one config per component "
                        "(save_pretrained writes them)") from exc
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a JSON object")
    return data


def _config(root: Path, folder: str) -> dict[str, Any]:
    for name in ("config.json", "scheduler_config.json"):
        if (root / folder / name).is_file():
            return {k: v for k, v in _read(root / folder / name).items() if not k.startswith("_")}
    raise UserError(f"{root / folder} has no config.json; the pipeline directory is incomplete")


def _weight_files(root: Path) -> list[Path]:
    return [f for folder in ("transformer", "unet") for pattern in _WEIGHTS for f in sorted((root / folder).glob(pattern))]


def has_weights(path: str) -> bool:
    """Whether the directory's denoiser folder holds weights (else the bench uses random ones)."""
    return bool(_weight_files(Path(path)))


def weights_variant(path: str) -> str | None:
    """The variant the denoiser's weights are saved as where the folder holds only variant files —
    ``save_pretrained(variant="fp16")`` writes ``diffusion_pytorch_model.fp16.safetensors``, which ``from_pretrained``
    loads only when given ``variant="fp16"`` (without it the load failed in diffusers' words; found in review) —
    else None: plain weights, which it loads by default."""
    names = [f.name.split(".") for f in _weight_files(Path(path))]  # name[-shard].variant.ext
    if not names or any(len(parts) == 2 for parts in names):
        return None
    variants = sorted({parts[-2] for parts in names})
    if len(variants) > 1:
        raise UserError(f"{path}: the denoiser's weights come as variants {', '.join(variants)} and none plain; keep "
                        "one variant's files")
    return variants[0]


def _check_keys(root: Path, spec: DiffusionSpec, slots: list[str]) -> None:
    """Each component's closed-form count once, so that a config without a key the counts read is refused here, in
    one line naming its file and the key — not a KeyError in `models show`, `plan` or a bench (found in review)."""
    side = spec.resolution
    checks: list[tuple[str, Callable[[], object]]] = [
        ("unet" if spec.family == "sdxl" else "transformer", lambda: denoiser_count(spec, side, side)),
        ("vae", lambda: vae_params(spec.vae) + vae_decoder(spec.vae, 1, 1).flops),
    ]
    checks += [(slot, functools.partial(encoder_count, e)) for slot, e in zip(slots, spec.text_encoders, strict=True)]
    for folder, count in checks:
        try:
            count()
        except KeyError as exc:
            raise UserError(f"{root / folder / 'config.json'} has no {exc.args[0]!r}, which accelkit reads to count "
                            "that component; add it (diffusers' save_pretrained writes every key)") from exc


def load_dir(path: str) -> DiffusionSpec:
    """The DiffusionSpec of a diffusers pipeline directory (SD3, FLUX or SDXL pipelines)."""
    root = Path(path)
    index = _read(root / "model_index.json")
    by_class: dict[str, DiffusionFamily] = {cls: fam for fam, cls in PIPELINE_CLASS.items()}  # type: ignore[misc]
    family = by_class.get(str(index.get("_class_name")))
    if family is None:
        raise UserError(f"{path}: pipeline {index.get('_class_name')!r} is not one accelkit models; supported: "
                        f"{', '.join(sorted(by_class))}")
    steps, guidance, t5_tokens = _DEFAULTS[family]
    encoders, slots, dropped_t5 = [], [], 0
    for slot in ENCODER_SLOTS:
        entry = index.get(slot)
        if not isinstance(entry, list) or entry[1] is None:
            if family == "sd3" and slot == "text_encoder_3":  # T5 dropped to save memory: the MMDiT gets zeros
                dropped_t5 = t5_tokens
            continue
        kind = _ENCODER_KIND.get(str(entry[1]))
        if kind is None:
            raise UserError(f"{path}: text encoder {slot} is a {entry[1]}; supported: {', '.join(_ENCODER_KIND)}")
        config = _config(root, slot)
        tokens = t5_tokens if kind == "t5" else int(config.get("max_position_embeddings", CLIP_TOKENS))
        encoders.append(TextEncoder(kind=kind, config=config, max_length=tokens))  # type: ignore[arg-type]
        slots.append(slot)
    denoiser = _config(root, "unet" if family == "sdxl" else "transformer")
    vae = _config(root, "vae")
    factor = 2 ** (len(vae.get("block_out_channels", (0, 0, 0, 0))) - 1)
    try:
        spec = DiffusionSpec(
            name=root.resolve().name, family=family, denoiser=denoiser, vae=vae, text_encoders=tuple(encoders),
            scheduler=_config(root, "scheduler"), resolution=int(denoiser.get("sample_size") or 128) * factor,
            steps=steps, guidance=guidance, force_zeros_for_empty_prompt=bool(index.get(
                "force_zeros_for_empty_prompt", family == "sdxl")), max_sequence_length=dropped_t5,
            source=f"local directory {root.resolve()}",
        )
    except ValueError as exc:
        raise UserError(f"{path}: {exc}") from exc
    _check_keys(root, spec, slots)
    return spec
