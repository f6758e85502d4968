"""Builders: a diffusers text-to-image pipeline for a DiffusionSpec — its denoiser, VAE and scheduler from diffusers,
its text encoders from transformers — with random weights (nothing is downloaded), or one loaded from a local
diffusers directory. ``device="meta"`` builds the structure without memory (FLOP counts, parameter checks).

Tokenizers are word-level ones built here (``w4 w5 …``, the ids the random text encoders take): a prompt costs the
encoders the same at any content, since CLIP pads to 77 positions and T5 to the pipeline's max_sequence_length.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from accelkit.models.diffusion.local import weights_variant
from accelkit.models.diffusion.spec import (
    DENOISER_CLASS,
    ENCODER_SLOTS,
    PIPELINE_CLASS,
    SCHEDULER_CLASS,
    DiffusionSpec,
    TextEncoder,
)

if TYPE_CHECKING:
    import torch

#: loggers that warn while diffusers imports, about things this project does not use: transformers' image
#: processors without torchvision (pipelines import them for IP-adapters) and diffusers' torchao checkpoint loader
_IMPORT_NOISE = ("transformers.utils.import_utils", "diffusers.quantizers.torchao.torchao_quantizer")
#: the pipeline class's module in diffusers, imported alone (diffusers' top level imports every pipeline lazily)
_PIPELINE_MODULE = {"sd3": "diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3",
                    "flux": "diffusers.pipelines.flux.pipeline_flux",
                    "sdxl": "diffusers.pipelines.stable_diffusion_xl.pipeline_stable_diffusion_xl"}
_ENCODER_CLASS = {"clip": ("CLIPTextConfig", "CLIPTextModel"),
                  "clip-projection": ("CLIPTextConfig", "CLIPTextModelWithProjection"),
                  "t5": ("T5Config", "T5EncoderModel")}
_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@contextlib.contextmanager
def _quiet_import() -> Iterator[None]:
    """Only errors from the import-time loggers in ``_IMPORT_NOISE`` while the block runs; their levels restored."""
    loggers = [logging.getLogger(name) for name in _IMPORT_NOISE]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def diffusers_attr(module: str, name: str) -> Any:
    """``diffusers.<module>.<name>`` (or a transformers one), imported quietly."""
    with _quiet_import():
        return getattr(importlib.import_module(module), name)


def pipeline_class(spec: DiffusionSpec) -> Any:
    return diffusers_attr(_PIPELINE_MODULE[spec.family], PIPELINE_CLASS[spec.family])


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return getattr(torch, _DTYPES[name])  # type: ignore[no-any-return]


def _kept_in_fp32(module: torch.nn.Module, dtype: str) -> tuple[str, ...]:
    """The name patterns of ``module``'s weights that transformers keeps in fp32 at ``dtype``: its
    ``_keep_in_fp32_modules`` in fp16 (T5's ``wo``, its guard against fp16 overflow), its ``…_strict`` ones in fp16
    and bf16. None of the diffusers models here has any."""
    keep = list(getattr(module, "_keep_in_fp32_modules_strict", None) or ()) if dtype in ("fp16", "bf16") else []
    if dtype == "fp16":
        keep += getattr(module, "_keep_in_fp32_modules", None) or ()
    return tuple(keep)


def cast(module: torch.nn.Module, dtype: str) -> torch.nn.Module:
    """``module``'s floating parameters and buffers in ``dtype`` (fp32, bf16, fp16) — ``Module.float/bfloat16/half``,
    which diffusers' ``ModelMixin.to`` would also do, without its warning about modules to keep in fp32 — but for
    the weights transformers keeps in fp32 as ``from_pretrained(torch_dtype=…)`` loads them (``_kept_in_fp32``:
    T5's ``wo`` had been cast to fp16; found in review). A weight's pattern anywhere in its name keeps it, as
    transformers matches them."""
    keep = _kept_in_fp32(module, dtype)
    if not keep:
        return {"fp32": module.float, "bf16": module.bfloat16, "fp16": module.half}[dtype]()
    import torch

    for name, tensor in (*module.named_parameters(), *module.named_buffers()):
        if tensor.is_floating_point():  # in place, as Module._apply does: no second copy of the weights
            tensor.data = tensor.data.to(torch.float32 if any(k in name for k in keep) else torch_dtype(dtype))
    return module


def build_text_encoder(encoder: TextEncoder) -> torch.nn.Module:
    import transformers

    config_cls, model_cls = _ENCODER_CLASS[encoder.kind]
    config = getattr(transformers, config_cls)(**encoder.config)
    return getattr(transformers, model_cls)(config).eval()  # type: ignore[no-any-return]


def build_denoiser(spec: DiffusionSpec) -> torch.nn.Module:
    return diffusers_attr("diffusers", DENOISER_CLASS[spec.family]).from_config(spec.denoiser).eval()  # type: ignore[no-any-return]


def build_vae(spec: DiffusionSpec) -> torch.nn.Module:
    return diffusers_attr("diffusers", "AutoencoderKL").from_config(spec.vae).eval()  # type: ignore[no-any-return]


#: the tokenizers' words: ids 0-3 are <unk> <s> </s> <pad> (CLIP's configs here name 2 as eos, T5's 0 as pad)
TOKENIZER_WORDS = 512


def build_tokenizer(encoder: TextEncoder) -> Any:
    """A word-level tokenizer (the ``tokenizers`` library's WordLevel model) whose ids fit ``encoder``: ``<unk> <s>
    </s> <pad> w4 w5 …``, split on whitespace, padded to the encoder's positions."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    size = min(int(encoder.config.get("vocab_size", TOKENIZER_WORDS)), TOKENIZER_WORDS)
    vocab = {tok: i for i, tok in enumerate(("<unk>", "<s>", "</s>", "<pad>"))}
    vocab.update({f"w{i}": i for i in range(len(vocab), size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers leaves __init__ untyped
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        model_max_length=encoder.max_length)


def prompt(index: int, words: int = 12) -> str:
    """The ``index``-th prompt of a batch: ``words`` words of the tokenizers' vocabulary, one prompt per image."""
    return " ".join(f"w{4 + (index * 7 + i) % (TOKENIZER_WORDS - 4)}" for i in range(words))


#: the text encoder slots of each family's pipeline
_PIPELINE_SLOTS = {"sd3": 3, "flux": 2, "sdxl": 2}


def empty_slots(spec: DiffusionSpec) -> dict[str, None]:
    """The pipeline's text encoder and tokenizer slots that ``spec`` leaves empty (SD3 without its T5), as None:
    diffusers' pipelines and their ``from_pretrained`` take an empty slot only when it is passed so, whatever
    model_index.json says (without it an SD3 directory saved without T5 failed to load; found in review)."""
    empty: dict[str, None] = {}
    for slot in ENCODER_SLOTS[len(spec.text_encoders):_PIPELINE_SLOTS[spec.family]]:
        empty[slot] = empty[slot.replace("text_encoder", "tokenizer")] = None
    return empty


def build_pipeline(spec: DiffusionSpec, *, device: str = "cpu", dtype: str = "fp32", seed: int = 0) -> Any:
    """The diffusers pipeline of ``spec`` on ``device`` with random weights from ``seed``, each component built in
    fp32 and then cast to ``dtype`` (fp32, bf16, fp16) — so every precision runs the fp32 reference's weights,
    rounded — one at a time, so the fp32 copy of one component is the most held at once."""
    import torch

    torch.manual_seed(seed)
    parts: dict[str, Any] = {}
    with torch.device(device):
        for slot, encoder in zip(ENCODER_SLOTS, spec.text_encoders, strict=False):
            parts[slot] = cast(build_text_encoder(encoder), dtype)
            parts[slot.replace("text_encoder", "tokenizer")] = build_tokenizer(encoder)
        parts["unet" if spec.family == "sdxl" else "transformer"] = cast(build_denoiser(spec), dtype)
        parts["vae"] = cast(build_vae(spec), dtype)
    parts.update(empty_slots(spec))
    scheduler_cls = diffusers_attr("diffusers", SCHEDULER_CLASS[spec.family])
    parts["scheduler"] = scheduler_cls.from_config(spec.scheduler)
    if spec.family == "sdxl":
        parts.update(force_zeros_for_empty_prompt=spec.force_zeros_for_empty_prompt, add_watermarker=False)
    pipe = pipeline_class(spec)(**parts)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    """diffusers' and transformers' loading progress bars off for the block (each library's own switch), then back
    as they were: a bench's stderr carries its own progress."""
    import diffusers.utils.logging as dlog
    import transformers.utils.logging as tlog

    before = [(lib, lib.is_progress_bar_enabled()) for lib in (dlog, tlog)]
    for lib, _ in before:
        lib.disable_progress_bar()
    try:
        yield
    finally:
        for lib, was_enabled in before:
            if was_enabled:
                lib.enable_progress_bar()


def load_pipeline(spec: DiffusionSpec, path: str, *, dtype: str = "fp32") -> Any:
    """A diffusers pipeline directory's weights (``save_pretrained`` / a hub snapshot on disk), loaded offline in
    the dtype they were saved in — the variant's files where the denoiser has only those (``*.fp16.safetensors``) —
    then every component cast to ``dtype`` (as ``build_pipeline`` does)."""
    import torch

    with _quiet_import(), _no_progress_bars():
        pipe = pipeline_class(spec).from_pretrained(path, local_files_only=True, variant=weights_variant(path),
                                                    **empty_slots(spec))
    for component in pipe.components.values():
        if isinstance(component, torch.nn.Module):
            cast(component, dtype)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def denoiser_of(pipe: Any) -> torch.nn.Module:
    """The pipeline's denoiser module (``transformer`` or ``unet``)."""
    return pipe.unet if getattr(pipe, "unet", None) is not None else pipe.transformer  # type: ignore[no-any-return]
