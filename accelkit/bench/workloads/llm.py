"""`llm`: decoder inference with separate prefill (TTFT) and decode (per-token latency, tokens/s).

Prefill: one forward over the prompts that returns the first token (time to first token), with logits at the last
position only (``logits_to_keep=1``, as HF generate and vLLM compute them), so its TTFT is comparable. Decode: one
step per call on a KV cache that grows from ``prompt_len`` to ``prompt_len + output_len − 1`` tokens and
is then rewound to the prompt (:func:`rewinder`), so every measured call is a real decode step at a context
the user asked for.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accelkit.bench.metrics import count_flops, meta_grouped_mm
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


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMConfig(Spec):
    """Decoder inference: prefill and decode measured separately."""

    model: str = spec_field("llama-3.1-8b", doc="Decoder preset or config.json (random weights).")
    batch_size: int = spec_field(1, min=1, max=MAX_SIZE, doc="Sequences decoded together.")
    prompt_len: int = spec_field(128, min=1, max=MAX_SIZE, doc="Prompt tokens per sequence (prefill).")
    output_len: int = spec_field(64, min=1, max=MAX_SIZE, doc="Generated tokens per sequence (decode steps per cycle).")


def matmul_params(spec: ModelSpec) -> int:
    """N of the FLOPs formulas: the parameters a token goes through (a mixture of experts: its top-k experts, not all
    of them, as the planner counts) less the embedding lookups, plus the LM head when it is tied."""
    n = spec.num_active_params() - spec.num_embedding_params()
    return n + spec.vocab_size * spec.hidden_size if spec.tied_embeddings else n


def forward_flops_per_token(spec: ModelSpec, context: float) -> float:
    """2N + 4·L·H·Q·T: weights once, and QKᵀ plus PV over ``context`` keys (no causal halving, as counted)."""
    return 2 * matmul_params(spec) + 4 * spec.num_layers * spec.num_heads * spec.head_size * context


def prefill_flops_per_token(spec: ModelSpec, prompt_len: int, *, all_logits: bool = False) -> float:
    """:func:`forward_flops_per_token` over the prompt with the LM head (2·V·H) at its last position only, as the
    prefill runs it: 2·V·H·(P − 1)/P less per token. ``all_logits``: at every position (a model whose forward takes
    no logits_to_keep)."""
    per_token = forward_flops_per_token(spec, prompt_len)
    if all_logits:
        return per_token
    return per_token - 2 * spec.vocab_size * spec.hidden_size * (prompt_len - 1) / prompt_len


def last_logits_kwargs(model: Any) -> dict[str, int]:
    """What makes ``model``'s forward compute the logits of the last position only: ``logits_to_keep=1``
    (transformers ≥ 4.50), ``num_logits_to_keep=1`` (4.45–4.49); {} when it takes neither."""
    params = inspect.signature(model.forward).parameters
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            return {name: 1}
    return {}


def decode_keys_attended(spec: ModelSpec, prompt_len: int, output_len: int) -> float:
    """T of a decode step averaged over a cycle: the keys each layer attends at each context (a sliding-window layer
    at most its window: transformers keeps window − 1 past tokens beside the new one), per layer and step."""
    contexts = range(prompt_len + 1, prompt_len + output_len + 1)  # the cache plus the new token, step by step
    return sum(spec.kv_cache_tokens(t) for t in contexts) / len(contexts)


def rewinder(cache: Any, prompt_len: int) -> Callable[[], None]:
    """What takes ``cache``, as a prefill of ``prompt_len`` tokens left it, back to that state at the end of a decode
    cycle, for about the cost of a crop (it runs inside the cycle's first timed call, as the crop did). A layer that
    keeps every past token is cropped (a view, no copy). A sliding-window layer past its window cannot be cropped
    back (transformers keeps only the last window − 1 tokens), so it, and any other layer kind, gets its prefilled
    state back by reference: decode replaces a layer's tensors (torch.cat) rather than writing into them, so the
    kept ones are still the prefill's. A layer that does write in place (a linear-attention state) gets back tensors
    of the same shapes, whose values decode has changed: the same work, which is what is timed."""
    layers = getattr(cache, "layers", None)
    if layers is None:  # a cache without per-layer objects (transformers < 4.56 or a model's own): crop it whole
        return lambda: cache.crop(-(cache.get_seq_length() - prompt_len))
    croppable = [layer for layer in layers if _keeps_every_token(layer)]
    kept = [(layer, _snapshot(layer)) for layer in layers if not _keeps_every_token(layer)]

    def rewind() -> None:
        for layer in croppable:
            layer.crop(-(layer.get_seq_length() - prompt_len))
        for layer, saved in kept:
            vars(layer).update({k: dict(v) if isinstance(v, dict) else v for k, v in saved.items()})

    return rewind


def _keeps_every_token(layer: Any) -> bool:
    """A plain full-attention layer: its keys and values are every token so far, and crop takes them back."""
    from transformers.cache_utils import DynamicLayer

    return type(layer) is DynamicLayer


def _snapshot(layer: Any) -> dict[str, Any]:
    """``layer``'s attributes (dicts copied: decode assigns into them), with each tensor that views a larger storage
    (a sliding window cut from a longer prompt) compacted first, in the layer too: the kept state then holds no more
    memory than the layer itself does."""
    import torch

    for name, value in vars(layer).items():
        if isinstance(value, torch.Tensor) and value.untyped_storage().nbytes() > value.numel() * value.element_size():
            setattr(layer, name, value.clone(memory_format=torch.contiguous_format))
    return {k: dict(v) if isinstance(v, dict) else v for k, v in vars(layer).items()}


def resolve_decoder(name: str, workload: str) -> ModelSpec:
    """The model ``workload`` (llm or llm-train) is asked to run, refused unless it is a decoder."""
    spec = resolve_model(name)
    if spec.kind not in ("decoder", "moe"):
        article = "an" if spec.kind[0] in "aeiou" else "a"
        raise UserError(f"{name!r} is {article} {spec.kind} model; {workload} needs a decoder "
                        "(e.g. tiny-llama, llama-3.1-8b)")
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
        spec = resolve_decoder(self.config.model, self.name)
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
        spec, c = self.model_spec, self.config
        # int64 ids, the prefill's logits at the last position (logits_to_keep=1), the KV cache
        data = c.batch_size * c.prompt_len * 8 + c.batch_size * spec.vocab_size * ACT_BYTES
        data += int(spec.kv_bytes_per_token(ACT_BYTES) * c.batch_size * (c.prompt_len + c.output_len - 1))
        check_fits(spec.num_params(), device, spec.name, data_bytes=data,
                   shape={"--batch-size": c.batch_size, "--prompt-len": c.prompt_len, "--output-len": c.output_len})

    def prepare(self, variant: Variant, device: str, *, seed: int) -> Prepared:
        import torch

        spec, c = self.model_spec, self.config
        prompt = torch.randint(0, spec.vocab_size, (c.batch_size, c.prompt_len), generator=model_seed(seed)).to(device)
        model = build_model(spec, device=device, seed=seed)
        kw = cache_kwarg(model)  # before apply: wrappers hide the signature
        last_logits = last_logits_kwargs(model)
        notes: list[str] = []  # what the recipe did, for the run's notes
        if not last_logits:
            notes.append(f"prefill computes logits at every prompt position: {type(model).__name__}.forward takes no "
                         "logits_to_keep (TTFT is not comparable with HF generate or vLLM)")
        model = apply(model, variant, example_inputs=(prompt,), device=device, notes=notes)

        def prefill() -> Any:
            out = model(input_ids=prompt, use_cache=True, **last_logits)  # logits (B, 1, V)
            return out, out.logits[:, -1:].argmax(-1)  # (B, 1): the first generated token

        run_prefill = run_in(variant, device, prefill, inference=True)
        state: dict[str, Any] = {"cache": None, "rewind": None, "token": None, "pos": 0}

        def step() -> None:
            cache = state["cache"]
            if state["pos"] == c.output_len:  # back to the prompt: the next cycle runs the same contexts
                state["rewind"]()
                state["pos"] = 0
            logits = model(input_ids=state["token"], use_cache=True, **{kw: cache}).logits
            state["token"] = logits[:, -1:].argmax(-1)  # greedy; (B, 1)
            state["pos"] += 1

        def decode() -> Any:
            if state["cache"] is None:
                # the first call seeds the cache with a prefill, then runs a whole cycle, its rewind and the step
                # after it (first-call phase): every shape a measured call sees — each context, the rewound cache —
                # has run once, so a compiled model does not recompile inside a measured block (a warm-up can be
                # shorter than one cycle: 3 steps with --quick)
                out, state["token"] = prefill()
                cache = out.get(kw)  # ModelOutput is a dict
                state["cache"] = cache if cache is not None else out.get("past_key_values")
                state["rewind"] = rewinder(state["cache"], c.prompt_len)
                for _ in range(c.output_len):
                    step()
            step()
            return state["token"]

        def decode_flops_at(cached: int) -> float:
            """FLOPs of one decode call while the cache holds ``cached`` tokens (the cache filled by an uncounted
            prefill; token values do not change a dense model's FLOPs)."""
            with torch.inference_mode(), meta_grouped_mm():  # the prefill too: an MoE's grouped GEMMs on meta fp32
                ids = torch.zeros((c.batch_size, cached + 1), dtype=torch.long, device=device)
                out = model(input_ids=ids[:, :cached], use_cache=True, **last_logits)
                cache = out.get(kw)
                cache = cache if cache is not None else out.get("past_key_values")
                return count_flops(lambda: model(input_ids=ids[:, cached:], use_cache=True, **{kw: cache}))

        def decode_flops_per_call() -> float | None:
            """The mean over the cycle (caches of prompt_len … prompt_len + output_len − 1 tokens) from three counted
            calls, not output_len: a dense decoder's FLOPs are affine in the keys attended (2N + 4·L·H·Q·T), so the
            mean is that of the first and last, checked on the middle one. Not affine (sliding-window attention) →
            None: every call is counted. Only on the meta device, where a call costs the same at any length."""
            first, last = c.prompt_len, c.prompt_len + c.output_len - 1
            if device != "meta" or c.output_len < 4:
                return None
            lo, mid, hi = decode_flops_at(first), decode_flops_at((first + last) // 2), decode_flops_at(last)
            line = lo + (hi - lo) * ((first + last) // 2 - first) / (last - first)
            return (lo + hi) / 2 if abs(mid - line) <= 1e-9 * max(hi, 1.0) else None

        formula = "2N + 4·L·H·Q·T (N active, without embeddings; T = keys attended)"
        prefill_formula = formula if not last_logits else (
            "2N + 4·L·H·Q·T − 2·V·H·(P − 1)/P (N active, without embeddings; T = keys attended; the LM head at the "
            "last of the P prompt positions only)")
        steps = [
            Step("prefill", run_prefill, c.batch_size * c.prompt_len, "tokens", latency_name="TTFT",
                 analytic_flops_per_item=prefill_flops_per_token(spec, c.prompt_len, all_logits=not last_logits),
                 analytic_formula=prefill_formula),
            Step("decode", run_in(variant, device, decode, inference=True), c.batch_size, "tokens",
                 latency_name="per-token latency", cycle=c.output_len, flops_per_call=decode_flops_per_call,
                 first_call_calls=c.output_len + 1,
                 analytic_flops_per_item=forward_flops_per_token(
                     spec, decode_keys_attended(spec, c.prompt_len, c.output_len)), analytic_formula=formula),
        ]
        # the accuracy drift compares logits at every position of the evaluation rows: full logits here
        evaluate = run_in(variant, device, lambda: model(input_ids=prompt[:EVAL_ROWS]).logits, inference=True)
        return Prepared(steps=steps, evaluate=evaluate, close=state.clear, notes=notes)  # type: ignore[arg-type]
