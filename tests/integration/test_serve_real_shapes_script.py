"""benchmarks/serve_real_shapes.py (scripts/gpu_check.sh's serve_qwen3_moe and serve_fp8_checkpoint parts) on a CPU
with ``--tiny`` shapes: the checkpoints it writes load, the FP8 run holds the checkpoint's bytes, and the document
the GPU summary reads is complete. Its numbers are only measured on a GPU."""

import importlib.util
import json

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("serve_real_shapes", REPO / "benchmarks" / "serve_real_shapes.py")
serve_real_shapes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serve_real_shapes)


@pytest.mark.parametrize(("model", "runs"), [("llama-fp8", ["fp8-checkpoint", "bf16-dequantized"]),
                                             ("qwen3-moe", ["fp8-online", "bf16"])])
def test_tiny_run_writes_the_document_the_summary_reads(model, runs, tmp_path):
    out = tmp_path / "doc.json"
    assert serve_real_shapes.main(["--model", model, "--tiny", "--device", "cpu", "--requests", "1",
                                   "--max-tokens", "4", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert list(doc["runs"]) == runs
    fp8, bf16 = (doc["runs"][name] for name in runs)
    assert fp8["fp8_layers"] > 0 and fp8["fp8_layers_scaled_mm"] == 0  # a CPU dequantizes
    assert bf16["fp8_layers"] == 0 and bf16["weight_bytes"] == bf16["checkpoint_bytes"]
    if model == "llama-fp8":
        assert fp8["weight_bytes"] == fp8["checkpoint_bytes"] < bf16["weight_bytes"]
    else:  # online: a bf16 checkpoint held in FP8
        assert fp8["weight_bytes"] < 0.75 * bf16["weight_bytes"]
    assert 0.0 <= doc["fp8_vs_bf16"]["greedy_token_agreement"] <= 1.0
    assert doc["fp8_vs_bf16"]["throughput_ratio"] > 0
