"""`bert`: encoder inference (MLPerf's BERT, default sequence 384), random weights, synthetic tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from accelkit.bench.variants import Variant, apply
from accelkit.bench.workloads.base import (
    ACT_BYTES,
    EVAL_ROWS,
    MAX_SIZE,
    BenchWorkload,
    Prepared,
    Step,
    check_fits,
    model_seed,
    run_in,
)
from accelkit.core import ModelSpec, UserError
from accelkit.core import Workload as WorkloadSpec
from accelkit.core.spec import Spec, spec_field
from accelkit.models import resolve_model
from accelkit.models.build import build_model

SIZES = {"tiny": "tiny-bert", "base": "bert-base", "large": "bert-large"}


@dataclass(frozen=True, slots=True, kw_only=True)
class BertConfig(Spec):
    """BERT encoder inference."""

    size: Literal["tiny", "base", "large"] = spec_field("base", doc="tiny (2 layers, h 64), base or large.")
    model: str | None = spec_field(None, doc="Any encoder preset or config.json instead of --size.")
    batch_size: int = spec_field(8, min=1, max=MAX_SIZE, doc="Sequences per forward.")
    seq_len: int = spec_field(384, min=1, max=MAX_SIZE, doc="Tokens per sequence (MLPerf BERT uses 384).")


class Bert(BenchWorkload):
    name = "bert"
    config_cls = BertConfig
    task = "infer"
    summary = "encoder inference (BERT tiny/base/large), samples/s"
    output_is_logits = False  # last_hidden_state: no class axis, so accuracy gates use cosine, never top-1

    @property
    def model_spec(self) -> ModelSpec:
        spec = resolve_model(self.config.model or SIZES[self.config.size])
        if spec.family != "bert":
            raise UserError(f"--model {self.config.model} is a {spec.family} model; bert needs a BERT-family encoder: give "
                            f"--size {'|'.join(SIZES)} or --model {', '.join(SIZES.values())} (or a BERT config.json)")
        if self.config.seq_len > spec.max_seq_len:
            raise UserError(f"--seq-len {self.config.seq_len} exceeds {spec.name}'s {spec.max_seq_len} positions")
        return spec

    @property
    def label(self) -> str:
        c = self.config
        return f"bert {self.model_spec.name} b{c.batch_size} s{c.seq_len}"

    def spec(self) -> WorkloadSpec:
        c = self.config
        # an encoder's input length is the planner's seq_len (prompt_len is a decoder's; set alike for clarity)
        return WorkloadSpec(model=self.model_spec, task="infer", batch_size=c.batch_size, seq_len=c.seq_len,
                            prompt_len=c.seq_len, output_len=0)

    def check(self, device: str) -> None:
        spec, c = self.model_spec, self.config
        tokens = c.batch_size * c.seq_len  # int64 ids, and a block's input beside its MLP's inner activation
        check_fits(spec.num_params(), device, spec.name,
                   data_bytes=tokens * 8 + tokens * (spec.hidden_size + spec.ffn_hidden_size) * ACT_BYTES,
                   shape={"--batch-size": c.batch_size, "--seq-len": c.seq_len})

    def prepare(self, variant: Variant, device: str, *, seed: int) -> Prepared:
        import torch

        spec, c = self.model_spec, self.config
        ids = torch.randint(0, spec.vocab_size, (c.batch_size, c.seq_len), generator=model_seed(seed)).to(device)
        notes: list[str] = []  # what the recipe did, for the run's notes
        model = apply(build_model(spec, device=device, seed=seed), variant, example_inputs=(ids,), device=device,
                      notes=notes)

        # no attention mask: every token is real, so the mask would be all ones, which transformers drops anyway
        # (checking that needs .item(), which the FLOP count on the meta device cannot run)
        def forward() -> Any:
            return model(input_ids=ids).last_hidden_state

        def evaluate() -> Any:
            return model(input_ids=ids[:EVAL_ROWS]).last_hidden_state

        return Prepared(
            steps=[Step("forward", run_in(variant, device, forward, inference=True), c.batch_size, "samples")],
            evaluate=run_in(variant, device, evaluate, inference=True),  # type: ignore[arg-type]
            notes=notes,
        )
