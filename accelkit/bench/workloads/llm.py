"""`llm`: decoder inference with separate prefill (TTFT) and decode (per-token latency, tokens/s).

Prefill: one forward over the prompts that returns the first token (time to first token). Decode: one
step per call on a KV cache that grows from ``prompt_len`` to ``prompt_len + output_len − 1`` tokens and
is then cropped back, so every measured call is a real decode step at a context the user asked for.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from accelkit.bench.variants import Variant, apply
from accelkit.bench.workloads.base import EVAL_ROWS, BenchWorkload, Prepared, Step, check_fits, model_seed, run_in
from accelkit.core import ModelSpec, UserError
from accelkit.core import Workload as WorkloadSpec
from accelkit.core.spec import Spec, spec_field


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMConfig(Spec):
    """Decoder inference: prefill and decode measured separately."""

    model: str = spec_field("llama-3.1-8b", doc="Decoder preset or config.json (random weights).")
    batch_size: int = spec_field(1, min=1, doc="Sequences decoded together.")
    prompt_len: int = spec_field(128, min=1, doc="Prompt tokens per sequence (prefill).")
    output_len: int = spec_field(64, min=1, doc="Generated tokens per sequence (decode steps per cycle).")


def matmul_params(spec: ModelSpec) -> int:
    """N of the FLOPs formulas: parameters less the embedding lookups, plus the LM head when it is tied."""
    n = spec.num_params() - spec.num_embedding_params()
    return n + spec.vocab_size * spec.hidden_size if spec.tied_embeddings else n


def forward_flops_per_token(spec: ModelSpec, context: float) -> float:
    """2N + 4·L·H·Q·T: weights once, and QKᵀ plus PV over ``context`` keys (no causal halving, as counted)."""
    return 2 * matmul_params(spec) + 4 * spec.num_layers * spec.num_heads * spec.head_size * context


def resolve_decoder(name: str) -> ModelSpec:
    from accelkit.models import resolve_model

    spec = resolve_model(name)
    if spec.kind not in ("decoder", "moe"):
        raise UserError(f"{name!r} is a {spec.kind} model; llm needs a decoder (e.g. tiny-llama, llama-3.1-8b)")
    return spec


def cache_kwarg(model: Any) -> str:
    """transformers 5 calls the KV cache argument ``cache``; 4.x calls it ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class LLM(BenchWorkload):
    name = "llm"
    config_cls = LLMConfig
    task = "infer"
    summary = "decoder inference: prefill (TTFT) and decode (per-token latency, tokens/s)"

    @property
    def model_spec(self) -> ModelSpec:
        spec = resolve_decoder(self.config.model)
        c = self.config
        if spec.max_seq_len and c.prompt_len + c.output_len > spec.max_seq_len:
            raise UserError(f"--prompt-len + --output-len = {c.prompt_len + c.output_len} exceeds "
                            f"{spec.name}'s {spec.max_seq_len} positions")
        return spec

    @property
    def label(self) -> str:
        c = self.config
        return f"llm {self.model_spec.name} b{c.batch_size} p{c.prompt_len} o{c.output_len}"

    def spec(self) -> WorkloadSpec:
        c = self.config
        return WorkloadSpec(model=self.model_spec, task="infer", batch_size=c.batch_size, prompt_len=c.prompt_len,
                            output_len=c.output_len)

    def check(self, device: str) -> None:
        check_fits(self.model_spec.num_params(), device, self.model_spec.name)

    def prepare(self, variant: Variant, device: str, *, seed: int) -> Prepared:
        import torch

        from accelkit.models.build import build_model

        spec, c = self.model_spec, self.config
        prompt = torch.randint(0, spec.vocab_size, (c.batch_size, c.prompt_len), generator=model_seed(seed)).to(device)
        model = build_model(spec, device=device, seed=seed)
        kw = cache_kwarg(model)  # before apply: wrappers hide the signature
        model = apply(model, variant, example_inputs=(prompt,), device=device)

        def prefill() -> Any:
            out = model(input_ids=prompt, use_cache=True)
            return out, out.logits[:, -1:].argmax(-1)  # (B, 1): the first generated token

        run_prefill = run_in(variant, device, prefill, inference=True)
        state: dict[str, Any] = {"cache": None, "token": None, "pos": 0}

        def decode() -> Any:
            if state["cache"] is None:  # the first call seeds the cache with a prefill (first-call phase)
                out, state["token"] = prefill()
                cache = out.get(kw)  # ModelOutput is a dict
                state["cache"] = cache if cache is not None else out.get("past_key_values")
            cache = state["cache"]
            if state["pos"] == c.output_len:  # back to the prompt: the next cycle runs the same contexts
                cache.crop(-(cache.get_seq_length() - c.prompt_len))
                state["pos"] = 0
            logits = model(input_ids=state["token"], use_cache=True, **{kw: cache}).logits
            state["token"] = logits[:, -1:].argmax(-1)  # greedy; (B, 1)
            state["pos"] += 1
            return state["token"]

        mean_decode_context = c.prompt_len + (c.output_len + 1) / 2
        formula = "2N + 4·L·H·Q·T (N without embeddings, T = keys attended)"
        steps = [
            Step("prefill", run_prefill, c.batch_size * c.prompt_len, "tokens", latency_name="TTFT",
                 analytic_flops_per_item=forward_flops_per_token(spec, c.prompt_len), analytic_formula=formula),
            Step("decode", run_in(variant, device, decode, inference=True), c.batch_size, "tokens",
                 latency_name="per-token latency", cycle=c.output_len,
                 analytic_flops_per_item=forward_flops_per_token(spec, mean_decode_context), analytic_formula=formula),
        ]
        evaluate = run_in(variant, device, lambda: model(input_ids=prompt[:EVAL_ROWS]).logits, inference=True)
        return Prepared(steps=steps, evaluate=evaluate, close=state.clear)  # type: ignore[arg-type]
