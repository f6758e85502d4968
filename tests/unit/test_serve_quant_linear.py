"""The FP8 matmul path (``Fp8Linear.use_scaled_mm``: what runs on SM90+ GPUs) executed by torch's CPU
``torch._scaled_mm``, against the W8A8 arithmetic it stands for: activations quantized to e4m3 per token (or by
the static input scale), times the dequantized weight. Per-tensor scales of fused parts, per-channel scales and a
bias each exercised; tolerance: the bf16 output's rounding."""

import pytest
import torch

from accelkit.serve.quant.linear import FP8_DTYPE, FP8_MAX, Fp8Linear, pack_int4, unpack_int4


def _layer(*, per_channel, static, sizes=(32, 16, 16), in_features=64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    layer = Fp8Linear(in_features, sizes, per_channel=per_channel, scale_dtype=torch.float32, has_input_scale=static,
                      has_bias=True, dynamic_activations=not static)
    out = sum(sizes)
    with torch.no_grad():
        layer.weight.data = (torch.randn(out, in_features, generator=gen) * 4).to(FP8_DTYPE)
        layer.weight_scale.data = torch.rand(layer.weight_scale.shape, generator=gen) * 0.01 + 0.001
        layer.bias.data = torch.randn(out, generator=gen).to(torch.bfloat16)
        if static:
            layer.input_scale.data = torch.tensor([0.02, 0.03, 0.025])
    return layer


def _w8a8_reference(layer, x):
    x = x.float()
    if layer.dynamic_activations:
        scale = (x.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=1e-12)
    else:
        scale = layer.input_scale.float().max()
    x_q = (x / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE).float() * scale
    weight = layer.weight.float() * layer.channel_scale()[:, None]
    return x_q @ weight.t() + layer.bias.float()


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("static", [False, True])
def test_scaled_mm_path_is_w8a8(per_channel, static):
    layer = _layer(per_channel=per_channel, static=static)
    x = torch.randn(7, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    dequantized = layer(x)
    layer.use_scaled_mm()
    got = layer(x)
    assert got.dtype == torch.bfloat16 and got.shape == (7, 64)
    want = _w8a8_reference(layer, x)
    torch.testing.assert_close(got.float(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())
    # the activations' quantization shows: the 16-bit-input (dequantized) path is further from W8A8
    assert (got.float() - want).abs().max() < 0.5 * (dequantized.float() - want).abs().max()


def test_per_tensor_scales_apply_to_their_own_fused_part():
    layer = _layer(per_channel=False, static=False)
    scale = layer.channel_scale()
    assert torch.equal(scale[:32], layer.weight_scale[0].expand(32))
    assert torch.equal(scale[32:48], layer.weight_scale[1].expand(16))
    assert torch.equal(scale[48:], layer.weight_scale[2].expand(16))


def test_int4_packing_round_trips_over_the_whole_code_range():
    codes = torch.arange(-8, 8).repeat(3, 4)  # (3, 64): every code, lowest nibble first
    packed = pack_int4(codes)
    assert packed.shape == (3, 8) and packed.dtype == torch.int32
    assert torch.equal(unpack_int4(packed), codes)
    # code k of a word in bits 4k..4k+3, stored + 8: the first word holds -8..-1 → nibbles 0..7
    assert int(packed[0, 0]) == 0x76543210
