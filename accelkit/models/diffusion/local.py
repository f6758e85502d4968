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
    DENOISER_CLASS,
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
#: FLUX.1-schnell (a FLUX transformer without guidance_embeds: timestep-distilled): 4 steps, no guidance, 256 T5
#: tokens, as diffusers' FluxPipeline example and docs run it (FLUX-dev's 28 steps at 3.5 were used; found in a hunt)
_SCHNELL_DEFAULTS = (4, 0.0, 256)
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


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: keys whose published value is one number where diffusers takes a list as well (a (height, width) sample_size, a
#: cross_attention_dim per block)
_NUMBER_OR_LIST = ("sample_size", "cross_attention_dim")


def _fits(key: str, value: object, reference: object) -> bool:
    """Whether a config value has the JSON type of the published config's (the full preset's) value: a flag, a
    number, text, or a list of them; where the published value is a list of numbers one number stands for it too
    (diffusers takes either for transformer_layers_per_block, attention_head_dim, …)."""
    if value is None or reference is None:
        return True  # null: the count's own default or its refusal
    if isinstance(reference, bool):
        return isinstance(value, bool)
    if isinstance(reference, str):
        return isinstance(value, str)
    numbers = isinstance(value, list) and bool(value) and all(_number(v) for v in value)
    if _number(reference):
        return _number(value) or (key in _NUMBER_OR_LIST and numbers)
    if isinstance(reference, list) and reference and all(_number(v) for v in reference):
        return _number(value) or numbers
    if isinstance(reference, list) and reference and all(isinstance(v, str) for v in reference):
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return True


def _published_configs(family: DiffusionFamily, published: Callable[[str], DiffusionSpec]
                       ) -> tuple[DiffusionSpec, dict[str, dict[str, Any]]]:
    """(the full preset of ``family``, every text encoder kind's published config): what :func:`_check_types` holds
    a directory's values to. ``published``: a preset by name (the presets module's lookup, passed in: that module
    reads pipeline folders through this one)."""
    full = {"sd3": "sd3-medium", "flux": "flux-dev", "sdxl": "sdxl-base"}
    encoders: dict[str, dict[str, Any]] = {e.kind: e.config for name in full.values()
                                          for e in published(name).text_encoders}
    return published(full[family]), encoders


def _check_types(root: Path, folders: dict[str, tuple[str, dict[str, Any]]],
                 published: tuple[DiffusionSpec, dict[str, dict[str, Any]]]) -> None:
    """Refuse, in one line naming the file and the key, a value of another type than the published config's (a
    "patch_size": "2" was an internal error, exit 1, in `models show` and `plan`; found in a hunt). ``folders``:
    folder → (text encoder kind or '', its config); ``published``: :func:`_published_configs`."""
    own, encoders = published
    for folder, (kind, config) in folders.items():
        reference = encoders.get(kind, {}) if kind else own.vae if folder == "vae" else own.denoiser
        for key, value in config.items():
            if key in reference and not _fits(key, value, reference[key]):
                raise UserError(f"{root / folder / 'config.json'}: {key!r} is {json.dumps(value)}, where diffusers "
                                f"writes a value like {json.dumps(reference[key])}; fix it (or save the pipeline "
                                "again with save_pretrained)")


#: scheduler keys diffusers' schedulers read as they build or space their steps, and the values they take (a whole
#: number from a minimum, or one of some words): another value failed inside diffusers, exit 1, in the bench's first
#: call, and a null num_train_timesteps was an internal error in `plan` (found in a hunt)
_SCHEDULER_VALUES: dict[str, int | tuple[str, ...]] = {
    "num_train_timesteps": 1, "steps_offset": 0, "timestep_spacing": ("linspace", "leading", "trailing"),
    "beta_schedule": ("linear", "scaled_linear", "squaredcos_cap_v2"),
}


def _check_scheduler(root: Path, family: DiffusionFamily, config: dict[str, Any]) -> None:
    """Refuse, in one line naming the file and the key, a scheduler value that diffusers' scheduler of ``family``
    cannot run (the SDXL keys apply to its EulerDiscreteScheduler; SD3's and FLUX's flow-matching one reads
    num_train_timesteps only)."""
    path = root / "scheduler" / "scheduler_config.json"
    if not path.is_file():
        path = root / "scheduler" / "config.json"
    for key, allowed in _SCHEDULER_VALUES.items():
        if key not in config or (family != "sdxl" and key != "num_train_timesteps"):
            continue
        value = config[key]
        if isinstance(allowed, int):
            if not isinstance(value, int) or isinstance(value, bool) or value < allowed:
                raise UserError(f"{path}: {key!r} is {json.dumps(value)}; diffusers' scheduler takes a whole number "
                                f"of at least {allowed} (the published configs': "
                                f"{1000 if key == 'num_train_timesteps' else 1}); fix it")
        elif value not in allowed:
            raise UserError(f"{path}: {key!r} is {json.dumps(value)}; diffusers' EulerDiscreteScheduler takes "
                            f"{', '.join(map(json.dumps, allowed))}; fix it")


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
        except (TypeError, ValueError, ArithmeticError, IndexError) as exc:  # a value of the right type that no
            # model has (a patch_size of 0, a list where one number goes): the file, not an internal error
            raise UserError(f"{root / folder / 'config.json'}: its values do not describe a model accelkit can count "
                            f"({type(exc).__name__}: {exc}); compare it with diffusers' save_pretrained output") from exc


def _family(root: Path, index: dict[str, Any]) -> DiffusionFamily:
    """The pipeline family ``model_index.json``'s ``_class_name`` names; a UserError naming what to write where it is
    missing ('pipeline None is not one accelkit models' said nothing of the key; found in a hunt) or not modelled."""
    by_class: dict[str, DiffusionFamily] = {cls: fam for fam, cls in PIPELINE_CLASS.items()}  # type: ignore[misc]
    if "_class_name" not in index:
        by_denoiser = {cls: PIPELINE_CLASS[fam] for fam, cls in DENOISER_CLASS.items()}
        denoiser_class = next((e[1] for e in (index.get("transformer"), index.get("unet"))
                               if isinstance(e, list) and len(e) == 2 and e[1] in by_denoiser), None)
        raise UserError(f"{root / 'model_index.json'} has no '_class_name', the pipeline's diffusers class; add "
                        + (f'"_class_name": "{by_denoiser[denoiser_class]}" (its denoiser is a {denoiser_class})'
                           if denoiser_class else f"one of {', '.join(sorted(by_class))}"))
    family = by_class.get(str(index.get("_class_name")))
    if family is None:
        raise UserError(f"{root}: pipeline {index.get('_class_name')!r} is not one accelkit models; supported: "
                        f"{', '.join(sorted(by_class))}")
    return family


def load_dir(path: str, published: Callable[[str], DiffusionSpec]) -> DiffusionSpec:
    """The DiffusionSpec of a diffusers pipeline directory (SD3, FLUX or SDXL pipelines); ``published``: a preset by
    name, whose configs the directory's values are checked against (:func:`_check_types`)."""
    root = Path(path)
    index = _read(root / "model_index.json")
    family = _family(root, index)
    denoiser_folder = "unet" if family == "sdxl" else "transformer"
    denoiser = _config(root, denoiser_folder)
    # diffusers' FluxTransformer2DModel defaults guidance_embeds to False, and FluxPipeline then passes no guidance
    schnell = family == "flux" and not denoiser.get("guidance_embeds", False)
    steps, guidance, t5_tokens = _SCHNELL_DEFAULTS if schnell else _DEFAULTS[family]
    reference = _published_configs(family, published)
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
        _check_types(root, {slot: (kind, config)}, reference)
        tokens = t5_tokens if kind == "t5" else config.get("max_position_embeddings", CLIP_TOKENS)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise UserError(f"{root / slot / 'config.json'}: 'max_position_embeddings' is {json.dumps(tokens)}; "
                            f"expected a positive integer (CLIP's is {CLIP_TOKENS})")
        encoders.append(TextEncoder(kind=kind, config=config, max_length=tokens))  # type: ignore[arg-type]
        slots.append(slot)
    vae = _config(root, "vae")
    _check_types(root, {denoiser_folder: ("", denoiser), "vae": ("", vae)}, reference)
    factor = 2 ** (len(vae.get("block_out_channels", (0, 0, 0, 0))) - 1)
    sample = denoiser.get("sample_size") or 128
    if isinstance(sample, list):  # (height, width): diffusers' default size is square in every published config
        if len(set(sample)) != 1:
            raise UserError(f"{root / denoiser_folder / 'config.json'}: 'sample_size' is {json.dumps(sample)}, not "
                            "square; accelkit models one resolution: write one number")
        sample = sample[0]
    scheduler = _config(root, "scheduler")
    _check_scheduler(root, family, scheduler)
    try:
        spec = DiffusionSpec(
            name=root.resolve().name, family=family, denoiser=denoiser, vae=vae, text_encoders=tuple(encoders),
            scheduler=scheduler, resolution=int(sample) * factor,
            steps=steps, guidance=guidance, force_zeros_for_empty_prompt=bool(index.get(
                "force_zeros_for_empty_prompt", family == "sdxl")), max_sequence_length=dropped_t5,
            source=f"local directory {root.resolve()}",
        )
    except ValueError as exc:
        raise UserError(f"{path}: {exc}") from exc
    _check_keys(root, spec, slots)
    return spec
