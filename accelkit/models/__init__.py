"""Model catalog: presets, Hugging Face config import, and builders (torch imported only by builders)."""

from __future__ import annotations

from pathlib import Path

from accelkit.core import ModelSpec
from accelkit.models.hf import from_hf_config, load_config, to_hf_config
from accelkit.models.presets import PRESETS, get_preset


def resolve_model(name_or_path: str) -> ModelSpec:
    """A preset name, a ``config.json`` path, or a directory holding one → ModelSpec."""
    if name_or_path.endswith(".json") or Path(name_or_path).is_dir() or "/" in name_or_path:
        return load_config(name_or_path)
    return get_preset(name_or_path)


__all__ = ["PRESETS", "from_hf_config", "get_preset", "load_config", "resolve_model", "to_hf_config"]
