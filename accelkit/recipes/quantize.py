"""Post-training quantization of nn.Linear weights (and activations, for the dynamic schemes).

Backends, chosen per device because the fastest path differs (measured in benchmarks/recipes_cpu.py):
- ``int8-dynamic``: on a CPU, eager → ``torch.ao.quantization.quantize_dynamic`` (fbgemm/oneDNN int8
  GEMMs); on GPUs or compiled models → torchao ``Int8DynamicActivationInt8WeightConfig``.
- ``int8-weight``: torchao ``Int8WeightOnlyConfig``.
- ``int4-weight``: CPU → torchao ``IntxWeightOnlyConfig(int4, PerGroup(32))``; CUDA SM80+ →
  ``Int4WeightOnlyConfig(group_size=128)`` (bf16 models).
- ``fp8-weight`` / ``fp8-dynamic``: torchao ``Float8WeightOnlyConfig`` /
  ``Float8DynamicActivationFloat8WeightConfig`` on SM89+ or MI300-class GPUs.
torchao configs are built with ``set_inductor_config=False`` wherever they accept it, so quantizing
never flips global Inductor flags.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Literal

import torch

from accelkit.core import Recipe
from accelkit.recipes.base import ApplyContext, RecipeRefused, Technique

Backend = Literal["auto", "torchao", "torch.ao"]
INT4_GROUP_CPU, INT4_GROUP_GPU = 32, 128


def _config(cls: Any, **kwargs: Any) -> Any:
    if "set_inductor_config" in inspect.signature(cls).parameters:
        kwargs["set_inductor_config"] = False
    return cls(**kwargs)


def _linear_filter(multiple: int):
    def keep(module: torch.nn.Module, fqn: str) -> bool:
        return isinstance(module, torch.nn.Linear) and module.in_features % multiple == 0
    return keep


class Quantization(Technique):
    """quantization = int8-dynamic | int8-weight | int4-weight | fp8-weight | fp8-dynamic."""

    name = "quantization"

    def __init__(self, backend: Backend = "auto"):
        if backend not in ("auto", "torchao", "torch.ao"):
            raise ValueError(f"backend={backend!r} is not valid; expected 'auto', 'torchao' or 'torch.ao'")
        self.backend = backend

    def wanted(self, recipe: Recipe) -> bool:
        return recipe.quantization is not None

    def refusal(self, recipe: Recipe, ctx: ApplyContext) -> str | None:
        q, dev = recipe.quantization, ctx.device
        if ctx.training:
            return (f"quantization={q!r} is post-training (inference) quantization; for low-precision training "
                    "use precision='fp8' or 'bf16'")
        if q in ("fp8-weight", "fp8-dynamic") and not (dev.sm_at_least(8, 9) or dev.is_mi300_class):
            return (f"quantization={q!r} needs FP8 tensor cores (NVIDIA SM89+ or MI300-class); {dev.name} has none "
                    "— use quantization='int8-dynamic' or 'int8-weight'")
        if q == "int4-weight" and dev.is_cuda and not dev.sm_at_least(8, 0):
            return f"quantization='int4-weight' on CUDA needs SM80+ (tinygemm kernels); {dev.name} is older"
        if q == "int8-dynamic" and self._backend(recipe, ctx) == "torch.ao" and recipe.precision in ("bf16", "fp16"):
            return ("quantization='int8-dynamic' on a CPU runs torch.ao's fp32-activation int8 kernels; combine it with "
                    "precision='fp32', or use precision='bf16' without quantization")
        if recipe.sparsity is not None:
            return "quantization and sparsity='2:4' are separate weight formats; choose one of them"
        return None

    def _backend(self, recipe: Recipe, ctx: ApplyContext) -> str:
        if self.backend != "auto":
            return self.backend
        return "torch.ao" if recipe.quantization == "int8-dynamic" and not ctx.device.is_cuda and recipe.compile is False else "torchao"

    def apply(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
        q = recipe.quantization
        backend = self._backend(recipe, ctx)
        if backend == "torch.ao":
            if q != "int8-dynamic":
                raise RecipeRefused(f"backend 'torch.ao' only does int8-dynamic, not {q!r}; use backend='torchao'")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # its deprecation notice; the kernels are what we measured
                model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
            ctx.notes.append("int8 dynamic quantization (torch.ao quantize_dynamic)")
            return model

        from torchao import quantization as tq

        filter_fn = _linear_filter(1)
        if q == "int8-dynamic":
            config = _config(tq.Int8DynamicActivationInt8WeightConfig)
        elif q == "int8-weight":
            config = _config(tq.Int8WeightOnlyConfig)
        elif q == "int4-weight":
            if ctx.device.is_cuda:
                config, filter_fn = _config(tq.Int4WeightOnlyConfig, group_size=INT4_GROUP_GPU), _linear_filter(INT4_GROUP_GPU)
            else:
                from torchao.quantization.granularity import PerGroup

                config = _config(tq.IntxWeightOnlyConfig, weight_dtype=torch.int4, granularity=PerGroup(INT4_GROUP_CPU))
                filter_fn = _linear_filter(INT4_GROUP_CPU)
        elif q == "fp8-weight":
            config = _config(tq.Float8WeightOnlyConfig)
        else:
            config = _config(tq.Float8DynamicActivationFloat8WeightConfig)
        tq.quantize_(model, config, filter_fn=filter_fn)
        ctx.notes.append(f"{q} quantization (torchao {type(config).__name__})")
        return model
