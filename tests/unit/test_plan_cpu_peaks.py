"""`--hardware cpu` takes each dtype's newest matmul peak across this CPU's probes: a probe covers only the dtypes it
was asked for (the bench's quick fp16 probe has fp16 alone), so the newest probe alone cannot describe the CPU. A
dtype no probe measured is an error that names the command measuring it."""

import pytest

from accelkit.core import Cluster, Measurement, Recipe, UserError, Workload
from accelkit.hardware.detect import this_cpu
from accelkit.models import get_preset
from accelkit.plan import make_context, resolve_hardware
from accelkit.results import ResultStore

CPU = this_cpu()  # the planner reads the probes of the CPU it runs on


def _cpu_probe(tflops: dict[str, float], *, gbps: float = 20.0, hardware: str = CPU, fp32_attention: bool = True):
    matmul = {dt: {"tflops": tf, "size": 512} for dt, tf in tflops.items()}
    details = {"device": "cpu", "catalog_name": None, "quick": True, "matmul": matmul,
               "bandwidth": {"gbps": gbps, "fraction_of_peak": None},
               "elementwise": {"gbps": gbps * 0.8, "fraction_of_peak": 0.8,
                               "reference": "this probe's copy bandwidth"},
               # hw probe's CPU attention figure is a fraction of the same probe's fp32 matmul: none without one
               "attention": {"tflops": 0.01, "shape": {"seq": 512, "head_dim": 64},
                             "fraction_at_long_sequence": 0.3 if fp32_attention else None}}
    return Measurement(kind="probe", name="hw probe", hardware=hardware, details=details)


def _store(*probes):
    with ResultStore() as store:
        return [store.add(p) for p in probes]


def _workload(precision: str) -> Workload:
    return Workload(model=get_preset("tiny-llama"), task="train", seq_len=128,
                    recipe=Recipe(precision=precision, micro_batch=1))


def _ctx(precision: str):
    return make_context(_workload(precision), Cluster(device=resolve_hardware("cpu"), num_devices=1))


def test_a_partial_probe_keeps_the_other_dtypes_of_an_older_probe():
    full, quick = _store(_cpu_probe({"fp32": 1.0, "bf16": 2.0}, gbps=10.0), _cpu_probe({"fp16": 3.0}, gbps=12.0,
                                                                                       fp32_attention=False))
    device = resolve_hardware("cpu")
    assert device.peak_flops == {"fp16": 3.0e12, "fp32": 1.0e12, "bf16": 2.0e12}
    assert device.memory_bandwidth_bytes_per_s == 12.0e9  # the newest probe's copy
    for precision, tflops, result_id in (("bf16", 2.0, full), ("fp32", 1.0, full), ("fp16", 3.0, quick)):
        ctx = _ctx(precision)
        assert ctx.peak == tflops * 1e12
        peak_line = next(a for a in ctx.assumptions if a.startswith("peak:"))
        # the plan says which probe each peak came from
        assert f"{precision} matmul from result {result_id}," in peak_line
        assert f"copy bandwidth from result {quick}," in peak_line
    # the fp16-only probe has no attention figure: the older probe's is kept, not the assumed prior
    text = "\n".join(_ctx("bf16").assumptions)
    assert f"causal attention fwd+bwd (seq 512, head dim 64, ÷ the causal block factor; result {full}," in text
    assert "ASSUMED" not in text.split("attention efficiency")[1].split("\n")[0]


def test_the_newest_figure_of_a_dtype_wins():
    _, newer = _store(_cpu_probe({"fp32": 1.0, "bf16": 2.0}), _cpu_probe({"bf16": 2.5}))
    ctx = _ctx("bf16")
    assert ctx.peak == 2.5e12
    assert f"bf16 matmul from result {newer}," in next(a for a in ctx.assumptions if a.startswith("peak:"))


def test_another_cpus_probes_are_not_mixed_in():
    _store(_cpu_probe({"bf16": 2.0}, hardware="cpu: Some Other CPU"), _cpu_probe({"fp32": 1.0}))
    assert resolve_hardware("cpu").peak_flops == {"fp32": 1.0e12}


def test_a_dtype_no_probe_measured_names_the_probe_that_measures_it():
    _store(_cpu_probe({"fp16": 3.0}))
    with pytest.raises(UserError) as info:
        _ctx("bf16")
    message = str(info.value)
    assert "no stored `accelkit hw probe` of this CPU measured a bf16 matmul (measured: fp16)" in message
    assert "run `accelkit hw probe --device cpu --dtype bf16`" in message
    assert "catalog" not in message and "choose another" not in message


def test_a_dtype_a_cpu_cannot_probe_says_to_choose_another_precision():
    _store(_cpu_probe({"fp32": 1.0}))
    with pytest.raises(UserError, match="measures no fp8 matmul on a CPU .*; choose another --precision"):
        _ctx("fp8")


def test_the_cli_error_is_one_line_exit_2(cli):
    _store(_cpu_probe({"fp16": 3.0}))
    proc = cli("plan", "--model", "tiny-llama", "--hardware", "cpu", "--precision", "fp32")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {CPU}: no stored `accelkit hw probe` of this CPU measured a fp32 matmul (measured: fp16); run "
        "`accelkit hw probe --device cpu --dtype fp32`, then plan again"]
