"""`hw probe`'s table names what each fraction divides by: on a CPU the kernel probes are fractions of this same
probe's copy bandwidth and fp32 matmul, not of a catalog peak (the column said "catalog peak", so "197% of catalog
peak" read as a measurement error); small figures keep their significant digits (0.005 TFLOP/s printed 0.0)."""

from __future__ import annotations

from accelkit.cli.hw import roofline_rows, sig

STATS = {"cv": 0.05, "n": 20}
HEADER = ("what", "median", "unit", "reference", "of ref", "reference is", "CV", "n")


def _cpu_details():
    return {
        "catalog_name": None,
        "matmul": {"fp32": {"tflops": 0.33, "size": 2048, "catalog_peak_tflops": None, "fraction_of_peak": None,
                            "stats": STATS}},
        "bandwidth": {"gbps": 23.0, "catalog_gbps": None, "fraction_of_peak": None, "stats": STATS},
        "elementwise": {"gbps": 45.3, "reference_gbps": 23.0, "reference": "this probe's copy bandwidth",
                        "fraction_of_peak": 45.3 / 23.0, "stats": STATS},
        "attention": {"tflops": 0.005, "reference_tflops": 0.33, "reference": "this probe's fp32 matmul",
                      "fraction_of_peak": 0.005 / 0.33, "stats": STATS},
    }


def _rows(details):
    return {row[0]: dict(zip(HEADER, row, strict=True)) for row in roofline_rows(details)}


def test_a_cpu_names_its_own_references():
    rows = _rows(_cpu_details())
    ew, attn = rows["elementwise add"], rows["causal attention"]
    assert (ew["reference"], ew["of ref"], ew["reference is"]) == ("23.0", "197%", "this probe's copy bandwidth")
    assert (attn["median"], attn["reference"], attn["of ref"], attn["reference is"]) == (
        "0.00500", "0.330", "1.5%", "this probe's fp32 matmul")
    # no datasheet: the matmul and copy rows have no reference at all
    for what in ("matmul fp32 (2048²)", "copy (read+write)"):
        assert rows[what]["reference"] is None and rows[what]["reference is"] is None


def test_a_catalog_gpu_names_the_datasheet_figure():
    details = _cpu_details() | {
        "catalog_name": "H100-SXM5-80GB",
        "matmul": {"bf16": {"tflops": 700.0, "size": 8192, "catalog_peak_tflops": 989.0, "fraction_of_peak": 700 / 989,
                            "stats": STATS}},
        "bandwidth": {"gbps": 2800.0, "catalog_gbps": 3350.0, "fraction_of_peak": 2800 / 3350, "stats": STATS},
    }
    rows = _rows(details)
    assert rows["matmul bf16 (8192²)"]["reference is"] == "H100-SXM5-80GB dense bf16 peak"
    assert rows["matmul bf16 (8192²)"]["of ref"] == "71%"
    assert (rows["copy (read+write)"]["reference"], rows["copy (read+write)"]["reference is"]) == (
        "3,350", "H100-SXM5-80GB memory bandwidth")


def test_significant_figures():
    assert [sig(v) for v in (0.005, 0.0123, 57.593, 989.0, 1979.4, 0.0)] == [
        "0.00500", "0.0123", "57.6", "989", "1,979", "0"]


def test_the_cli_table_has_no_catalog_peak_column_on_a_cpu(cli):
    proc = cli("hw", "probe", "--quick", "--device", "cpu", "--dtype", "fp32", "--size", "64", "--copy-size", "1MiB",
               "--min-time", "0", "--no-save", env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "catalog peak" not in proc.stdout and "of peak" not in proc.stdout
    assert "this probe's copy bandwidth" in proc.stdout and "this probe's fp32 matmul" in proc.stdout


def test_the_reduced_side_footnote_speaks_the_tables_unit(monkeypatch):
    """Issue 29 item 6: 'fp32 matmul runs at 15.8 GFLOP/s' was printed under a table giving 0.0193 TFLOP/s — one
    unit (the table's), so the two read as the same kind of figure."""
    import re

    from typer.testing import CliRunner

    import accelkit.hardware.probe as probe_module
    from accelkit.cli.app import app

    monkeypatch.setattr(probe_module, "SLOW_CALL_S", 0.0)  # every dtype "too slow": the footnote's path
    result = CliRunner().invoke(app, ["hw", "probe", "--quick", "--device", "cpu", "--dtype", "fp32",
                                      "--copy-size", "1MiB", "--min-time", "0", "--no-save"])
    assert result.exit_code == 0, result.output
    (note,) = [line for line in result.stdout.splitlines() if "so it was probed at" in line]
    assert "GFLOP" not in result.stdout
    match = re.match(r"one 256×256 fp32 matmul ran at ([0-9.e+-]+) TFLOP/s on this CPU", note)
    assert match and 0 < float(match.group(1)) < 1, note  # a CPU's figure in TFLOP/s, as the table row
    assert "TFLOP/s" in next(line for line in result.stdout.splitlines() if "matmul fp32 (256²)" in line)


def test_a_reference_that_was_not_measured_is_said_so():
    """`hw probe --dtype fp16` on a CPU measures no fp32 matmul: the attention row had no reference and said
    nothing of why."""
    details = _cpu_details()
    details["matmul"] = {"fp16": {**details["matmul"]["fp32"], "tflops": 0.1}}
    details["attention"] = {**details["attention"], "reference_tflops": None, "fraction_of_peak": None}
    attn = _rows(details)["causal attention"]
    assert (attn["reference"], attn["of ref"]) == (None, None)
    assert attn["reference is"] == "none: this probe's fp32 matmul not measured (--dtype)"
