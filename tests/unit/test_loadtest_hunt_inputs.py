"""`accelkit loadtest` inputs a user hits: an --slo key given twice (the last silently won), a JSON Lines file that
json.dumps(ensure_ascii=False) wrote with a U+2028 in a prompt (str.splitlines() cut the line there: 'not valid JSON'),
a dataset file with a UTF-8 BOM, a dataset path that is a directory ('no such file'), and a sweep's --percentiles,
which were stored but never printed (the curve's columns are p50 and p99 only)."""

from __future__ import annotations

import json

import pytest

from accelkit.core import UserError
from accelkit.loadtest.config import SLO
from accelkit.loadtest.datasets import jsonl_requests, load_dataset, parse_dataset
from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
from tests.conftest import main_in_process


def test_an_slo_given_twice_is_refused_naming_both_values():
    with pytest.raises(ValueError, match=r"--slo gives ttft_ms twice \(ttft_ms=1 and ttft_ms=2000\)"):
        SLO.parse("ttft_ms=1,tpot_ms=5,ttft_ms=2000")
    assert SLO.parse("ttft_ms=1,tpot_ms=5") == SLO(ttft_ms=1.0, tpot_ms=5.0)


def test_an_slo_given_twice_is_one_line_and_exit_2(capsys):
    code, out, err = main_in_process(capsys, "loadtest", "--base-url", "http://127.0.0.1:9", "--model", "m",
                                     "--slo", "ttft_ms=1,ttft_ms=2000")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["error: --slo gives ttft_ms twice (ttft_ms=1 and ttft_ms=2000); give each SLO "
                                        "once, e.g. --slo ttft_ms=200,tpot_ms=50"]


def test_jsonl_lines_end_at_newlines_only(tmp_path):
    prompts = ["first\u2028second", "caf\u00e9\x85 next", "para\u2029graph", "windows line"]
    path = tmp_path / "prompts.jsonl"
    body = "".join(json.dumps({"prompt": p}, ensure_ascii=False) + "\n" for p in prompts[:3])
    path.write_bytes((body + json.dumps({"prompt": prompts[3], "output_len": 7}) + "\r\n\r\n").encode())
    requests = jsonl_requests(path, default_output_len=3)
    assert [r.prompt for r in requests] == prompts
    assert [r.output_len for r in requests] == [3, 3, 3, 7]


def test_a_bad_jsonl_line_is_still_named_by_its_number(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "a\u2028b"}\n{"prompt": "ok"}\nnot json\n', encoding="utf-8")
    with pytest.raises(UserError, match="line 3: not valid JSON"):
        jsonl_requests(path, default_output_len=3)


def test_dataset_files_with_a_bom_are_read(tmp_path):
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes("\ufeff".encode() + b'{"prompt": "hello there"}\n')
    sharegpt = tmp_path / "bom.json"
    turns = [{"from": "human", "value": "tell me a story about it"}, {"from": "gpt", "value": "once upon a time, far"}]
    sharegpt.write_bytes("\ufeff".encode() + json.dumps([{"conversations": turns}]).encode())
    assert [r.prompt for r in load_dataset(f"jsonl:{jsonl}", 1)[0]] == ["hello there"]
    assert [r.prompt for r in load_dataset(f"sharegpt:{sharegpt}", 1)[0]] == ["tell me a story about it"]


def test_a_dataset_path_that_is_a_directory_says_so(tmp_path):
    with pytest.raises(UserError, match=f"--dataset jsonl:{tmp_path}: '{tmp_path}' is a directory; give the jsonl "
                                        "file in it"):
        parse_dataset(f"jsonl:{tmp_path}")
    with pytest.raises(UserError, match="no such file"):
        parse_dataset(f"sharegpt:{tmp_path / 'missing.json'}")


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.002, itl_s=0.001)) as fake:
        yield fake


def _sweep(capsys, server, *flags: str) -> str:
    code, out, err = main_in_process(capsys, "loadtest", "--base-url", server.base_url, "--model", "fake-model",
                                     "--num-prompts", "3", "--random-input-len", "4", "--random-output-len", "3",
                                     "--warmup", "0", "--no-save", "--no-progress", *flags)
    assert code == 0, err
    return out


def test_a_sweep_prints_the_percentiles_asked_for(capsys, server):
    out = _sweep(capsys, server, "--sweep-rates", "200,inf", "--percentiles", "95,99.9")
    table = out[out.index("Latency (ms) per rate, --percentiles"):]
    header = next(line for line in table.splitlines() if "rate req/s" in line)
    assert "p95" in header and "p99.9" in header
    rows = [line for line in table.splitlines() if line.startswith("│")]
    assert len(rows) == 8  # 2 rates × TTFT, TPOT, ITL, E2E
    assert "p99.9 needs ≥ 4603 samples" in out


def test_a_sweep_with_the_default_percentiles_prints_the_curve_alone(capsys, server):
    out = _sweep(capsys, server, "--sweep-rates", "200,inf")
    assert "Latency-throughput curve" in out and "per rate, --percentiles" not in out


def test_a_percentile_given_twice_is_one_column(capsys, server):
    out = _sweep(capsys, server, "--percentiles", "50,50")
    header = next(line for line in out.splitlines() if "median" in line)
    assert header.count("p50") == 1
