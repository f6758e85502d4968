"""FP8 on real modules, run on this CPU where torch can (issue 13): fp8 inference over an fp32 BERT-shaped
checkpoint with biases is cast to bf16 first (the H200 raised "Bias must be BFloat16 or Half, but got Float"),
and fp8 training never lets an autocast cast reach a float8 tensor (the H200 raised
"attempting to run aten.to.dtype"), for both of torchao's scalings."""

from __future__ import annotations

import pytest
import torch

from accelkit.core import Recipe
from accelkit.models import get_preset
from accelkit.models.build import build_model
from accelkit.recipes import apply, refusal

pytest.importorskip("torchao")


def _bert():
    # BERT-base's layout (fp32, nn.Linear with biases) at an eighth of its width and two layers: torch._scaled_mm's
    # CPU path takes seconds for one GEMM at the full width (2 × 32 tokens at 768 wide: 36 s for the test; at 192
    # wide the fp8 forward still took 5.5 s of CPU, at 96 wide 1.4 s, the cosine to fp32 0.99998 either way)
    return build_model(get_preset("bert-base").replace(num_layers=2, hidden_size=96, num_heads=3,
                                                        ffn_hidden_size=384), seed=0)


@pytest.mark.parametrize("quantization", ["fp8-dynamic", "fp8-weight"])
def test_fp8_inference_on_an_fp32_checkpoint_with_biases(quantization):
    ids = torch.randint(0, 1000, (2, 32), generator=torch.Generator().manual_seed(0))
    reference = _bert()
    with torch.inference_mode():
        ref = reference(input_ids=ids).last_hidden_state
    model = _bert()
    assert all(m.bias.dtype == torch.float32 for m in model.modules() if isinstance(m, torch.nn.Linear))
    notes: list[str] = []
    model = apply(model, Recipe(precision="bf16", quantization=quantization), emulate=True, notes=notes)
    assert notes[0].startswith(f"cast to bf16, then {quantization}")
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    # what torchao's fp8 GEMM (torch._scaled_mm) requires on a GPU: fp8 weights with bf16/fp16 biases
    assert linears and all(type(m.weight).__name__ == "Float8Tensor" for m in linears)
    assert all(m.bias.dtype == torch.bfloat16 for m in linears)
    seen: list[torch.dtype] = []
    hooks = [m.register_forward_pre_hook(lambda mod, args: seen.append(args[0].dtype)) for m in linears]
    with torch.inference_mode():
        out = model(input_ids=ids).last_hidden_state
    for h in hooks:
        h.remove()
    assert set(seen) == {torch.bfloat16}  # every fp8 GEMM was fed bf16 activations
    cosine = torch.nn.functional.cosine_similarity(out.float().flatten(), ref.flatten(), dim=0).item()
    assert cosine > 0.99, cosine


def test_fp8_inference_needs_a_16_bit_precision():
    reason = refusal(Recipe(quantization="fp8-dynamic"), "cpu", emulate=True)
    assert reason is not None and "precision='bf16'" in reason


@pytest.fixture
def float8_dispatch_spy(monkeypatch):
    """Every aten op that reaches a torchao Float8TrainingTensor."""
    from torchao.float8.float8_training_tensor import Float8TrainingTensor

    seen: list[str] = []
    original = Float8TrainingTensor.__torch_dispatch__.__func__

    def spy(cls, func, types, args, kwargs=None):
        seen.append(str(func))
        return original(cls, func, types, args, kwargs)

    monkeypatch.setattr(Float8TrainingTensor, "__torch_dispatch__", classmethod(spy))
    return seen


@pytest.mark.parametrize("scaling", ["tensorwise", "rowwise"])
def test_fp8_training_keeps_autocast_casts_away_from_float8_tensors(float8_dispatch_spy, scaling):
    model = build_model(get_preset("tiny-llama"), seed=0).train()
    notes: list[str] = []
    model = apply(model, Recipe(precision="fp8"), emulate=True, fp8_scaling=scaling, notes=notes)
    assert f"fp8 training ({scaling}, emulated)" in notes[0] and "autocast bf16" in notes[1]
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the optimizer keeps fp32 master weights
    ids = torch.randint(0, 512, (4, 32), generator=torch.Generator().manual_seed(1))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the bench's numerics() around the step, as on a GPU
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert "aten.mm.default" in float8_dispatch_spy  # the fp8 GEMMs ran
    casts = [op for op in float8_dispatch_spy if "_to_copy" in op or op.startswith("aten.to")]
    assert casts == []  # on a GPU, such a cast is the NotImplementedError that killed the first H200 run
    assert losses[-1] < losses[0] * 0.9, losses


def test_fp8_training_refuses_a_model_with_no_linear_it_would_convert():
    """Linear(20, 40)/Linear(40, 20) converted nothing ('0 linear layers as Float8Linear') and was measured as fp8.
    A model where no Linear qualifies is refused now, naming why each was kept; otherwise the note counts them."""
    from accelkit.recipes import RecipeRefused

    narrow = torch.nn.Sequential(torch.nn.Linear(20, 40), torch.nn.ReLU(), torch.nn.Linear(40, 20)).train()
    with pytest.raises(RecipeRefused, match=r"convert none of the 2 Linear layers .*2 with dims not multiples of 16"):
        apply(narrow, Recipe(precision="fp8"), emulate=True)
    assert [type(m) for m in narrow] == [torch.nn.Linear, torch.nn.ReLU, torch.nn.Linear]

    class HeadOnly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.classifier = torch.nn.Linear(32, 32)

        def forward(self, x):
            return self.classifier(x)

    with pytest.raises(RecipeRefused, match=r"none of the 1 Linear layers .*1 output head"):
        apply(HeadOnly().train(), Recipe(precision="fp8"), emulate=True)

    notes: list[str] = []
    apply(build_model(get_preset("tiny-llama"), seed=0).train(), Recipe(precision="fp8"), emulate=True, notes=notes)
    assert "14 of 15 linear layers as Float8Linear" in notes[0] and "kept in high precision: 1 output head" in notes[0]
