"""A bench workload's training step on many ranks: the model built as the workload builds it, the
variant applied, then data parallelism — DDP for ZeRO 0, FSDP2 ``fully_shard`` for ZeRO 2 and 3 — and
only then the optimizer (FSDP2 replaces the parameters with sharded DTensors, so an optimizer made
earlier would hold the old ones). Order, as torchtitan's: variant (recompute, numerics) → FSDP/DDP →
optimizer.

The workloads' own ``prepare`` builds its optimizer on the bare model, so the distributed step is
assembled here from the same parts (model preset, ``build_model``, ``apply``, ``train_step``, inputs
seeded per rank) for the training workloads that have a planner model: ``llm-train`` and ``resnet``.

Memory per rank is counted as the planner predicts it: bytes of the *local* tensors (``to_local()`` of
an FSDP2 DTensor) of parameters, gradients and optimizer states.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelkit.bench.variants import apply
from accelkit.bench.workloads.base import model_seed
from accelkit.bench.workloads.llm import matmul_params
from accelkit.core import UserError
from accelkit.distributed.grad_comm import count_fsdp, fsdp_policy, register_ddp_hook
from accelkit.distributed.quality import markov_tokens, template_images
from accelkit.models.build import build_model

if TYPE_CHECKING:
    import torch

    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads.base import BenchWorkload
    from accelkit.core import Recipe
    from accelkit.distributed.grad_comm import CommCounter

SUPPORTED = ("llm-train", "resnet")


@dataclass(slots=True)
class TrainParts:
    """What one rank needs to run the workload's training step."""

    model: torch.nn.Module
    loss_on: Callable[[torch.nn.Module, Any], torch.Tensor]  # forward + loss of a batch through the (wrapped) model
    batch: Any  # this rank's fixed batch of the timed steps
    quality_batch: Callable[[int], Any]  # the batch of step k of the quality check (quality.py)
    make_optimizer: Callable[[Iterable[Any]], torch.optim.Optimizer]
    items: int  # per rank and step
    unit: str
    analytic_flops_per_item: float | None = None
    analytic_formula: str | None = None
    recipe_notes: list[str] = field(default_factory=list)  # what the recipe did to the model (recipes.apply)

    def loss(self, model: torch.nn.Module) -> torch.Tensor:
        """Forward + loss of the fixed batch."""
        return self.loss_on(model, self.batch)


def refusal(workload: BenchWorkload, variant: Variant) -> str | None:
    """Why this workload/variant cannot run distributed here (None if it can)."""
    if workload.name not in SUPPORTED:
        return (f"a distributed bench runs the training workloads {', '.join(SUPPORTED)}; "
                f"{workload.name} is not one (drop --nproc-per-node)")
    if variant.compile:
        return ("--compile with --nproc-per-node is not supported: accelkit compiles the whole model, and "
                "FSDP2 needs each block compiled before fully_shard (torchtitan's order)")
    return None


def train_parts(workload: BenchWorkload, variant: Variant, device: str, *, seed: int, rank: int) -> TrainParts:
    """The model (same weights on every rank: the same seed) and this rank's own batch (seed + rank)."""
    import torch

    spec, c = workload.model_spec, workload.config  # type: ignore[attr-defined]
    gen = model_seed(seed + rank)
    notes: list[str] = []
    model = build_model(spec, device=device, seed=seed).train()
    if workload.name == "llm-train":
        ids = torch.randint(0, spec.vocab_size, (c.batch_size, c.seq_len), generator=gen).to(device)
        model = apply(model, variant, example_inputs=(ids,), device=device, train=True, notes=notes)
        palm = 6 * matmul_params(spec) + 12 * spec.num_layers * spec.num_heads * spec.head_size * c.seq_len
        return TrainParts(
            model=model, loss_on=lambda m, b: m(input_ids=b, labels=b).loss, batch=ids,
            quality_batch=lambda k: markov_tokens(spec.vocab_size, c.batch_size, c.seq_len, seed=seed, step=k,
                                                  rank=rank).to(device),
            make_optimizer=lambda params: torch.optim.AdamW(params, lr=c.lr),
            items=c.batch_size * c.seq_len, unit="tokens", analytic_flops_per_item=palm,
            analytic_formula="6N + 12·L·H·Q·T per token (PaLM, Appendix B; N without embeddings)", recipe_notes=notes,
        )
    side = workload.image_size  # type: ignore[attr-defined]
    images = torch.randn(c.batch_size, spec.num_channels, side, side, generator=gen).to(device)
    labels = torch.randint(0, spec.num_labels or 1000, (c.batch_size,), generator=gen).to(device)
    fmt = torch.channels_last if variant.channels_last else torch.contiguous_format
    model = apply(model, variant, example_inputs=(images,), device=device, train=True, notes=notes)

    def quality_batch(k: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = template_images(spec.num_labels or 1000, c.batch_size, spec.num_channels, side, seed=seed, step=k,
                               rank=rank)
        return x.to(device).contiguous(memory_format=fmt), y.to(device)

    return TrainParts(
        model=model,
        loss_on=lambda m, b: torch.nn.functional.cross_entropy(m(pixel_values=b[0]).logits.float(), b[1]),
        batch=(images.contiguous(memory_format=fmt), labels), quality_batch=quality_batch,
        make_optimizer=lambda params: torch.optim.SGD(params, lr=c.lr, momentum=0.9),
        items=c.batch_size, unit="images", recipe_notes=notes,
    )


def shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks FSDP2 shards one by one: the members of the outermost ModuleLists (decoder layers,
    ResNet stages). The root takes what is left (embeddings, head, norms)."""
    import torch

    units: list[torch.nn.Module] = []
    taken: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and not any(name.startswith(t + ".") for t in taken):
            taken.append(name)
            units.extend(module)
    return units


def parallelize(model: torch.nn.Module, *, zero: int, device: str, recipe: Recipe | None = None,
                counter: CommCounter | None = None) -> torch.nn.Module:
    """ZeRO 0 → DDP (replicated states, gradients all-reduced in buckets); ZeRO 2 → FSDP2 with
    ``reshard_after_forward=False`` (parameters stay gathered from forward to backward: no second
    all-gather); ZeRO 3 → ``reshard_after_forward=True`` (gathered per block, freed after use).

    ``recipe.grad_compression`` is applied here (grad_comm.py): a DDP communication hook, or FSDP2's reduce
    dtype. With a ``counter`` the gradient collectives' bytes are counted (DDP then runs torch's
    ``allreduce_hook`` for plain communication, so that its bytes are counted like a compressed variant's)."""
    import torch

    compression = recipe.grad_compression if recipe is not None else "none"
    if zero == 0:
        from torch.nn.parallel import DistributedDataParallel

        ids = [torch.device(device).index] if device.startswith("cuda") else None
        ddp = DistributedDataParallel(model, device_ids=ids)
        if recipe is not None and (compression != "none" or counter is not None):
            ddp.powersgd_state = register_ddp_hook(ddp, recipe, counter)
        return ddp
    if zero not in (2, 3):
        raise UserError(f"--zero {zero} is not supported; use 0 (DDP), 2 or 3 (FSDP2)")
    if compression == "powersgd":
        raise UserError("PowerSGD is a DDP communication hook (--zero 0); FSDP2 can only change its reduce dtype")
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    reshard = zero == 3
    policy = fsdp_policy(recipe) if recipe is not None else MixedPrecisionPolicy()
    for block in shard_units(model):
        fully_shard(block, reshard_after_forward=reshard, mp_policy=policy)
    fully_shard(model, reshard_after_forward=reshard, mp_policy=policy)
    if counter is not None:
        why = count_fsdp(model, counter)
        if why:
            counter.note = why
    return model


def _local_bytes(t: Any) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t  # an FSDP2 DTensor: this rank's shard only
    return int(local.numel() * local.element_size())


def model_state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of this rank's parameters, gradients and optimizer states (local shards; shared tensors once).
    DDP's gradient buckets and FSDP2's gathered (unsharded) parameters are not model states: not counted."""
    import torch

    params = list(model.parameters())
    states = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return {
        "parameters": sum(_local_bytes(p) for p in params),
        "gradients": sum(_local_bytes(p.grad) for p in params if p.grad is not None),
        "optimizer": sum(_local_bytes(v) for v in states),
    }
