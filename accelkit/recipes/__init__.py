"""Optimization recipes: ``apply(model, recipe)`` in one documented order (see ``apply.py``), accuracy
gates (``gates.py``) and the search over recipes (``tune.py``)."""

from accelkit.recipes.apply import apply, refusal, techniques
from accelkit.recipes.base import RecipeRefused, device_info

__all__ = ["RecipeRefused", "apply", "device_info", "refusal", "techniques"]
