"""Activation checkpointing per block: ``full`` (keep only each block's input, recompute the rest),
``selective`` (keep matmul/attention outputs, recompute the cheap element-wise ops), and ``budget``
(compiled models: let the partitioner keep what fits a memory budget). Always ``use_reentrant=False``.

Blocks are found structurally: the outermost ``nn.ModuleList`` s of same-type modules that hold a real share of
the parameters (transformer layers, an encoder's and a decoder's layers, ResNet stages …) — no per-architecture
code.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.nn.utils import parametrize
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from accelkit.core import Recipe
from accelkit.models.build import count_parameters
from accelkit.recipes.base import ApplyContext, RecipeRefused, Technique, keep_state_dict_keys

#: ops whose outputs selective recompute keeps (the expensive ones to redo)
_SAVE_OPS = {
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten.bmm.default,
    torch.ops.aten.baddbmm.default,
    torch.ops.aten.convolution.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
}
#: fraction of activation memory the min-cut partitioner may keep under recompute='budget'
DEFAULT_BUDGET = 0.5


def _selective_policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in _SAVE_OPS else CheckpointPolicy.PREFER_RECOMPUTE


class CheckpointedBlock(torch.nn.Module):
    """Runs ``block`` under non-reentrant checkpointing (full or selective). Its state_dict keys are the block's own
    (no ``block.``), so a checkpoint saved after training loads into the model as built."""

    def __init__(self, block: torch.nn.Module, *, selective: bool):
        super().__init__()
        self.block = block
        self.selective = selective
        self.training = block.training
        keep_state_dict_keys(self, "block.")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.block(*args, **kwargs)  # inference: nothing to save, nothing to recompute
        if self.selective:
            context_fn = functools.partial(create_selective_checkpoint_contexts, _selective_policy)
            return checkpoint(self.block, *args, use_reentrant=False, context_fn=context_fn, **kwargs)
        return checkpoint(self.block, *args, use_reentrant=False, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:  # transformers reads attributes such as attention_type off its layers
            return getattr(super().__getattr__("block"), name)


#: a list of repeated blocks is checkpointed when it holds at least this share of the model's parameters
MIN_BLOCKS_PARAM_SHARE = 0.1


def find_blocks(model: torch.nn.Module) -> list[tuple[str, torch.nn.ModuleList]]:
    """The lists of repeated blocks, with their names: the outermost ``nn.ModuleList`` s whose children share one
    type and that hold at least ``MIN_BLOCKS_PARAM_SHARE`` of the model's parameters (all of them when the model
    has none). Empty when there are none.

    Outermost: a mixture-of-experts layer keeps its experts in a ModuleList too, often longer than the list of
    layers — taking the longest list checkpointed one layer's experts instead of every layer. Every qualifying
    list: an encoder-decoder model (T5, BART, Whisper) has two, and taking one left the decoder uncheckpointed.
    The parameter share leaves out a short list of small heads. torch's parametrizations are ModuleLists too
    (``layer.parametrizations.weight``, e.g. the bf16 weight cast of fp8 training): they are not blocks."""
    candidates: list[tuple[str, torch.nn.ModuleList]] = []
    for name, module in model.named_modules():
        if isinstance(module, parametrize.ParametrizationList) or "parametrizations" in name.split("."):
            continue
        if not (isinstance(module, torch.nn.ModuleList) and len(module) and len({type(m) for m in module}) == 1):
            continue
        if any(name.startswith(f"{outer}.") or not outer for outer, _ in candidates):
            continue  # inside a list already found (named_modules walks parents before their children)
        candidates.append((name, module))
    total = count_parameters(model)
    if total == 0:
        return candidates
    return [(name, blocks) for name, blocks in candidates if count_parameters(blocks) >= MIN_BLOCKS_PARAM_SHARE * total]


class ActivationCheckpointing(Technique):
    """recompute = full | selective | budget."""

    name = "activation-checkpointing"

    def wanted(self, recipe: Recipe) -> bool:
        return recipe.recompute != "none"

    def refusal(self, recipe: Recipe, ctx: ApplyContext) -> str | None:
        if recipe.recompute == "budget" and recipe.compile is False:
            return ("recompute='budget' works through torch.compile's partitioner; set compile='default' "
                    "or choose recompute='selective' or 'full'")
        return None

    def model_refusal(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> str | None:
        done = sum(isinstance(m, CheckpointedBlock) for m in model.modules())
        if done:  # a second apply wrapped each wrapper in another: checkpoints nested, two policies mixed
            return (f"recompute={recipe.recompute!r}: {type(model).__name__} already has {done} checkpointed blocks "
                    "(an earlier apply); apply one Recipe, with all its fields, to the model as built")
        if any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules()):
            return (f"recompute={recipe.recompute!r}: {type(model).__name__} already checkpoints its layers itself "
                    "(transformers' gradient_checkpointing_enable), and would nest the two checkpoints; call "
                    "model.gradient_checkpointing_disable() first, or keep it and use recompute='none'")
        if recipe.recompute != "budget" and not find_blocks(model):
            return (f"recompute={recipe.recompute!r} found no repeated blocks (an nn.ModuleList of one module type "
                    f"holding ≥ {MIN_BLOCKS_PARAM_SHARE:.0%} of the parameters) in {type(model).__name__}; checkpoint "
                    f"inside your model or use recompute='none'")
        return None

    def apply(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
        if recipe.recompute == "budget":
            ctx.notes.append(f"activation memory budget {DEFAULT_BUDGET} (compile partitioner)")
            return model  # applied by the compile technique, which patches the functorch config
        found = find_blocks(model)
        if not found:  # model_refusal found blocks in the model as given; an earlier step would have to lose them
            raise RecipeRefused(self.model_refusal(model, recipe, ctx) or "found no repeated blocks to checkpoint")
        # a KV cache filled during forward would be filled again during recompute, so the recomputed region would
        # differ from the original; training never needs the cache. Every config in the model: an encoder-decoder
        # model's decoder has its own copy (T5's decoder.config), which the model's config does not reach.
        configs: dict[int, Any] = {}
        for module in model.modules():
            config = getattr(module, "config", None)
            if getattr(config, "use_cache", False):
                configs[id(config)] = config
        for config in configs.values():
            config.use_cache = False
        if configs:
            ctx.notes.append("config.use_cache set to False on the model itself, and left so (a cache is state that "
                             "recompute would change); set it back to True before generating with this model")
        for _, blocks in found:
            for i, block in enumerate(blocks):
                blocks[i] = CheckpointedBlock(block, selective=recipe.recompute == "selective")
        where = ", ".join(f"{len(blocks)} in {name or 'model'}" for name, blocks in found)
        ctx.notes.append(f"{recipe.recompute} checkpointing of {sum(len(b) for _, b in found)} blocks ({where})")
        return model
