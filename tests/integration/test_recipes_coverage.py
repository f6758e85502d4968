"""What a weight conversion reached, in its note. transformers 5 stores a Mixtral layer's experts as two 3-D
parameters (one grouped GEMM, no nn.Linear) and its router as a bare 2-D one, so fp8 training and int8 converted
the attention projections only — 10-17% of tiny-mixtral's matmul weights — while the note counted "9 of 9 Linear
layers" and the variant was labelled fp8/int8 as if the whole model were."""

from __future__ import annotations

import re

import pytest
import torch

from accelkit.core import Recipe
from accelkit.models import get_preset
from accelkit.models.build import build_model
from accelkit.recipes import apply
from accelkit.recipes.coverage import matmul_weights

pytest.importorskip("torchao")
transformers = pytest.importorskip("transformers")


def _mixtral() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.MixtralConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        num_local_experts=4, num_experts_per_tok=2, vocab_size=256)
    return transformers.MixtralForCausalLM(config)


def _numel(model: torch.nn.Module, *, contains: str) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if contains in name)


def _share(note: str) -> tuple[int, int]:
    found = re.search(r"covers \S+ of the matmul weights \(([\d,]+) of ([\d,]+) parameters\)", note)
    assert found, note
    return int(found[1].replace(",", "")), int(found[2].replace(",", ""))


def test_mixtral_experts_stay_unconverted_and_the_fp8_training_note_says_so():
    model = _mixtral().train()
    experts, router = _numel(model, contains=".experts."), _numel(model, contains=".mlp.gate.")
    attention, head = _numel(model, contains=".self_attn."), _numel(model, contains="lm_head")
    notes: list[str] = []
    model = apply(model, Recipe(precision="fp8"), emulate=True, notes=notes)
    # what the recipe did to the experts: nothing (still plain fp32 3-D parameters)
    assert {p.dim() for n, p in model.named_parameters() if ".experts." in n} == {3}
    assert _share(notes[0]) == (attention, attention + experts + router + head)  # the head stays high precision
    assert "in 2 MixtralExperts (gate_up_proj/down_proj, 3-D: not nn.Linear)" in notes[0]
    assert "in 2 MixtralTopKRouter (weight, 2-D: not nn.Linear)" in notes[0]
    assert notes[0].endswith("this variant is mostly not fp8"), notes[0]
    ids = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(1))
    model(input_ids=ids, labels=ids).loss.backward()  # and it still trains


@pytest.mark.parametrize("quantization", ["int8-dynamic", "int8-weight"])
def test_mixtral_int8_note_gives_the_converted_share_and_names_the_experts(quantization):
    model = _mixtral().eval()
    experts, router = _numel(model, contains=".experts."), _numel(model, contains=".mlp.gate.")
    linears = _numel(model, contains=".self_attn.") + _numel(model, contains="lm_head")
    notes: list[str] = []
    model = apply(model, Recipe(quantization=quantization), device="cpu", notes=notes)
    assert _share(notes[0]) == (linears, linears + experts + router)
    assert "stay fp32: " in notes[0] and "MixtralExperts (gate_up_proj/down_proj, 3-D: not nn.Linear)" in notes[0]
    assert notes[0].endswith(f"this variant is mostly not {quantization}"), notes[0]
    with torch.inference_mode():
        assert model(input_ids=torch.zeros(1, 4, dtype=torch.long)).logits.shape == (1, 4, 256)


def test_a_dense_model_is_covered_whole_and_says_so():
    notes: list[str] = []
    apply(build_model(get_preset("tiny-llama")), Recipe(quantization="int8-weight"), device="cpu", notes=notes)
    assert notes[0].endswith("covers all the matmul weights (106,496 parameters)"), notes[0]
    assert "mostly not" not in notes[0]


def test_gpt2_conv1d_projections_count_as_unconverted_matmul_weights():
    """GPT-2's attention and MLP projections are transformers' Conv1D, not nn.Linear: int8 reached the LM head only."""
    model = build_model(get_preset("tiny-gpt"))
    conv1d = sum(p.numel() for m in model.modules() if type(m).__name__ == "Conv1D" for p in [m.weight])
    notes: list[str] = []
    apply(model, Recipe(quantization="int8-weight"), device="cpu", notes=notes)
    assert "of 1 of 1 Linear layers" in notes[0]
    head = 512 * 64  # tied to the token embedding: counted once, as the head's
    assert _share(notes[0]) == (head, head + conv1d)
    assert "in 8 Conv1D (weight, 2-D: not nn.Linear)" in notes[0] and "mostly not int8-weight" in notes[0]


def test_matmul_weights_counts_what_matmuls_read_once():
    vit = build_model(get_preset("tiny-vit"))
    found = {(w.module_fqn, w.name) for w in matmul_weights(vit)}
    assert ("embeddings.patch_embeddings.projection", "weight") in found  # a convolution
    assert not any(name in ("cls_token", "position_embeddings") for _, name in found)  # added, not multiplied
    assert not any(name == "bias" or "layernorm" in fqn for fqn, name in found)

    tied = build_model(get_preset("tiny-gpt"))
    weights = matmul_weights(tied)
    assert [w.module_fqn for w in weights if w.is_linear] == ["lm_head"]
    assert not any("wte" in w.module_fqn or "wpe" in w.module_fqn for w in weights)  # lookups
