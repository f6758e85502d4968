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


@pytest.mark.parametrize("workload", ["llm", "llm-train"])
def test_moe_analytic_flops_count_the_active_experts_as_the_planner_does(tmp_path: Path, workload: str) -> None:
    """The analytic N used every expert's weights (num_params): 4 experts, top-2 read 1.5× the planner's FLOPs. It
    is now the parameters a token goes through; the planner's figure excludes norms, hence the 1% tolerance."""
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.plan import flops as F

    model = _config(tmp_path, "Mixtral", num_local_experts=4, num_experts_per_tok=2, sliding_window=None)
    shape = {"seq_len": 32} if workload == "llm-train" else {"prompt_len": 32, "output_len": 4}
    bench = make_workload(workload, {"model": model, "batch_size": 2, **shape})
    spec = bench.model_spec
    prepared = bench.prepare(Variant(), "meta", seed=0)
    analytic = {step.name: step.analytic_flops_per_item for step in prepared.steps}
    if workload == "llm-train":
        planner = {"train step": F.training_flops(spec, batch=2, seq=32) / 64}
    else:  # the prefill's LM head at the last prompt position only (logits_to_keep=1), as the planner's
        planner = {"prefill": F.prefill_flops(spec, batch=2, prompt_len=32) / 64,
                   "decode": F.decode_flops(spec, batch=2, context=32 + 5 / 2) / 2}
    for name, expected in planner.items():
        assert analytic[name] == pytest.approx(expected, rel=0.01), name


def test_compiled_decode_compiles_every_measured_shape_in_its_first_call(tmp_path: Path) -> None:
    """The decode's shapes repeat only over a whole cycle (each context, then the rewound cache), and a warm-up (3
    steps with --quick) can be shorter than one: torch.compile recompiled inside the measured blocks. The first call
    now runs a whole cycle and its rewind, so nothing after it compiles."""
    import torch

    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload

    torch._dynamo.reset()
    output_len = 4
    workload = make_workload("llm", {"model": _config(tmp_path, "Llama"), "batch_size": 1, "prompt_len": 8,
                                     "output_len": output_len})
    prepared = workload.prepare(Variant(compile=True), "cpu", seed=0)
    try:
        for step in prepared.steps:  # the session's first calls: prefill, then decode
            step.fn()
        compiled = dict(torch._dynamo.utils.counters["frames"])
        decode = next(s for s in prepared.steps if s.name == "decode")
        for _ in range(2 * output_len + 1):  # warm-up and measured calls: two rewinds
            decode.fn()
        assert dict(torch._dynamo.utils.counters["frames"]) == compiled
    finally:
        prepared.close()
        torch._dynamo.reset()


@pytest.mark.parametrize("workload", ["llm", "llm-train"])
def test_an_encoder_is_refused_by_the_workload_that_was_asked_for(workload: str) -> None:
    """The refusal read "'tiny-bert' is a encoder model; llm needs a decoder", for llm-train too."""
    from accelkit.bench.workloads import make_workload
    from accelkit.core import UserError

    with pytest.raises(UserError) as err:
        make_workload(workload, {"model": "tiny-bert"}).model_spec  # noqa: B018
    assert str(err.value).startswith(f"'tiny-bert' is an encoder model; {workload} needs a decoder")


def test_decode_analytic_flops_attend_at_most_the_window(tmp_path: Path) -> None:
    """The analytic decode figure took every cached key (T = context) on a sliding-window model: 2.4× the counted
    FLOPs for a window of 8 behind a 256-token prompt (it becomes MFU when FLOPs cannot be counted)."""
    from accelkit.bench.reference import count_on_meta
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload

    model = _config(tmp_path, "Mistral", sliding_window=8)
    workload = make_workload("llm", {"model": model, "batch_size": 1, "prompt_len": 200, "output_len": 8})
    counted, why = count_on_meta(workload, seed=0)
    assert why is None, why
    decode = next(s for s in workload.prepare(Variant(), "meta", seed=0).steps if s.name == "decode")
    assert decode.analytic_flops_per_item == pytest.approx(counted["decode"], rel=0.02)
