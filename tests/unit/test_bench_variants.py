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
