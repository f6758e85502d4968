"""The heaviest pipeline stage of a layout: its transformer blocks and the parameters one of its devices holds —
what the time, memory and gradient-reduction models all plan for."""

from __future__ import annotations

from accelkit.plan.context import PlanContext
from accelkit.plan.layout import Layout, recompute_share


def stage_layers(ctx: PlanContext, layout: Layout) -> int:
    """Transformer blocks on the most loaded pipeline stage: ceil(L/pp), or with the embedding and the head each
    counted as one block in the partition (``options.pp_embedding_as_layer``) ceil((L+2)/pp) on a middle stage and
    one fewer beside the embedding or the head."""
    pp = layout.pp
    if pp > 1 and ctx.options.pp_embedding_as_layer:
        return -(-(ctx.model.num_layers + 2) // pp)
    return -(-ctx.model.num_layers // pp)


def stage_recompute_share(ctx: PlanContext, layout: Layout) -> float:
    """The share of the heaviest stage's blocks that full recompute checkpoints (``layout.recompute_share``): 1 for
    ``--recompute full``, ⌊B/n⌋/B of its B blocks with ``recompute_every`` n, 0 otherwise. The memory and time models
    apply it to every block of the stage as an average."""
    if ctx.cnn is not None:
        return 1.0 if layout.recompute == "full" else 0.0
    return recompute_share(layout, stage_layers(ctx, layout))


def stage_blocks(ctx: PlanContext, layout: Layout) -> tuple[int, int, int]:
    """Transformer blocks on the first, the fullest middle and the last pipeline stage. Even stages, or layers that do
    not divide: ceil(L/pp) everywhere (the heaviest stage, wherever it is). With the embedding and the head counted
    as one block each (``options.pp_embedding_as_layer``, Megatron-Core's account_for_embedding/loss_in_pipeline_split,
    Llama 3's 126 layers over 16 stages as 7 + 14 × 8 + 7) the first and last stages hold one block fewer."""
    layers = stage_layers(ctx, layout)
    if layout.pp > 1 and ctx.options.pp_embedding_as_layer:
        return layers - 1, layers, layers - 1
    return layers, layers, layers


def _stage_blocks_and_ends(ctx: PlanContext, layout: Layout) -> tuple[int, float]:
    """(transformer blocks, embedding and head parameters) on the heaviest pipeline stage, before tensor parallelism."""
    layers = stage_layers(ctx, layout)  # uneven stages: the heaviest
    ends = ctx.embedding_params + ctx.head_params if layout.pp == 1 else max(ctx.embedding_params, ctx.head_params)
    if layout.pp > 1 and ctx.options.pp_embedding_as_layer:
        if ends > ctx.layer_params + ctx.layer_expert_params / layout.ep:  # beside the embedding or head: one block fewer
            layers -= 1
        else:  # a middle stage, all blocks
            ends = 0.0
    return layers, ends


def stage_param_split(ctx: PlanContext, layout: Layout) -> tuple[float, float]:
    """(dense, expert) parameters on one device of the heaviest pipeline stage; the experts already ÷ ep. The two
    parts are data-parallel over different groups (``time.expert_dp``), so ZeRO shards and reduces them apart."""
    if ctx.cnn is not None:
        return float(ctx.model.num_params()), 0.0
    layers, ends = _stage_blocks_and_ends(ctx, layout)
    experts = ctx.layer_expert_params / layout.ep
    return (layers * ctx.layer_params + ends) / layout.tp, layers * experts / layout.tp


def stage_weight_bytes(ctx: PlanContext, layout: Layout) -> float:
    """The bytes of the weights one device of the heaviest stage holds: the embedding and head (among
    :func:`stage_param_split`'s dense parameters) at ``end_weight_bytes`` (16-bit when inference quantizes the rest),
    everything else at ``weight_bytes``."""
    ends = 0.0 if ctx.cnn is not None else _stage_blocks_and_ends(ctx, layout)[1] / layout.tp
    return (stage_params(ctx, layout) - ends) * ctx.weight_bytes + ends * ctx.end_weight_bytes


def stage_params(ctx: PlanContext, layout: Layout) -> float:
    """Parameters on one device of the heaviest pipeline stage."""
    dense, expert = stage_param_split(ctx, layout)
    return dense + expert
