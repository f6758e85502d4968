"""The precision matrix, its Recipes, and the one-line refusals of what a CPU cannot run."""

import pytest

from accelkit.bench.variants import Variant, device_refusal, matrix


def test_matrix_adds_option_variants_after_each_plain_one():
    names = [v.name for v in matrix(["fp32", "bf16"], compile=True)]
    assert names == ["fp32", "fp32+compile", "bf16", "bf16+compile"]
    assert [v.name for v in matrix(["bf16", "bf16"])] == ["bf16"]


def test_recipes_mean_what_the_precision_says():
    assert Variant(precision="int8").recipe().quantization == "int8-dynamic"
    assert Variant(precision="int8").recipe().precision == "fp32"
    assert Variant(precision="fp8").recipe(training=True).precision == "fp8"
    infer = Variant(precision="fp8").recipe(training=False)
    assert infer.quantization == "fp8-dynamic" and infer.precision == "bf16"
    assert Variant(precision="bf16", recompute=True).recipe().recompute == "full"


def test_bad_precision_names_the_field():
    with pytest.raises(ValueError, match="precision='fp4'"):
        Variant(precision="fp4")


@pytest.mark.parametrize(("precision", "needle"), [("tf32", "a CPU has no tf32"), ("fp8", "SM89+")])
def test_cpu_refuses_tf32_and_fp8_with_one_line(precision, needle):
    pytest.importorskip("torch")
    reason = device_refusal(Variant(precision=precision), "cpu")
    assert reason is not None and needle in reason and "\n" not in reason


def test_cpu_runs_fp32_bf16_int8():
    pytest.importorskip("torch")
    for p in ("fp32", "bf16", "int8"):
        assert device_refusal(Variant(precision=p), "cpu") is None, p


def test_an_explicit_recipe_runs_at_its_own_precision():
    """`tune` measures Variant(explicit_recipe=…), whose ``precision`` field stays at its fp32 default: loss scaling,
    autocast and the MFU peak must follow the recipe. An fp16 step without a GradScaler underflows a small loss's
    gradients to zero, so the weights would not move."""
    torch = pytest.importorskip("torch")
    from accelkit.bench.variants import apply, needs_context
    from accelkit.bench.workloads.base import train_step
    from accelkit.core import Recipe

    fp16 = Variant(explicit_recipe=Recipe(precision="fp16"), label="fp16")
    assert (fp16.effective_precision, fp16.matmul_dtype, needs_context(fp16, "cpu")) == ("fp16", "fp16", True)
    int8 = Variant(explicit_recipe=Recipe(quantization="int8-dynamic"), label="int8-dynamic")
    fp8 = Variant(explicit_recipe=Recipe(precision="bf16", quantization="fp8-dynamic"), label="fp8-dynamic")
    assert [v.effective_precision for v in (int8, fp8)] == [Variant(precision="int8").effective_precision, "fp8"]
    assert Variant(explicit_recipe=Recipe(quantization="int4-weight"), label="w4").effective_precision == "fp32"

    torch.manual_seed(0)
    linear = torch.nn.Linear(16, 16)
    model = apply(linear.train(), fp16, device="cpu", train=True)
    x = torch.randn(8, 16)
    before = linear.weight.detach().clone()
    step = train_step(model, torch.optim.SGD(model.parameters(), lr=1.0), lambda: model(x).float().sum() * 1e-9, fp16,
                      "cpu")
    for _ in range(3):  # the scaler skips the steps whose scaled gradients overflow, then backs off
        step()
    assert not torch.equal(before, linear.weight.detach())
