"""`llm-train`: a decoder training step (AdamW, next-token loss on random tokens): tokens/s and MFU."""

from __future__ import annotations

from dataclasses import dataclass

from accelkit.bench.variants import Variant, apply
from accelkit.bench.workloads.base import (
    ACT_BYTES,
    EVAL_ROWS,
    MAX_SIZE,
    BenchWorkload,
    Prepared,
    Step,
    check_fits,
    evaluate_fn,
    model_seed,
    train_step,
)
from accelkit.bench.workloads.llm import matmul_params, resolve_decoder
from accelkit.core import ModelSpec, UserError
from accelkit.core import Workload as WorkloadSpec
from accelkit.core.spec import Spec, spec_field
from accelkit.models.build import build_model


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMTrainConfig(Spec):
    """Decoder training step."""

    model: str = spec_field("llama-3.1-8b", doc="Decoder preset or config.json (random weights).")
    batch_size: int = spec_field(1, min=1, max=MAX_SIZE, doc="Sequences per step.")
    seq_len: int = spec_field(512, min=2, max=MAX_SIZE, doc="Tokens per sequence.")
    lr: float = spec_field(1e-4, min=0.0, finite=True, doc="AdamW learning rate.")


class LLMTrain(BenchWorkload):
    name = "llm-train"
    config_cls = LLMTrainConfig
    task = "train"
    summary = "decoder training step (AdamW): tokens/s and MFU"

    @property
    def model_spec(self) -> ModelSpec:
        spec = resolve_decoder(self.config.model, self.name)
        if spec.max_seq_len and self.config.seq_len > spec.max_seq_len:
            raise UserError(f"--seq-len {self.config.seq_len} exceeds {spec.name}'s {spec.max_seq_len} positions")
        return spec

    @property
    def label(self) -> str:
        return f"llm-train {self.model_spec.name} b{self.config.batch_size} s{self.config.seq_len}"

    def spec(self) -> WorkloadSpec:
        return WorkloadSpec(model=self.model_spec, task="train", batch_size=self.config.batch_size,
                            seq_len=self.config.seq_len, optimizer="adam")

    def check(self, device: str) -> None:
        spec, c = self.model_spec, self.config
        tokens = c.batch_size * c.seq_len  # int64 ids, the logits, each block's input kept for the backward
        data = tokens * 8 + tokens * (spec.vocab_size + spec.num_layers * spec.hidden_size) * ACT_BYTES
        check_fits(spec.num_params() * 4, device, spec.name, data_bytes=data,  # weights, grads, 2 Adam moments
                   shape={"--batch-size": c.batch_size, "--seq-len": c.seq_len})

    def prepare(self, variant: Variant, device: str, *, seed: int) -> Prepared:
        import torch

        spec, c = self.model_spec, self.config
        ids = torch.randint(0, spec.vocab_size, (c.batch_size, c.seq_len), generator=model_seed(seed)).to(device)
        model = build_model(spec, device=device, seed=seed).train()
        notes: list[str] = []  # what the recipe did, for the run's notes
        model = apply(model, variant, example_inputs=(ids,), device=device, train=True, notes=notes)
        optimizer = torch.optim.AdamW(model.parameters(), lr=c.lr)

        def loss() -> torch.Tensor:
            return model(input_ids=ids, labels=ids).loss  # type: ignore[no-any-return]

        palm = 6 * matmul_params(spec) + 12 * spec.num_layers * spec.num_heads * spec.head_size * c.seq_len
        step = Step("train step", train_step(model, optimizer, loss, variant, device), c.batch_size * c.seq_len,
                    "tokens", analytic_flops_per_item=palm, returns_loss=True,
                    analytic_formula="6N + 12·L·H·Q·T per token (PaLM, Appendix B; N active, without embeddings)")
        return Prepared(steps=[step], notes=notes,
                        evaluate=evaluate_fn(model, variant, device, lambda: model(input_ids=ids[:EVAL_ROWS]).logits))
