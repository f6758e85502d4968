"""FP8 training through ``torchao.float8`` (tensorwise or rowwise scaling).

What runs: every ``nn.Linear`` whose dims are multiples of 16 (output heads excepted: ``HEADS``) becomes a
``Float8Linear`` whose GEMM operands are bf16 copies — the fp32 master weight stays the parameter the optimizer
updates, and forward casts it (and the input) to bf16 with autocast off — while everything else runs under bf16
autocast (``MixedPrecision`` wraps the model for ``precision='fp8'``). That is what torchtitan's FSDP2 ``param_dtype=bfloat16`` feeds torchao on one
device, and it keeps autocast's own casts away from float8 tensors: torchao's ``Float8TrainingTensor`` supports
no ``aten.to`` (the first H200 run died there with fp32 weights under CUDA autocast), and rowwise scaling takes
bf16 operands only. Matmul weights that are no ``nn.Linear`` — transformers 5's 3-D MoE experts and routers, GPT-2's
``Conv1D`` — stay in high precision too: the note gives the share converted (:mod:`accelkit.recipes.coverage`).

It pays off only on FP8 tensor cores: SM89+ for tensorwise, SM90+ for rowwise, or MI300-class GPUs.
Anywhere else it is refused, unless ``emulate=True`` (tests): torchao then runs the same casts and
scales in emulation — numerically FP8, no speed-up.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.utils import parametrize

from accelkit.core import Recipe
from accelkit.recipes.base import ApplyContext, Technique, keep_state_dict_keys
from accelkit.recipes.coverage import READ_BY_PARENT, coverage, matmul_weights, weight_read_by_parent

SCALINGS = ("tensorwise", "rowwise")
#: the dtype of the GEMM operands fed to the fp8 casts (torchao's rowwise recipe accepts only this one)
OPERAND_DTYPE = torch.bfloat16


#: output layers stay in high precision, as torchtitan's float8 filter keeps its "output": the logits feed the loss
#: directly, and an LM head is often tied to the (high-precision) embedding
HEADS = ("lm_head", "output", "classifier", "fc")


def _is_head(fqn: str) -> bool:
    return fqn.rsplit(".", 1)[-1] in HEADS


def _fp8_shape(linear: torch.nn.Linear) -> bool:
    # FP8 GEMMs need both dims divisible by 16; tiny heads (e.g. a 2-class classifier) stay in high precision
    return linear.in_features % 16 == 0 and linear.out_features % 16 == 0


def _fp8_linear_filter(model: torch.nn.Module) -> Callable[[torch.nn.Module, str], bool]:
    """The Linears of ``model`` to convert: dims multiples of 16, no output head, and called as a module — not
    nn.MultiheadAttention's out_proj, whose weight the attention reads itself: converted, it was counted as fp8 while
    its GEMM ran on the bf16 weight cast, the Float8Linear never called."""
    skip = weight_read_by_parent(model)

    def keep(module: torch.nn.Module, fqn: str) -> bool:
        return isinstance(module, torch.nn.Linear) and _fp8_shape(module) and not _is_head(fqn) and fqn not in skip

    return keep


def _kept(model: torch.nn.Module) -> tuple[int, str]:
    """(number of Linears, why those the filter keeps in high precision are kept: 'N output heads, M with dims not
    multiples of 16'; empty when none is)."""
    linears = [(fqn, m) for fqn, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    skip = weight_read_by_parent(model)
    heads = sum(_is_head(fqn) for fqn, _ in linears)
    narrow = sum(not _is_head(fqn) and not _fp8_shape(m) for fqn, m in linears)
    read = sum(not _is_head(fqn) and _fp8_shape(m) and fqn in skip for fqn, m in linears)
    why = [f"{heads} output head{'s' * (heads != 1)} ({'/'.join(HEADS)})"] if heads else []
    why += [f"{narrow} with dims not multiples of 16"] if narrow else []
    why += [f"{read} {READ_BY_PARENT}"] if read else []
    return len(linears), ", ".join(why)


class _CastTo(torch.nn.Module):
    """A parametrization: the parameter as seen by forward is a ``dtype`` copy of the stored (master) one."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, master: torch.Tensor) -> torch.Tensor:
        return master.to(self.dtype)


@functools.cache
def bf16_operand_linear() -> type[torch.nn.Module]:
    """``Float8Linear`` with bf16 operands (built on first use: importing torchao is slow)."""
    from torchao.float8.float8_linear import Float8Linear

    class Float8LinearBf16Operands(Float8Linear):  # type: ignore[misc]
        """Float8Linear fed bf16: the input is cast here and the weight by a parametrization, with autocast off,
        so torchao casts bf16 → fp8 and no autocast cast reaches a float8 tensor. Output: bf16."""

        def forward(self, input: torch.Tensor) -> torch.Tensor:
            with torch.autocast(input.device.type, enabled=False):
                return super().forward(input.to(OPERAND_DTYPE))  # type: ignore[no-any-return]

    return Float8LinearBf16Operands


def float8_config(scaling: str, *, emulate: bool) -> Any:
    """torchao's ``Float8LinearConfig`` for ``scaling`` (its named recipes), emulated when asked."""
    from torchao.float8 import Float8LinearConfig

    config = Float8LinearConfig.from_recipe_name(scaling)
    return dataclasses.replace(config, emulate=True) if emulate else config


class Float8Training(Technique):
    """precision = fp8 in training: nn.Linear → Float8Linear with bf16 operands over fp32 master weights."""

    name = "fp8-training"

    def __init__(self, scaling: str = "tensorwise"):
        if scaling not in SCALINGS:
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

    def model_refusal(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> str | None:
        done = [fqn for fqn, m in model.named_modules() if any(c.__name__ == "Float8Linear" for c in type(m).__mro__)]
        if done:  # torchao cannot convert a Float8Linear again (a TypeError deep in the swap)
            return (f"precision='fp8': {type(model).__name__} already has {len(done)} Float8Linear layers (e.g. "
                    f"{done[0]}: an earlier apply or convert_to_float8_training); apply it once, to the model as built")
        # a recipe that converts nothing would be measured as fp8 while running bf16 autocast only
        keep = _fp8_linear_filter(model)
        if any(keep(m, fqn) for fqn, m in model.named_modules()):
            return None
        num_linears, why = _kept(model)
        if not num_linears:
            return f"precision='fp8' trains nn.Linear layers in fp8 and {type(model).__name__} has none; use precision='bf16'"
        return (f"precision='fp8' would convert none of the {num_linears} Linear layers of {type(model).__name__} ({why}"
                "; FP8 GEMMs need both dims multiples of 16, output heads stay in high precision, and a Linear whose "
                "parent reads its weight is never called); "
                "use precision='bf16'")

    def apply(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
        from torchao.float8 import convert_to_float8_training
        from torchao.float8.float8_linear import Float8Linear

        config = float8_config(self.scaling, emulate=ctx.emulate_fp8)
        num_linears, kept = _kept(model)
        weights = matmul_weights(model)  # before the swap: what the note's share is of
        convert_to_float8_training(model, config=config, module_filter_fn=_fp8_linear_filter(model))
        operand_cls = bf16_operand_linear()
        converted: set[str] = set()
        for fqn, module in model.named_modules():
            if type(module) is Float8Linear:
                module.__class__ = operand_cls
                # unsafe: the whole point is a dtype change (fp32 master → bf16 operand); shapes are unchanged
                parametrize.register_parametrization(module, "weight", _CastTo(OPERAND_DTYPE), unsafe=True)
                # the fp32 master is saved and loaded as ``weight``, the key of the model as built
                keep_state_dict_keys(module, "parametrizations.weight.original", "weight")
                converted.add(fqn)
        ctx.notes.append(f"fp8 training ({self.scaling}{', emulated' if ctx.emulate_fp8 else ''}): {len(converted)} of "
                         f"{num_linears} linear layers as Float8Linear on bf16 copies of fp32 master weights"
                         + (f"; kept in high precision: {kept}" if kept else "")
                         + f"; {coverage(weights, converted, what='fp8', rest='in high precision')}")
        return model
