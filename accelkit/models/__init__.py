"""Model catalog: presets, Hugging Face config import, and builders (torch imported only by builders)."""

from __future__ import annotations

import re
from pathlib import Path

from accelkit.core import ModelSpec, UnknownNameError, UserError
from accelkit.models.hf import from_hf_config, load_config, to_hf_config
from accelkit.models.presets import PRESETS, get_preset

#: a Hugging Face Hub repo id (``meta-llama/Llama-3.1-8B``): one slash between two names, no path punctuation
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def resolve_model(name_or_path: str) -> ModelSpec:
    """A preset name, a ``config.json`` path, or a directory holding one → ModelSpec.

    A Hub id that is no path here (nothing is downloaded) is refused with the closest presets (it read "no
    config.json at Qwen/Qwen3-8B", found in review). A blank name is refused: ``Path("")`` is the current directory,
    and an unset ``--model "$MODEL"`` planned whatever ./config.json holds."""
    if not name_or_path.strip():
        raise UserError("the model is empty; give a preset name (`accelkit models list`), a config.json, or a "
                        "directory holding one")
    if _HUB_ID.fullmatch(name_or_path) and not name_or_path.endswith(".json") and not Path(name_or_path).exists():
        raise UnknownNameError("model", name_or_path, PRESETS, listing=list(PRESETS),
                               more="a Hub id is not downloaded: give a preset, or the path of the model's "
                                    "config.json (or of a directory holding one)")
    if name_or_path.endswith(".json") or Path(name_or_path).is_dir() or "/" in name_or_path:
        return load_config(name_or_path)
    return get_preset(name_or_path)


__all__ = ["PRESETS", "from_hf_config", "get_preset", "load_config", "resolve_model", "to_hf_config"]
