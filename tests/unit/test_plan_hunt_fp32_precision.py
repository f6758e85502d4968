"""`accelkit plan --precision fp32` for a text-to-image model is IEEE fp32, as `accelkit bench` runs it (TF32 off for
matmuls and cuDNN convolutions): every phase runs under the fp32 peak, and the plan says so — and says that PyTorch's
own default (cuDNN convolutions in TF32) would run faster, which a user reading 0.52 MFU of the 67 TFLOP/s H100 fp32
peak needs to know. Also: an --ep that does not divide the experts names the values that do, and a compared device
without the --precision's peak offers dropping it from --compare."""

from __future__ import annotations

import pytest

from accelkit.core import Cluster, UserError
from accelkit.models import get_preset
from accelkit.models.diffusion import default_generation, get_diffusion_preset
from accelkit.plan.calibrate import resolve_hardware
from accelkit.plan.diffusion import plan_image
from accelkit.plan.layout import check_user_layout


def test_sdxl_fp32_runs_below_the_fp32_peak_and_says_tf32_is_off():
    spec, h100 = get_diffusion_preset("sdxl-base"), resolve_hardware("h100")
    doc = plan_image(spec, default_generation(spec), h100, precision="fp32")
    peak = h100.peak("fp32")
    assert doc["flops_per_step"] / doc["step_time_s"] < peak  # not timed at the TF32 peak (7× higher)
    assert 0 < doc["mfu"] < 1
    (line,) = [a for a in doc["assumptions"] if a.startswith("fp32 is IEEE fp32")]
    assert "TF32 off for matmuls and cuDNN convolutions" in line and "as `accelkit bench` runs fp32" in line
    assert "PyTorch's own default runs cuDNN convolutions in TF32" in line
    # bf16 has no such line; a device without TF32 (AMD) gets the fp32 line without the TF32 part
    assert not any(a.startswith("fp32 is IEEE") for a in
                   plan_image(spec, default_generation(spec), h100, precision="bf16")["assumptions"])
    amd = plan_image(spec, default_generation(spec), resolve_hardware("mi300x"), precision="fp32")["assumptions"]
    (line,) = [a for a in amd if a.startswith("fp32 is IEEE fp32")]
    assert "TF32" not in line


@pytest.mark.parametrize("ep,offered", [(3, "1, 2, 4, 8"), (16, "1, 2, 4, 8")])
def test_an_ep_that_does_not_divide_the_experts_names_the_values_that_do(ep, offered):
    model = get_preset("mixtral-8x7b")
    cluster = Cluster(device=resolve_hardware("h100"), num_devices=48)
    with pytest.raises(UserError, match=rf"^--ep {ep} does not divide the 8 experts of mixtral-8x7b; use one of "
                                        rf"{offered}$"):
        check_user_layout(model, cluster, {"ep": ep}, 48)


@pytest.mark.parametrize("model", ["tiny-llama", "sdxl-base"])
def test_a_compared_device_without_the_precision_can_also_be_dropped(capsys, model):
    """--compare h100,a100 --precision fp8: the A100's missing fp8 peak said "choose another --precision" only, as if
    the comparison could not run fp8 at all; the row's other fix is dropping the A100 from the list."""
    from tests.conftest import main_in_process

    code, out, err = main_in_process(capsys, "plan", "--model", model, "--task", "infer", "--compare", "h100,a100",
                                     "--precision", "fp8")
    assert (code, out) == (2, ""), err
    assert err.strip().splitlines() == [
        "error: A100-SXM4-80GB has no fp8 peak in the catalog (it has: fp64, fp32, tf32, bf16, fp16, int8); choose "
        "another --precision — or drop a100 from --compare"]
    code, _, err = main_in_process(capsys, "plan", "--model", model, "--task", "infer", "--compare", "a100",
                                   "--precision", "fp8")
    assert code == 2 and "drop" not in err  # alone, it is the comparison
