"""Ctrl-C (or SIGTERM, turned into it) during `accelkit hw probe`: the matmul dtypes measured before it are printed
— a probe is stored whole, so they cannot be stored — and the command exits 130 (143 for SIGTERM). Before, it said
only "interrupted" and the finished dtypes were gone (found in review)."""

import re

import accelkit.hardware.probe as probe_module
from tests.conftest import main_in_process


def test_an_interrupt_prints_the_dtypes_measured_before_it(capsys, monkeypatch):
    real = probe_module._probe_matmul

    def interrupted_at_bf16(device, dtype, *args, **kwargs):
        if dtype == "bf16":  # Ctrl-C lands while bf16 is measured: fp32 was measured for real
            raise KeyboardInterrupt
        return real(device, dtype, *args, **kwargs)

    monkeypatch.setattr(probe_module, "_probe_matmul", interrupted_at_bf16)
    code, out, err = main_in_process(capsys, "hw", "probe", "--quick", "--device", "cpu", "--dtype", "fp32,bf16",
                                     "--size", "64", "--min-time", "0.05", "--no-save")
    assert code == 130 and out == "", err
    line = err.strip().splitlines()[-1]
    assert re.fullmatch(r"interrupted: measured before it on .+: fp32 [\d.e+-]+ TFLOP/s \(matmul 64×64, CV [\d.]+%\); "
                        r"not measured: bf16, the copy and the kernel probes; nothing was stored \(a probe is stored "
                        r"whole\)", line), line


def test_an_interrupt_before_any_dtype_says_nothing_was_measured(capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(probe_module, "_probe_matmul", interrupted)
    code, _, err = main_in_process(capsys, "hw", "probe", "--quick", "--device", "cpu", "--dtype", "fp32",
                                   "--no-save")
    assert code == 130
    assert err.strip().splitlines()[-1].startswith("interrupted: nothing was measured yet; not measured: fp32, the copy and")


def test_an_interrupt_in_the_kernel_probes_keeps_the_matmul_and_copy_figures(capsys, monkeypatch):
    """The copy and kernel probes take about half a run: an interrupt there said only "interrupted" too."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(probe_module, "probe_kernels", interrupted)
    code, _, err = main_in_process(capsys, "hw", "probe", "--quick", "--device", "cpu", "--dtype", "fp32",
                                   "--size", "64", "--copy-size", "1MiB", "--min-time", "0.05", "--no-save")
    assert code == 130
    line = err.strip().splitlines()[-1]
    assert re.fullmatch(r"interrupted: measured before it on .+: fp32 [\d.e+-]+ TFLOP/s \(matmul 64×64, CV [\d.]+%\), "
                        r"copy [\d.e+-]+ GB/s; not measured: the kernel probes; nothing was stored \(a probe is stored "
                        r"whole\)", line), line
