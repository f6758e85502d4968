"""`accelkit plan` of a text-to-image model at --batch above 1: the time per image and the phases it lists must be
on the same footing (the phases are one call of --batch images)."""

from __future__ import annotations

import re

from accelkit.cli.text_to_image import render_plans
from accelkit.models.diffusion import default_generation, get_diffusion_preset
from accelkit.plan.diffusion import compare_image


def _seconds(text: str) -> float:
    value, unit = text.split()
    return float(value) * (1e-3 if unit == "ms" else 1.0)


def test_batched_plan_names_the_call_its_phase_times_belong_to(capsys):
    spec = get_diffusion_preset("flux-dev")
    doc = compare_image(spec, default_generation(spec, batch_size=2), ["h100"])[0]
    render_plans([doc], compare=False)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "time / image" in ln)
    per_image = _seconds(re.search(r"time / image\s*│\s*([\d.]+ m?s)", line).group(1))
    denoiser = _seconds(re.search(r"denoiser ([\d.]+ m?s)", line).group(1))
    assert per_image == doc["time_per_image_s"] or abs(per_image - doc["time_per_image_s"]) < 0.01 * per_image
    # the denoiser's time shown is the whole call's, twice the time per image: the line must say so
    assert denoiser > per_image
    call = re.search(r"a call of (\d+) images ([\d.]+ m?s)", line)
    assert call is not None, line
    assert int(call.group(1)) == 2 and abs(_seconds(call.group(2)) - doc["generate_time_s"]) < 0.01 * per_image * 2


def _row(out: str, name: str) -> list[str]:
    line = next(ln for ln in out.splitlines() if ln.startswith("│ " + name))
    return [c.strip() for c in line.strip("│").split("│")]


def test_small_and_large_joules_per_image_read_as_numbers(capsys):
    tiny, flux = get_diffusion_preset("tiny-sd3"), get_diffusion_preset("flux-dev")
    small = compare_image(tiny, default_generation(tiny), ["h100"])[0]
    render_plans([small], compare=True)
    shown = _row(capsys.readouterr().out, "H100")[7]
    assert small["energy_j_per_image"] < 0.01
    assert float(shown) == float(f"{small['energy_j_per_image']:.3g}")  # was "0"
    large = compare_image(flux, default_generation(flux), ["l40s"], precision="fp32")[0]
    render_plans([large], compare=False)
    energy = next(ln for ln in capsys.readouterr().out.splitlines() if "J/image (estimated)" in ln)
    assert "e+" not in energy and f"{large['energy_j_per_image']:,.0f} J/image" in energy  # was 1.256e+04


def test_a_plan_that_does_not_fit_prints_its_warning_with_levers_it_has(capsys):
    flux = get_diffusion_preset("flux-dev")
    doc = compare_image(flux, default_generation(flux), ["l40s"], precision="fp32")[0]
    assert not doc["fits"]
    render_plans([doc], compare=False)
    warning = next((ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("warning:")), None)
    assert warning is not None and "L40S has 48.0 GB" in warning
    assert "--batch" not in warning and "bf16" in warning  # batch 1 cannot be lowered; fp32 can be halved
    batched = compare_image(flux, default_generation(flux, batch_size=30), ["l40s"])[0]
    assert not batched["fits"] and "lower --batch" in batched["warnings"][0]
