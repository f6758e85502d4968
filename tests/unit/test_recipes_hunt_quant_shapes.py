"""Quantization and fp8 training on odd shapes and torch's own transformer layers: the note counts only Linears that
really hold quantized weights, a model none of whose Linears the kernels take is refused before anything changes,
and nn.TransformerEncoder (MultiheadAttention reads out_proj.weight itself) quantizes and runs."""

import copy

import pytest
import torch

from accelkit.core import Recipe
from accelkit.recipes import RecipeRefused, apply
from accelkit.recipes.gates import drift

FP8_DYNAMIC = Recipe(quantization="fp8-dynamic", precision="bf16")


class TwoLinears(torch.nn.Module):
    def __init__(self, width: int, out: int):
        super().__init__()
        self.a, self.b = torch.nn.Linear(32, width), torch.nn.Linear(width, out)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _quantized(model):
    return {fqn for fqn, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and type(m.weight) is not torch.nn.Parameter}


def test_fp8_dynamic_refuses_a_model_whose_out_features_its_gemm_cannot_take():
    model = TwoLinears(8, 10).eval()  # in_features 32 and 8, out_features 8 and 10: _scaled_mm takes neither
    with pytest.raises(RecipeRefused, match=r"converted none of the 2 Linear layers: in_features and out_features "
                                            r"must both be multiples of 16.*shapes here: 32→8, 8→10"):
        apply(model, FP8_DYNAMIC, emulate=True)  # it was "1 of 2 converted" while none was
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # refused before the bf16 cast


def test_fp8_dynamic_note_counts_only_the_linears_converted():
    notes: list[str] = []
    model = apply(TwoLinears(48, 10).eval(), FP8_DYNAMIC, emulate=True, notes=notes)
    assert _quantized(model) == {"inner.a"}  # b (48→10) stays bf16: torchao skips it
    assert "of 1 of 2 Linear layers; 1 kept in full precision (in_features or out_features not a multiple of 16" \
        in notes[0], notes  # it said "2 of 2 … covers all the matmul weights"


def _encoder():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


@pytest.mark.parametrize(("quantization", "backend"), [("int8-dynamic", "auto"), ("int8-weight", "auto"),
                                                       ("int4-weight", "auto")])
def test_torchs_transformer_encoder_quantizes_and_runs(quantization, backend):
    encoder, x = _encoder(), torch.randn(2, 5, 32)
    with torch.no_grad():
        ref = encoder(x)
    notes: list[str] = []
    model = apply(copy.deepcopy(encoder), Recipe(quantization=quantization), quant_backend=backend, notes=notes)
    with torch.no_grad():  # every one raised: AttributeError (torch.ao) or NotImplementedError aten.t (torchao)
        assert drift(ref, model(x), logits=False).cosine > 0.99
    assert _quantized(model) == {f"layers.{i}.linear{j}" for i in (0, 1) for j in (1, 2)}
    assert "4 of 6 Linear layers; 2 kept in full precision (nn.MultiheadAttention's out_proj" in notes[-1], notes


def test_torch_ao_backend_is_refused_on_a_transformer_encoder_layer():
    with pytest.raises(RecipeRefused, match=r"through torch.ao breaks TransformerEncoder's nn.TransformerEncoderLayer"):
        apply(_encoder(), Recipe(quantization="int8-dynamic"), quant_backend="torch.ao")


def test_a_bare_multihead_attention_is_refused_for_quantization():
    attention = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval()
    with pytest.raises(RecipeRefused, match=r"converted none of the 1 Linear layers: 1 is nn.MultiheadAttention's "
                                            r"out_proj, whose weight it reads itself"):
        apply(attention, Recipe(quantization="int8-weight"))


def test_fp8_training_leaves_multihead_attention_out_proj_alone():
    notes: list[str] = []
    model = apply(_encoder().train(), Recipe(precision="fp8"), emulate=True, notes=notes)
    from torchao.float8.float8_linear import Float8Linear

    fp8 = {fqn for fqn, m in model.named_modules() if isinstance(m, Float8Linear)}
    assert fp8 == {f"inner.layers.{i}.linear{j}" for i in (0, 1) for j in (1, 2)}  # out_proj: never called
    assert "4 of 6 linear layers" in notes[0] and "2 nn.MultiheadAttention's out_proj" in notes[0], notes
    model(torch.randn(2, 5, 32)).float().sum().backward()
