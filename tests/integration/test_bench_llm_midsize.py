"""The llm workload on mid-size model kinds the tiny presets do not cover: sliding-window decoders (Qwen2, Mistral)
and mixture-of-experts (Mixtral), built from config.json files with random weights."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")


def _config(tmp_path: Path, kind: str, **fields: object) -> str:
    import transformers

    cfg = getattr(transformers, f"{kind}Config")(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                 num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
                                                 max_position_embeddings=256, **fields)
    path = tmp_path / kind.lower()
    cfg.save_pretrained(path)
    return str(path / "config.json")


def _decode_flops_per_call(model: str, prompt_len: int, output_len: int, calls: int) -> list[float]:
    """FLOPs of each decode call after the first (which seeds the cache; the list starts one call into a cycle), on
    the CPU (real cache, real tokens)."""
    from accelkit.bench.metrics import count_flops
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload

    workload = make_workload("llm", {"model": model, "batch_size": 2, "prompt_len": prompt_len,
                                     "output_len": output_len})
    prepared = workload.prepare(Variant(), "cpu", seed=0)
    try:
        decode = next(s for s in prepared.steps if s.name == "decode")
        decode.fn()
        return [count_flops(decode.fn) for _ in range(calls)]
    finally:
        prepared.close()


@pytest.mark.parametrize(("kind", "fields", "prompt_len"), [
    # layer 0 full attention, layer 1 a window of 16: the context (12 + 8) passes the window within a cycle
    ("Qwen2", {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 1}, 12),
    # every layer a window of 8, the prompt already past it
    ("Mistral", {"sliding_window": 8}, 12),
])
def test_decode_on_a_sliding_window_model_rewinds_to_the_same_contexts_every_cycle(
        tmp_path: Path, kind: str, fields: dict[str, object], prompt_len: int) -> None:
    """Decode rewound its cache with crop at the end of each cycle; transformers cannot crop a sliding-window layer
    back once it is past its window, so every sliding-window model failed its first cycle once the context passed
    the window (RuntimeError: `crop` was called, …). Each cycle now runs the same contexts: the same FLOPs per call."""
    output_len = 8
    flops = _decode_flops_per_call(_config(tmp_path, kind, **fields), prompt_len, output_len, 3 * output_len)
    cycles = [flops[i:i + output_len] for i in range(0, 3 * output_len, output_len)]
    assert cycles[0] == cycles[1] == cycles[2]
    if kind == "Qwen2":  # the full-attention layer's context grows over a cycle: the rewind is not a no-op
        assert len(set(cycles[0])) == output_len


def test_decode_on_a_dense_model_still_rewinds_every_cycle(tmp_path: Path) -> None:
    """Full-attention layers are still cropped back: the context grows over a cycle and starts again at the prompt."""
    output_len = 6
    flops = _decode_flops_per_call(_config(tmp_path, "Llama"), 10, output_len, 2 * output_len)
    assert flops[:output_len] == flops[output_len:]
    assert len(set(flops[:output_len])) == output_len  # one context per call of the cycle
