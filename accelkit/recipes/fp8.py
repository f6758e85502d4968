"""FP8 training through ``torchao.float8`` (tensorwise or rowwise scaling).

It pays off only on FP8 tensor cores: SM89+ for tensorwise, SM90+ for rowwise, or MI300-class GPUs.
Anywhere else it is refused, unless ``emulate=True`` (tests): torchao then runs the same casts and
scales in emulation — numerically FP8, no speed-up.
"""

from __future__ import annotations

import torch

from accelkit.core import Recipe
from accelkit.recipes.base import ApplyContext, Technique


def _fp8_linear_filter(module: torch.nn.Module, fqn: str) -> bool:
    # FP8 GEMMs need both dims divisible by 16; tiny heads (e.g. a 2-class classifier) stay in high precision
    return isinstance(module, torch.nn.Linear) and module.in_features % 16 == 0 and module.out_features % 16 == 0


class Float8Training(Technique):
    """precision = fp8 in training: swap nn.Linear for torchao's Float8Linear."""

    name = "fp8-training"

    def __init__(self, scaling: str = "tensorwise"):
        if scaling not in ("tensorwise", "rowwise"):
            raise ValueError(f"scaling={scaling!r} is not valid; expected 'tensorwise' or 'rowwise'")
        self.scaling = scaling

    def wanted(self, recipe: Recipe) -> bool:
        return recipe.precision == "fp8"

    def refusal(self, recipe: Recipe, ctx: ApplyContext) -> str | None:
        if ctx.emulate_fp8:
            return None
        dev = ctx.device
        need = (9, 0) if self.scaling == "rowwise" else (8, 9)
        if dev.sm_at_least(*need) or dev.is_mi300_class:
            return None
        where = "this CPU" if not dev.is_cuda else f"{dev.name}"
        return (f"precision='fp8' ({self.scaling} scaling) needs FP8 tensor cores — NVIDIA SM"
                f"{need[0]}{need[1]}+ (Ada/Hopper/Blackwell) or an MI300-class GPU — and {where} has none; "
                "use precision='bf16', or pass emulate=True to test the numerics without a speed-up")

    def apply(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        config = Float8LinearConfig.from_recipe_name(self.scaling) if self.scaling == "rowwise" else Float8LinearConfig()
        if ctx.emulate_fp8:
            config = Float8LinearConfig(emulate=True) if self.scaling == "tensorwise" else config
        convert_to_float8_training(model, config=config, module_filter_fn=_fp8_linear_filter)
        ctx.notes.append(f"fp8 training ({self.scaling}{', emulated' if ctx.emulate_fp8 else ''})")
        return model
