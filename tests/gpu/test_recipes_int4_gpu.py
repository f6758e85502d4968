"""int4 weight-only quantization on CUDA (tinygemm's bf16 kernels) keeps its activations in bf16. torchao's int4
tensor takes ``F.linear`` in ``__torch_function__`` (before autocast casts), runs the GEMM in bf16 and casts the
result back to the *input's* dtype — and CUDA autocast runs layer_norm in fp32, so every Linear after a LayerNorm
wrote fp32, and the rest of a BERT/GPT-2/ViT layer ran in fp32. Each converted Linear now casts its input to bf16,
as fp8 inference's do (`tests/integration/test_recipes_fp8_inference.py` checks that path on a CPU). Needs CUDA
SM80+: tinygemm's packing has no CPU kernel."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchao")


def _sm() -> tuple[int, int]:
    if not torch.cuda.is_available():
        return (0, 0)
    props = torch.cuda.get_device_properties(0)
    return props.major, props.minor


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)"),
    pytest.mark.skipif(torch.version.hip is not None or _sm() < (8, 0), reason="int4 on CUDA needs NVIDIA SM80+"),
]


def test_every_int4_linear_computes_in_bf16_after_an_autocast_layer_norm():
    from accelkit.core import Recipe
    from accelkit.recipes import apply

    torch.manual_seed(0)
    # widths multiples of 128, the int4 group on CUDA; the real LayerNorm: CUDA autocast runs it in fp32
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 128), torch.nn.LayerNorm(128), torch.nn.Linear(128, 256), torch.nn.GELU(),
        torch.nn.Linear(256, 128),
    ).eval().cuda()
    notes: list[str] = []
    model = apply(model, Recipe(precision="bf16", quantization="int4-weight"), device="cuda", notes=notes)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 3 and all("Int4" in type(m.weight).__name__ for m in linears), [type(m.weight) for m in linears]
    seen: list[tuple[torch.dtype, torch.dtype]] = []
    hooks = [m.register_forward_hook(lambda mod, args, out: seen.append((args[0].dtype, out.dtype))) for m in linears]
    x = torch.randn(4, 8, 128, device="cuda")  # fp32, as a caller passes it
    with torch.inference_mode():
        out = model(x)
    for h in hooks:
        h.remove()
    # linear 0 got the caller's fp32, linear 1 the fp32 LayerNorm output: both wrote fp32 before
    assert seen == [(torch.bfloat16, torch.bfloat16)] * 3
    assert out.dtype == torch.bfloat16
    assert notes[0].startswith("cast to bf16, then int4-weight quantization") and "their inputs cast to bf16" in notes[0]
