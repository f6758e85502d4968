"""`accelkit serve` with the flags a vLLM user types: `--dtype half`/`float` (vLLM's names, refused before), the
`VLLM_API_KEY` environment variable (ignored before: the server ran without a key), `--no-chunked-prefill` with a
step budget below the context (refused only after the weights and the KV cache were loaded), and
`--gpu-memory-utilization` where it has no effect (ignored without a word). Each is run in process, stopped before the
slow part by a port another socket holds."""

from __future__ import annotations

import pytest

from accelkit.cli.serve import _dtype, _ignored_note, _weights_said
from accelkit.core import UserError
from accelkit.serve.config import EngineConfig
from accelkit.serve.testing import save_tiny_model
from tests.conftest import serve_in_process


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("servecli") / "tiny")  # max_position_embeddings 2048


def _serve(capsys, model_dir, port, *flags):
    return serve_in_process(capsys, "--model", str(model_dir), "--port", str(port), *flags)


def test_vllm_dtype_names_half_and_float_are_float16_and_float32(capsys, model_dir, busy_port):
    assert (_dtype("half"), _dtype("float"), _dtype("BFloat16"), _dtype("auto")) == ("float16", "float32",
                                                                                   "bfloat16", "auto")
    code, lines = _serve(capsys, model_dir, busy_port, "--dtype", "half")
    assert code == 2 and len(lines) == 1 and str(busy_port) in lines[0] and "dtype" not in lines[0], lines


def test_an_unknown_dtype_is_one_line_naming_it_and_the_choices(capsys, model_dir, busy_port):
    code, lines = _serve(capsys, model_dir, busy_port, "--dtype", "fp16")
    assert code == 2 and len(lines) == 1, lines
    assert "--dtype 'fp16' is not a dtype" in lines[0] and "float16" in lines[0] and "half" in lines[0]
    with pytest.raises(UserError, match="--dtype 'int8'"):
        _dtype("int8")


def test_vllm_api_key_from_the_environment_is_read(capsys, monkeypatch, model_dir, busy_port):
    monkeypatch.delenv("ACCELKIT_API_KEY", raising=False)
    monkeypatch.setenv("VLLM_API_KEY", "secret\n")  # refused for its newline: proof that it was read
    code, lines = _serve(capsys, model_dir, busy_port)
    assert code == 2 and len(lines) == 1 and "VLLM_API_KEY" in lines[0] and "whitespace" in lines[0], lines
    assert "secret" not in lines[0]


@pytest.mark.parametrize(("flags", "context"), [((), "the model's context of 2048 tokens"),
                                                (("--max-model-len", "64"), "--max-model-len 64")])
def test_no_chunked_prefill_with_a_small_step_budget_is_refused_before_loading(capsys, model_dir, busy_port,
                                                                               flags, context):
    code, lines = _serve(capsys, model_dir, busy_port, "--no-chunked-prefill", "--max-num-batched-tokens", "16",
                         *flags)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: --max-num-batched-tokens 16 is below {context}"), lines
    assert "--no-chunked-prefill" in lines[0] and "serve:" not in lines[0]


def test_a_budget_that_holds_the_context_passes_without_chunked_prefill(capsys, model_dir, busy_port):
    code, lines = _serve(capsys, model_dir, busy_port, "--no-chunked-prefill", "--max-num-batched-tokens", "64",
                         "--max-model-len", "64")
    assert code == 2 and len(lines) == 1 and str(busy_port) in lines[0], lines


def test_gpu_memory_utilization_where_it_does_nothing_is_said():
    config = EngineConfig(model="m", gpu_memory_utilization=0.5)
    assert "not used on cpu" in (_ignored_note("cpu", config) or "")
    assert _ignored_note("cuda", config) is None
    assert _ignored_note("cpu", EngineConfig(model="m")) is None  # not given: nothing to say
    both = EngineConfig(model="m", gpu_memory_utilization=0.5, kv_cache_memory_bytes=2**30)
    assert "--kv-cache-memory sets the KV budget" in (_ignored_note("cuda", both) or "")


def test_the_ready_line_names_the_device_dtype_and_quantization():
    assert _weights_said("cpu", "float16", None) == "cpu, float16"
    assert _weights_said("cuda:0", "bfloat16", "fp8 weights quantized at load") == (
        "cuda:0, bfloat16, fp8 weights quantized at load")
