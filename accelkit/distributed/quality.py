"""The quality check of gradient compression: the same K training steps, on the same data, from the same initial
weights, with and without compression — then ``accelkit.recipes.grad_compression.loss_gate`` compares the final
losses.

The data must be learnable, or every variant ends at the same loss and the gate cannot tell them apart (random
tokens only teach the unigram distribution). So each step draws a fresh batch from a fixed synthetic task:

* ``llm-train``: a first-order Markov chain over the vocabulary in which every token has 4 possible successors
  (one table, drawn from the seed): the loss can fall from ln(V) to ln(4);
* ``resnet``: one random image template per class; an image is its class's template plus Gaussian noise (σ 0.5),
  and 30% of the labels are drawn at random — a loss floor well above zero (about 1.2 nats with 10 classes), so
  that a ratio of final losses means something.

Step k on rank r draws from a generator seeded by (seed, k, r): every variant sees exactly the same batches, and
the ranks see different ones (as data parallelism does). The reported loss of a step is the mean over the ranks.
After the K steps every variant is evaluated (no gradients) on ``EVAL_BATCHES`` batches per rank that no training
step drew, the same for every variant: that evaluation loss (mean over the ranks) is what the gate compares — a
training step's loss moves with its batch, the evaluation loss only with the weights.
This module imports torch only inside its functions (the CLI reads :class:`QualityConfig` without it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelkit.core import UserError
from accelkit.core.spec import Spec, spec_field

if TYPE_CHECKING:
    import torch

#: successors per token of the Markov task
SUCCESSORS = 4
#: noise σ of the image task, and the share of its labels drawn at random
IMAGE_NOISE = 0.5
LABEL_NOISE = 0.3
#: the evaluation set: this many batches, drawn from steps EVAL_STEP, EVAL_STEP − 1, … (no training step draws them)
EVAL_BATCHES = 4
EVAL_STEP = -1000


@dataclass(frozen=True, slots=True, kw_only=True)
class QualityConfig(Spec):
    """The quality check of compressed variants (distributed training benches with --grad-compression)."""

    quality_steps: int = spec_field(
        50, min=0, max=100_000, doc="Training steps of the quality check: each compressed variant and none train this "
                                    "many steps on the same data from the same weights; 0 turns it off.")
    max_loss_increase: float = spec_field(
        0.02, min=0.0, max=10.0, doc="Quality gate: a compressed variant's final loss may exceed none's by this "
                                     "fraction (0.02 = within 2%).")


def check_quality_flags(quality: QualityConfig, *, compressed: bool) -> None:
    """The quality check runs only for compressed variants (and their twins), and the loss allowance only when it runs:
    ``--quality-steps`` / ``--max-loss-increase`` given without ``--grad-compression`` (or the allowance with
    ``--quality-steps 0``) were dropped without a word (found in a hunt) — a UserError naming the flag instead."""
    default = QualityConfig()
    if not compressed:
        given = [f"--{f.replace('_', '-')} {getattr(quality, f):g}" for f in ("quality_steps", "max_loss_increase")
                 if getattr(quality, f) != getattr(default, f)]
        if given:
            raise UserError(f"{' and '.join(given)} {'applies' if len(given) == 1 else 'apply'} to the quality check of "
                            "gradient compression, and no variant here compresses its gradients: add "
                            "--grad-compression none,bf16 (or fp16, powersgd), or drop "
                            f"{'it' if len(given) == 1 else 'them'}")
    elif quality.quality_steps == 0 and quality.max_loss_increase != default.max_loss_increase:
        raise UserError(f"--max-loss-increase {quality.max_loss_increase:g} is the quality check's allowance, and "
                        "--quality-steps 0 turns the check off: give --quality-steps N, or drop --max-loss-increase")


def _generator(seed: int, step: int, rank: int) -> torch.Generator:
    import torch

    return torch.Generator().manual_seed(((seed + 1) * 1_000_003 + step) * 1009 + rank)


def markov_tokens(vocab_size: int, batch: int, seq_len: int, *, seed: int, step: int, rank: int) -> torch.Tensor:
    """[batch, seq_len] token ids of the Markov task (int64, on the CPU)."""
    import torch

    table = torch.randint(0, vocab_size, (vocab_size, SUCCESSORS), generator=_generator(seed, -1, -1))
    gen = _generator(seed, step, rank)
    ids = torch.empty(batch, seq_len, dtype=torch.long)
    ids[:, 0] = torch.randint(0, vocab_size, (batch,), generator=gen)
    picks = torch.randint(0, SUCCESSORS, (batch, seq_len), generator=gen)
    for t in range(1, seq_len):
        ids[:, t] = table[ids[:, t - 1], picks[:, t]]
    return ids


def template_images(num_labels: int, batch: int, channels: int, side: int, *, seed: int, step: int,
                    rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(images [batch, channels, side, side], labels [batch]) of the template task, on the CPU."""
    import torch

    templates = torch.randn(num_labels, channels, side, side, generator=_generator(seed, -1, -1))
    gen = _generator(seed, step, rank)
    classes = torch.randint(0, num_labels, (batch,), generator=gen)
    images = templates[classes] + IMAGE_NOISE * torch.randn(batch, channels, side, side, generator=gen)
    noisy = torch.rand(batch, generator=gen) < LABEL_NOISE
    labels = torch.where(noisy, torch.randint(0, num_labels, (batch,), generator=gen), classes)
    return images, labels


def lead_in_steps(variants: list[Any]) -> int:
    """Steps every variant of a quality check trains before the ``quality_steps`` compared ones: the largest
    ``start_powerSGD_iter`` among the PowerSGD variants (torch's hook runs a plain all-reduce while its
    ``state.iter`` < that), so that a PowerSGD variant is compared over ``quality_steps`` compressed steps — not
    over plain all-reduce steps, which would compare none with itself and always pass; 0 without PowerSGD."""
    return max((v.powersgd_start_iter for v in variants if v.compression == "powersgd"), default=0)


def mean_over_ranks(per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    """The ranks' training losses averaged step by step, and the mean of their evaluation losses."""
    losses = [sum(xs) / len(xs) for xs in zip(*(r["losses"] for r in per_rank), strict=True)]
    return {"losses": losses, "eval_loss": sum(r["eval_loss"] for r in per_rank) / len(per_rank),
            "lead_in_steps": per_rank[0].get("lead_in_steps", 0)}
