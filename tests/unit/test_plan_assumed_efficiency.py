"""An assumed efficiency is never more generous than the figures measured on the same card, and the plan's tables
say which figures are assumed (issue 29 item 2: MI300X fp8 was planned at an assumed 0.75 beside its measured bf16
0.51, which ranked it above H200 fp8). In process."""

import json

import pytest

from accelkit.core import Measurement
from accelkit.hardware import list_devices
from accelkit.plan.priors import prior_efficiency
from tests.conftest import main_in_process

MATMUL_DTYPES = ("bf16", "fp16", "fp8")


def _main(capsys, *args: str) -> tuple[int, str, str]:
    """`accelkit plan ARGS` in process: (exit code, stdout, stderr)."""
    return main_in_process(capsys, "plan", *args)


@pytest.mark.parametrize("device", [d for d in list_devices() if d.vendor != "cpu"], ids=lambda d: d.name)
def test_no_assumed_compute_efficiency_exceeds_a_measured_one_of_the_same_card(device):
    effs = {dt: prior_efficiency(device, dt) for dt in MATMUL_DTYPES if device.peak(dt)}
    measured = [e.compute for e in effs.values() if "compute" not in e.assumed]
    for dtype, eff in effs.items():
        if "compute" in eff.assumed and measured:
            assert eff.compute <= min(measured), (device.name, dtype, eff.compute, measured)
        assert ("compute" in eff.assumed) == ("ASSUMED" in eff.sources[0])  # the flag and the sentence agree


def test_mi300x_fp8_is_capped_at_its_measured_bf16():
    eff = prior_efficiency(next(d for d in list_devices() if d.name == "MI300X"), "fp8")
    assert eff.compute == pytest.approx(0.51) and eff.assumed == ("compute", "attention")
    assert "capped at the same card's measured bf16 0.51" in eff.sources[0]


def test_the_compare_table_marks_assumed_figures_and_mi300x_fp8_no_longer_outranks_h200(capsys):
    args = ["--model", "llama-3.1-70b", "--task", "infer", "--precision", "fp8", "--compare", "h200,mi300x"]
    code, out, err = _main(capsys, *args, "--json")
    assert code == 0, err
    rows = {d["hardware"]["name"]: d for d in json.loads(out)}
    mi300x, h200 = rows["MI300X"], rows["H200-SXM-141GB"]
    assert h200["assumed_efficiency"] == {}  # MAMF fp8 and FlashAttention-3 figures are published for it
    assert mi300x["assumed_efficiency"]["compute"] == pytest.approx(0.51)
    assert mi300x["tokens_per_s_per_device"] <= h200["tokens_per_s_per_device"]
    code, out, _ = _main(capsys, *args)
    assert code == 0
    mfu = {line.split("│")[1].strip()[:4]: line.split("│")[10].strip() for line in out.splitlines()
           if line.startswith("│") and line.split("│")[1].strip()}  # names may be cut to the terminal's width
    assert mfu["MI30"].endswith("*") and not mfu["H200"].endswith("*")
    assert "* MI300X: efficiency ASSUMED (no published or measured figure): compute 0.51, attention 0.26" in out
    code, out, _ = _main(capsys, "--model", "llama-3.1-8b", "--task", "infer", "--precision", "fp8", "--hardware",
                         "mi300x", "--num-devices", "1")
    assert code == 0 and "(efficiency ASSUMED: compute 0.51, attention 0.26; see assumptions)" in out


def test_a_probe_of_the_card_caps_the_assumed_dtype_too():
    from accelkit.core import Cluster, Recipe, Workload
    from accelkit.hardware import get_device
    from accelkit.models import get_preset
    from accelkit.plan import make_context
    from accelkit.results import ResultStore

    details = {"device": "cuda:0", "catalog_name": "MI300X",
               "matmul": {"bf16": {"tflops": 523.0, "fraction_of_peak": 0.40}}}
    with ResultStore() as store:
        store.add(Measurement(kind="probe", name="hw probe", hardware="MI300X", details=details))
    w = Workload(model=get_preset("llama-3.1-8b"), task="infer", recipe=Recipe(precision="fp8"))
    ctx = make_context(w, Cluster(device=get_device("mi300x"), num_devices=1))
    assert ctx.efficiency.compute == pytest.approx(0.40) and "compute" in ctx.efficiency.assumed
    assert ctx.efficiency.attention == pytest.approx(0.20) and "attention" in ctx.efficiency.assumed  # half of it
    assert any("capped at the same card's measured bf16 0.40 (`hw probe` on this machine" in a for a in ctx.assumptions)


def test_gh200_takes_h100s_priors_and_fitted_factor_through_one_alias():
    """GH200 is an H100 die: family() matched name prefixes only, so "GH200-96GB" got the generic ASSUMED compute 0.75
    and attention 0.375 and an unfitted sustained factor, and --compare ranked it below H100 on a compute-bound plan
    although it is at least H100 on every figure (found in review). One alias table (priors.FAMILY_ALIASES) now
    resolves every prior and the fitted factor the same way."""
    from accelkit.core import Cluster, Recipe, Workload
    from accelkit.hardware import get_device
    from accelkit.models import get_preset
    from accelkit.plan import PlanOptions, make_context
    from accelkit.plan.priors import family

    gh200, h100 = get_device("gh200"), get_device("h100")
    assert family(gh200) == "H100" and family(get_device("h200")) == "H200"  # GH200 is not H200 either
    for dtype in MATMUL_DTYPES:
        ours, theirs = prior_efficiency(gh200, dtype), prior_efficiency(h100, dtype)
        assert (ours.compute, ours.attention, ours.flash2, ours.assumed) == (
            theirs.compute, theirs.attention, theirs.flash2, theirs.assumed), dtype
    assert "(H100: GH200-96GB has its chip)" in prior_efficiency(gh200, "bf16").sources[0]
    w = Workload(model=get_preset("llama-3.1-8b"), task="infer", recipe=Recipe(precision="bf16"))
    ctx = make_context(w, Cluster(device=gh200, num_devices=1), PlanOptions(use_calibration=False))
    assert ctx.sustained_source == "fitted on the H100 calibration runs"


def test_compare_does_not_rank_gh200_below_h100(capsys):
    code, out, err = _main(capsys, "--model", "llama-3.1-8b", "--task", "infer", "--compare", "h100,gh200", "--json")
    assert code == 0, err
    h100, gh200 = json.loads(out)
    assert gh200["assumed_efficiency"] == {} and gh200["bottleneck"] == h100["bottleneck"] == "compute"
    assert gh200["tokens_per_s_per_device"] >= h100["tokens_per_s_per_device"]
