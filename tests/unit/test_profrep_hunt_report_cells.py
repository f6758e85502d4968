"""`accelkit report`'s runs table writes its figures as the bench's terminal table does (docs/bench.md): a tiny model
on a CPU runs at 0.0024 of the planner's figure, which the report's meas/pred cell showed as '0.00' (the bench table:
'0.0024'), and a 20 KiB peak as '0.0 MiB' (the bench table: '20.00 KiB'). And `report --out FILE/report.html`, where
FILE is a file, said the directory FILE 'does not exist'."""

from __future__ import annotations

import pytest

from accelkit.cli.report import check_out_path
from accelkit.core import UserError, summarize
from accelkit.core.bench_result import BenchResult, MemoryUse, Prediction, Throughput
from accelkit.report.html import BenchRow, _table_rows


def _row(ratio: float, peak: int) -> BenchRow:
    result = BenchResult(name="fp32", step="forward", latency_s=summarize([0.001, 0.002]),
                         throughput=Throughput(value=72.4, unit="samples/s"), memory_bytes=MemoryUse(peak=peak),
                         predicted=Prediction(throughput=72.4 / ratio, unit="samples/s", ratio=ratio))
    return BenchRow(id=1, run_id="r", label="bert tiny", hardware="cpu", created_at="t", result=result, samples={})


def test_small_ratio_and_memory_read_as_the_bench_table_writes_them():
    (cells,) = _table_rows([_row(0.0024, 20 * 1024)])
    assert cells["predicted"] == "0.0024"
    assert cells["memory"] == "20.00 KiB"
    (cells,) = _table_rows([_row(1.234, 5 * 2**20)])
    assert cells["predicted"] == "1.23" and cells["memory"] == "5.00 MiB"


def test_out_under_a_file_names_the_file(tmp_path):
    (tmp_path / "results.db").write_text("x")
    for out in (tmp_path / "results.db" / "report.html", tmp_path / "results.db" / "sub" / "report.html"):
        with pytest.raises(UserError, match=r"results\.db is a file, not a directory"):
            check_out_path(out)
    with pytest.raises(UserError, match="does not exist"):
        check_out_path(tmp_path / "nodir" / "report.html")
