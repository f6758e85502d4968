"""`accelkit plan` prices and energy as a buyer reads them: the 'no price' hint names keys that price those very
devices, a price given twice for one device is refused (not one of them dropped), and an activity factor of 0
plans 0 J/token rather than printing no energy."""

from __future__ import annotations

import json
import re

from accelkit.hardware import get_device, list_devices
from accelkit.plan.calibrate import hardware_key
from tests.conftest import main_in_process

UNPRICED = "h100-pcie,rtx-4090,tpu-v5e,h100-sxm5-96gb"


def _plan(capsys, *args: str) -> tuple[int, str, str]:
    return main_in_process(capsys, "plan", "--model", "tiny-llama", "--task", "infer", *args)


def test_hardware_key_names_that_device_for_every_catalog_entry():
    for spec in list_devices():
        assert get_device(hardware_key(spec.name)).name == spec.name, spec.name
    assert hardware_key("H100-PCIe-80GB") == "h100-pcie"  # 'h100' is the SXM5 card
    assert hardware_key("TPU-v5e") == "tpu-v5e"  # 'tpu' is no hardware


def test_no_price_hint_prices_every_unpriced_row_when_followed(capsys):
    code, out, err = _plan(capsys, "--compare", UNPRICED)
    assert code == 0, err
    hint = re.search(r"give --price-per-device-hour (\S+)", out)
    assert hint is not None, out
    followed = hint.group(1).replace("=X", "=1.5")
    code, out, err = _plan(capsys, "--compare", UNPRICED, "--price-per-device-hour", followed, "--json")
    assert code == 0, err
    assert [d["cost"]["price_per_device_hour"] for d in json.loads(out)] == [1.5] * 4


def test_budget_basis_hint_names_the_unpriced_device(capsys):
    code, _, err = _plan(capsys, "--compare", "h100,tpu-v5e", "--compare-basis", "budget")
    assert code == 2 and err.strip().endswith("give --price-per-device-hour tpu-v5e=X"), err


def test_one_device_priced_twice_is_refused(capsys):
    for args, needle in (
        (["--compare", "h100,h200", "--price-per-device-hour", "h100=3,h100-sxm5=4"],
         "prices H100-SXM5-80GB twice (h100 and h100-sxm5)"),
        (["--hardware", "h100", "--price-per-device-hour", "h100=3,h100-sxm5=4"],
         "prices H100-SXM5-80GB twice (h100 and h100-sxm5)"),
        (["--hardware", "h100", "--price-per-device-hour", "h100=3,H100=4"], "names H100 twice"),
    ):
        code, _, err = _plan(capsys, *args)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and needle in lines[0], (args, err)


def test_activity_factor_zero_plans_zero_joules(capsys):
    code, out, err = _plan(capsys, "--hardware", "h100", "--num-devices", "1", "--activity-factor", "0")
    assert code == 0, err
    assert re.search(r"│ energy\s+│ 0 J/token \(estimated\)", out), out


def test_cnn_plan_shows_energy_and_cost_per_sample(capsys):
    one = ("--hardware", "h100", "--num-devices", "1", "--price-per-device-hour", "2.69")
    code, out, err = _cnn(capsys, *one, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["energy_j_per_token"] is None and doc["energy_j_per_sample"] > 0
    assert "per_million_tokens" not in doc["cost"]  # ResNet has no tokens: the figure is per image
    per_sample = doc["cost"]["per_step"] / (doc["samples_per_s"] * doc["step_time_s"])
    assert abs(doc["cost"]["per_million_samples"] - per_sample * 1e6) < 1e-9 * per_sample * 1e6
    code, out, err = _cnn(capsys, *one)
    assert code == 0, err
    assert re.search(rf"│ energy\s+│ {doc['energy_j_per_sample']:.4g} J/sample \(estimated\)", out), out
    assert re.search(r"│ cost\s+│ \$[\d.]+/M samples at \$2\.69/device-hour", out), out


def test_cnn_compare_table_counts_samples(capsys):
    code, out, err = _cnn(capsys, "--compare", "h100,h200")
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("┃ hardware"))
    assert "samples/s" in header and "J/sample" in header and "tok/s" not in header and "J/token" not in header
    h100 = next(line for line in out.splitlines() if line.startswith("│ H100"))
    assert "/M samples" in h100 and " - " not in h100.split("│")[9], h100  # the J/sample cell is filled


def _cnn(capsys, *args: str) -> tuple[int, str, str]:
    return main_in_process(capsys, "plan", "--model", "resnet-50", "--task", "train", *args)
