"""The llm prefill computes logits at the last prompt position only (logits_to_keep=1, as HF generate and vLLM do):
its TTFT, counted FLOPs, analytic FLOPs and memory bound are those of that prefill, not of logits at every position."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from accelkit.bench.workloads.base import BenchWorkload

pytest.importorskip("transformers")

B, P = 2, 16
# tiny-llama: 2 layers, hidden 64, 4 query heads and 2 KV heads of 16, gated MLP 128, vocab 512 (untied)
L, H, Q, KV, F, V = 2, 64, 4 * 16, 2 * 16, 128, 512


def _llm(**config: object) -> BenchWorkload:
    from accelkit.bench.workloads import make_workload

    return make_workload("llm", {"model": "tiny-llama", "batch_size": B, "prompt_len": P, "output_len": 4, **config})


def test_counted_prefill_flops_have_the_lm_head_at_one_position_per_sequence() -> None:
    """The prefill ran the LM head over all B·P positions: its counted FLOPs were 2·V·H·B·(P − 1) above what HF
    generate and vLLM compute (~7% of Llama-3.1-8B's prefill). Counted on the meta device, they are now the blocks'
    matmuls and attention over every token plus the LM head once per sequence, and the analytic figure follows."""
    from accelkit.bench.reference import count_on_meta
    from accelkit.bench.variants import Variant

    blocks = L * (H * Q + 2 * H * KV + Q * H + 3 * H * F)  # q, k, v, o; gate, up, down
    attention = 4 * B * P * P * L * Q  # QKᵀ and PV over the full P × P rectangle, as counted
    expected = 2 * B * P * blocks + attention + 2 * B * V * H  # logits: (B, 1, V)

    workload = _llm()
    counted, why = count_on_meta(workload, seed=0)
    assert why is None
    # transformers 5.17 counts its rotary frequencies' matmul too (2·B·P·8 = 256 FLOPs): hence 1e-4
    assert counted["prefill"] * B * P == pytest.approx(expected, rel=1e-4)

    prepared = workload.prepare(Variant(), "meta", seed=0)
    try:
        prefill = next(s for s in prepared.steps if s.name == "prefill")
    finally:
        prepared.close()
    # the analytic N counts the norms too (hence 1%); the LM head at every position would be 38% more
    assert prefill.analytic_flops_per_item == pytest.approx(expected / (B * P), rel=0.01)
    assert "last of the P prompt positions" in (prefill.analytic_formula or "")


def test_prefill_returns_the_logits_of_the_last_position_only() -> None:
    from accelkit.bench.variants import Variant

    prepared = _llm().prepare(Variant(), "cpu", seed=0)
    try:
        prefill = next(s for s in prepared.steps if s.name == "prefill")
        out, token = prefill.fn()  # type: ignore[misc]
        assert tuple(out.logits.shape) == (B, 1, V) and tuple(token.shape) == (B, 1)
        assert not prepared.notes  # transformers takes logits_to_keep: nothing to warn about
        evaluated = prepared.evaluate()  # type: ignore[misc]
        assert tuple(evaluated.shape) == (2, P, V)  # the accuracy drift still compares every position
    finally:
        prepared.close()


def test_memory_check_does_not_count_logits_at_every_prompt_position(tmp_path: Path) -> None:
    """check() added B·P·V logits to what the prefill must hold: a large-vocabulary model was refused at a size whose
    ids, last-position logits and KV cache fit with room to spare. Sized from the RAM available now: the old bound
    is ~30× it, the new one ~1/20 of it."""
    from accelkit.bench.workloads import make_workload
    from accelkit.hardware.device import free_memory_bytes

    vocab, prompt_len = 32000, 1000
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
           "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": vocab,
           "max_position_embeddings": 4096}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    # per prompt token: 8 bytes of id, 32 of K and V (1 layer × 1 head × 8 × 2 × 2 bytes), 64 of last logits ÷ P;
    # the logits at every position were 64,000
    free = free_memory_bytes("cpu")
    batch = max(1, free // 20 // (prompt_len * 104))
    workload = make_workload("llm", {"model": str(path), "batch_size": batch, "prompt_len": prompt_len,
                                     "output_len": 1})
    workload.check("cpu")  # used to raise "needs at least … GB for one step's inputs and activations"
