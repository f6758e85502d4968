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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelkit.core import UserError

if TYPE_CHECKING:
    import torch

    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads.base import BenchWorkload

SUPPORTED = ("llm-train", "resnet")


@dataclass(slots=True)
class TrainParts:
    """What one rank needs to run the workload's training step."""

    model: torch.nn.Module
    loss: Callable[[torch.nn.Module], torch.Tensor]  # forward + loss through the (wrapped) model
    make_optimizer: Callable[[Iterable[Any]], torch.optim.Optimizer]
    items: int  # per rank and step
    unit: str
    analytic_flops_per_item: float | None = None
    analytic_formula: str | None = None


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

    from accelkit.bench.variants import apply
    from accelkit.bench.workloads.base import model_seed
    from accelkit.models.build import build_model

    spec, c = workload.model_spec, workload.config  # type: ignore[attr-defined]
    gen = model_seed(seed + rank)
    model = build_model(spec, device=device, seed=seed).train()
    if workload.name == "llm-train":
        from accelkit.bench.workloads.llm import matmul_params

        ids = torch.randint(0, spec.vocab_size, (c.batch_size, c.seq_len), generator=gen).to(device)
        model = apply(model, variant, example_inputs=(ids,), device=device, train=True)
        palm = 6 * matmul_params(spec) + 12 * spec.num_layers * spec.num_heads * spec.head_size * c.seq_len
        return TrainParts(
            model=model, loss=lambda m: m(input_ids=ids, labels=ids).loss,
            make_optimizer=lambda params: torch.optim.AdamW(params, lr=c.lr),
            items=c.batch_size * c.seq_len, unit="tokens", analytic_flops_per_item=palm,
            analytic_formula="6N + 12·L·H·Q·T per token (PaLM, Appendix B; N without embeddings)",
        )
    side = workload.image_size  # type: ignore[attr-defined]
    images = torch.randn(c.batch_size, spec.num_channels, side, side, generator=gen).to(device)
    labels = torch.randint(0, spec.num_labels or 1000, (c.batch_size,), generator=gen).to(device)
    if variant.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    model = apply(model, variant, example_inputs=(images,), device=device, train=True)
    return TrainParts(
        model=model,
        loss=lambda m: torch.nn.functional.cross_entropy(m(pixel_values=images).logits.float(), labels),
        make_optimizer=lambda params: torch.optim.SGD(params, lr=c.lr, momentum=0.9),
        items=c.batch_size, unit="images",
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


def parallelize(model: torch.nn.Module, *, zero: int, device: str) -> torch.nn.Module:
    """ZeRO 0 → DDP (replicated states, gradients all-reduced in buckets); ZeRO 2 → FSDP2 with
    ``reshard_after_forward=False`` (parameters stay gathered from forward to backward: no second
    all-gather); ZeRO 3 → ``reshard_after_forward=True`` (gathered per block, freed after use)."""
    import torch

    if zero == 0:
        from torch.nn.parallel import DistributedDataParallel

        ids = [torch.device(device).index] if device.startswith("cuda") else None
        return DistributedDataParallel(model, device_ids=ids)
    if zero not in (2, 3):
        raise UserError(f"--zero {zero} is not supported; use 0 (DDP), 2 or 3 (FSDP2)")
    from torch.distributed.fsdp import fully_shard

    reshard = zero == 3
    for block in shard_units(model):
        fully_shard(block, reshard_after_forward=reshard)
    fully_shard(model, reshard_after_forward=reshard)
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
