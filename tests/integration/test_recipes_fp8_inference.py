"""fp8 inference as an H200 review found it (run here on a CPU with emulate=True): every converted Linear gets its
input in the compute dtype even when the module before it hands over fp32 — CUDA autocast runs layer_norm in fp32,
and torchao's Float8Tensor takes F.linear before autocast could cast it, so the GEMM quantized fp32 activations and
wrote fp32 outputs — and the cast to 16 bits leaves computed buffers (RoPE's inv_freq) in fp32."""

from __future__ import annotations

import pytest
import torch

from accelkit.core import Recipe
from accelkit.models import get_preset
from accelkit.models.build import build_model
from accelkit.recipes import apply
from accelkit.recipes.quantize import FP8_COMPUTE, cast_to

pytest.importorskip("torchao")


class Fp32LayerNorm(torch.nn.LayerNorm):
    """A LayerNorm that returns fp32 whatever it is given, as CUDA autocast's layer_norm does (its fp32 op list);
    CPU autocast keeps layer_norm in bf16, so without this a CPU test never sees what a GPU does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(
            x.float(), self.normalized_shape, self.weight.float(), self.bias.float(), self.eps)


def _block() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 64), Fp32LayerNorm(64), torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64),
    ).eval()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("quantization", ["fp8-dynamic", "fp8-weight"])
def test_every_fp8_linear_computes_in_the_compute_dtype_when_fed_fp32(quantization, precision):
    compute = FP8_COMPUTE[precision]
    notes: list[str] = []
    model = apply(_block(), Recipe(precision=precision, quantization=quantization), emulate=True, notes=notes)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 3 and all(type(m.weight).__name__ == "Float8Tensor" for m in linears)
    seen: list[tuple[str, torch.dtype, torch.dtype]] = []
    hooks = [m.register_forward_hook(lambda mod, args, out, i=i: seen.append((f"linear {i}", args[0].dtype, out.dtype)))
             for i, m in enumerate(linears)]
    x = torch.randn(4, 8, 64, generator=torch.Generator().manual_seed(1))  # an fp32 input, as a caller passes one
    with torch.inference_mode():
        out = model(x)
    for h in hooks:
        h.remove()
    # linear 0 takes the caller's fp32 input, linear 1 the fp32 LayerNorm output: both reached the fp8 GEMM as fp32
    assert seen == [(f"linear {i}", compute, compute) for i in range(3)]
    assert out.dtype == compute
    assert f"their inputs cast to {precision}" in notes[0]
    with torch.inference_mode():  # and the GEMM is the one a 16-bit input gets, not an fp32-input variant of it
        h32 = linears[1](torch.randn(4, 64))
        assert h32.dtype == compute
        g = torch.Generator().manual_seed(2)
        a = torch.randn(4, 64, generator=g)
        assert torch.equal(linears[1](a), linears[1](a.to(compute)))


def _tiny_llama() -> torch.nn.Module:
    model = build_model(get_preset("tiny-llama"), seed=0)  # rope_theta 500000, llama3 rope scaling
    # random init (std 0.02) attends almost uniformly, so positions barely matter; a trained model's attention is
    # sharp and position-dependent. Scaled q/k weights make it so here.
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(10)
            layer.self_attn.k_proj.weight.mul_(10)
    return model


def test_fp8_inference_keeps_rope_inv_freq_in_fp32_so_long_positions_stay_close():
    """`model.to(bf16)` cast RoPE's inv_freq (a computed, non-persistent buffer) too: the angle error grows with the
    position and counted as fp8 drift. from_pretrained(dtype=bf16) leaves it fp32, and so does apply() now."""
    ids = torch.randint(0, 512, (1, 16), generator=torch.Generator().manual_seed(0))
    # RoPE is relative: what the angle error reaches is a query ~1000 positions after its keys. 8 tokens at the
    # start, 8 at positions 1000-1007 — a long context at the cost of 16 tokens; the last 8 are compared
    positions = torch.cat([torch.arange(8), torch.arange(1000, 1008)]).unsqueeze(0)
    fp32 = _tiny_llama()
    with torch.inference_mode():
        reference = fp32(input_ids=ids, position_ids=positions).logits[:, 8:]
    notes: list[str] = []
    model = apply(_tiny_llama(), Recipe(precision="bf16", quantization="fp8-dynamic"), emulate=True, notes=notes)
    rotary = model.inner.model.rotary_emb
    assert rotary.inv_freq.dtype == rotary.original_inv_freq.dtype == torch.float32
    assert torch.equal(rotary.inv_freq, fp32.model.rotary_emb.inv_freq)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}  # everything else was cast

    def drift() -> float:
        with torch.inference_mode():
            logits = model(input_ids=ids, position_ids=positions).logits[:, 8:]
        return (logits.float() - reference).abs().mean().item()

    kept = drift()
    # the same fp8 model with the buffers as the old cast left them (bf16): only the rope angles differ
    rotary.inv_freq, rotary.original_inv_freq = rotary.inv_freq.bfloat16(), rotary.original_inv_freq.bfloat16()
    cast = drift()
    assert kept < 0.75 * cast, (kept, cast)  # measured 0.011 against 0.020: nearly half the "fp8 drift" was rope
    assert "2 computed buffers kept in their dtype (model.rotary_emb.inv_freq, model.rotary_emb.original_inv_freq)" \
        in notes[0]


def test_the_16_bit_cast_keeps_computed_buffers_and_casts_saved_ones():
    """BatchNorm's running statistics are saved with the model like its weight, and torch's batch_norm takes them
    only in the weight's dtype: they are cast. A non-persistent buffer (computed, like inv_freq) keeps its dtype."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.BatchNorm2d(16), torch.nn.Flatten(),
                                torch.nn.Linear(16 * 6 * 6, 32)).eval()
    model[0].register_buffer("scale", torch.tensor([0.1234567]), persistent=False)
    model[0].register_buffer("steps", torch.arange(3), persistent=False)  # not floating: untouched either way
    model, kept = cast_to(model, torch.bfloat16)
    assert kept == ["0.scale"]
    assert model[0].scale.dtype == torch.float32 and model[0].scale.item() == torch.tensor(0.1234567).item()
    assert model[0].steps.dtype == torch.int64
    assert model[1].running_mean.dtype == model[1].running_var.dtype == model[1].weight.dtype == torch.bfloat16
    model = apply(model, Recipe(precision="bf16", quantization="fp8-dynamic"), emulate=True)
    with torch.inference_mode():
        assert model(torch.randn(2, 3, 8, 8)).dtype == torch.bfloat16
