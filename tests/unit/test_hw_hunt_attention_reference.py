"""`hw probe`'s causal-attention row is a fraction of a matmul of the attention's own dtype: on a GPU the catalog does
not know (H100 NVL, L4), its bf16 attention was divided by the probe's fp32 matmul and 'of ref' read ~800%."""

from accelkit.hardware import get_device
from accelkit.hardware.kernel_probe import attention_reference

MATMUL = {"fp32": {"tflops": 51.0}, "bf16": {"tflops": 700.0}, "fp16": {"tflops": 710.0}}


def test_unknown_gpu_divides_by_its_bf16_matmul() -> None:
    assert attention_reference("cuda:0", None, MATMUL) == (700.0, "this probe's bf16 matmul")


def test_unknown_gpu_without_bf16_takes_fp16_and_never_fp32() -> None:
    assert attention_reference("cuda", None, {"fp16": {"tflops": 710.0}, "fp32": {"tflops": 51.0}}) == (
        710.0, "this probe's fp16 matmul")
    assert attention_reference("cuda", None, {"fp32": {"tflops": 51.0}})[0] is None


def test_cpu_divides_by_its_fp32_matmul_and_catalog_gpu_by_the_datasheet() -> None:
    assert attention_reference("cpu", None, MATMUL) == (51.0, "this probe's fp32 matmul")
    assert attention_reference("cpu", None, {"bf16": {"tflops": 2.0}})[0] is None  # fp32 attention, no fp32 matmul
    assert attention_reference("cuda:0", get_device("h100"), MATMUL) == (989.0, "catalog dense bf16 peak")
