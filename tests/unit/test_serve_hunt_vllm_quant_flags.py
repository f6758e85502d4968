"""`vllm serve` command lines' quantization and context flags on `accelkit serve` (found in the hunt):

- ``--quantization gptq`` (``-q``; ``gptq_marlin``, ``compressed-tensors``, ``modelopt`` …) beside a checkpoint of that
  format was refused ("'gptq' is not one of 'fp8'") though the checkpoint is served from its own config: the name of
  the checkpoint's own format is accepted, another one (or a checkpoint format on a 16-bit checkpoint) refused in one
  line saying what works;
- ``--kv-cache-dtype fp8_e4m3`` (vLLM's spelling of accelkit's fp8 cache, e4m3 codes) was refused; ``fp8_e5m2`` is
  refused naming what is stored;
- ``--max-model-len auto`` / ``-1`` refused a context the KV budget cannot hold, where vLLM shrinks it to fit: with a
  budget known before the weights load (``--kv-cache-memory``, a CPU's default) it is the longest context the budget
  holds, counted as the engine counts its blocks.

The directories hold config.json and safetensors headers only: every check here runs before the weights load, and a
busy port (bound after them) says that the command line was accepted."""

from __future__ import annotations

import pytest

from accelkit.cli.serve import _fit_context, _kv_cache_dtype
from accelkit.core import UserError
from accelkit.core.serving_memory import kv_bytes_per_token, kv_cache_num_blocks
from accelkit.serve import preflight
from accelkit.serve.config import EngineConfig
from tests.conftest import serve_in_process
from tests.unit.quant_checkpoints import CONFIG as BASE_CONFIG
from tests.unit.quant_checkpoints import one_layer_checkpoint

CONFIG = {**BASE_CONFIG, "torch_dtype": "float32"}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 8, "desc_act": False, "sym": True}
CT_FP8 = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
    "targets": ["Linear"], "weights": {"type": "float", "num_bits": 8, "strategy": "tensor", "symmetric": True}}}}


def _checkpoint(path, quant=None):
    """A one-layer Llama: 16-bit, or stored as ``quant`` says (GPTQ's qweight/qzeros/scales, or FP8 codes)."""
    layout = "gptq" if quant is GPTQ else "fp8" if quant is CT_FP8 else "16-bit"
    return one_layer_checkpoint(path, layout, CONFIG if quant is None else {**CONFIG, "quantization_config": quant},
                                group_size=8)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm_quant_flags")
    return {"16-bit": _checkpoint(root / "m16"), "gptq": _checkpoint(root / "gptq", GPTQ),
            "compressed-tensors": _checkpoint(root / "ct", CT_FP8)}


def _serve(capsys, *args):
    code, lines = serve_in_process(capsys, *args)
    assert code == 2 and len(lines) == 1, (code, lines)
    return lines[0]


def _accepted(line, port):
    return str(port) in line  # the bind, after every check of the command line, says the port is busy


@pytest.mark.parametrize(("checkpoint", "flag"), [
    ("gptq", ("--quantization", "gptq")), ("gptq", ("--quantization", "gptq_marlin")), ("gptq", ("-q", "GPTQ")),
    ("compressed-tensors", ("--quantization", "compressed-tensors")), ("16-bit", ("-q", "fp8"))])
def test_the_checkpoints_own_quantization_is_accepted(capsys, dirs, busy_port, checkpoint, flag):
    line = _serve(capsys, str(dirs[checkpoint]), *flag, "--port", str(busy_port))
    assert _accepted(line, busy_port), line


@pytest.mark.parametrize(("checkpoint", "name", "said"), [
    ("gptq", "awq_marlin", "names the awq format, but {d}/config.json describes a gptq checkpoint (gptq int4"),
    ("gptq", "fp8", "--quantization fp8 quantizes a 16-bit checkpoint at load, but {d}/config.json describes a "
     "quantized one (gptq int4"),
    ("compressed-tensors", "modelopt", "give --quantization compressed-tensors"),
    ("16-bit", "gptq", "{d}/config.json has no quantization_config (16-bit weights), and accelkit quantizes at load "
     "to fp8 only: give --quantization fp8"),
    ("16-bit", "bitsandbytes", "--quantization 'bitsandbytes' is not a quantization accelkit serves; give fp8")])
def test_another_quantization_than_the_checkpoints_is_one_line(capsys, dirs, busy_port, checkpoint, name, said):
    line = _serve(capsys, str(dirs[checkpoint]), "--quantization", name, "--port", str(busy_port))
    assert line.startswith("error: ") and said.format(d=dirs[checkpoint]) in line, line


def test_kv_cache_dtype_takes_vllms_fp8_e4m3_and_refuses_e5m2(capsys, dirs, busy_port):
    assert (_kv_cache_dtype("fp8_e4m3"), _kv_cache_dtype("FP8"), _kv_cache_dtype("auto")) == ("fp8", "fp8", "auto")
    line = _serve(capsys, str(dirs["16-bit"]), "--kv-cache-dtype", "fp8_e4m3", "--port", str(busy_port))
    assert _accepted(line, busy_port), line
    line = _serve(capsys, str(dirs["16-bit"]), "--kv-cache-dtype", "fp8_e5m2", "--port", str(busy_port))
    assert "stores e4m3 codes" in line and "give fp8 (= fp8_e4m3), int8 or auto" in line, line
    with pytest.raises(UserError, match="'bf16' is not a KV cache dtype; give one of auto, fp8, int8"):
        _kv_cache_dtype("bf16")


# the model: 1 layer, 1 KV head of 8 dims, float32: 64 bytes of K/V a token; its context is 64 tokens
PER_TOKEN = 64


@pytest.mark.parametrize(("budget", "block_size", "context"), [
    (4 * 16 * PER_TOKEN, 16, 48),  # 4 blocks, one kept for padding: 3 blocks
    (4 * 16 * PER_TOKEN + 16 * PER_TOKEN - 1, 16, 48),  # not quite a fifth block
    (100 * 16 * PER_TOKEN, 16, 64),  # room for more: the model's own context
    (7 * 5 * PER_TOKEN, 5, 30)])
def test_auto_context_is_the_longest_the_kv_budget_holds_as_the_engine_counts(dirs, budget, block_size, context):
    checked = preflight.check_model_dir(dirs["16-bit"], None)
    config = EngineConfig(model=str(dirs["16-bit"]), kv_cache_memory_bytes=budget, block_size=block_size)
    fitted, note = _fit_context(config, checked, "cuda:0")  # the budget given: the same on any device
    assert (fitted.max_model_len or checked.max_model_len) == context
    # the engine's own count of the same budget (the model runner's): it holds the context, and not one block more
    a = checked.args
    per_token = kv_bytes_per_token(num_layers=a.num_layers, num_kv_heads=a.num_kv_heads, head_dim=a.head_dim,
                                   kv_cache_dtype="auto", dtype_bytes=4)
    assert per_token == PER_TOKEN
    held = kv_cache_num_blocks(budget_bytes=budget, bytes_per_token=per_token, block_size=block_size) * block_size
    assert context == min(held, 64)
    if context < 64:
        assert note is not None and f"context {context} tokens, the most --kv-cache-memory" in note
        assert "below the model's 64 (max_position_embeddings)" in note
    else:
        assert note is None and fitted.max_model_len is None


def test_auto_context_on_a_cpu_fits_its_default_budget_and_on_a_gpu_says_why_not(dirs):
    checked = preflight.check_model_dir(dirs["16-bit"], None)
    config = EngineConfig(model=str(dirs["16-bit"]), block_size=16)
    assert _fit_context(config, checked, "cpu") == (config, None)  # 1 GiB holds 64 tokens
    same, note = _fit_context(config, checked, "cuda:0")
    assert same is config and "known only once the weights are loaded; give --kv-cache-memory" in (note or "")
    with pytest.raises(UserError, match=r"--max-model-len auto: --kv-cache-memory 1\.00 KiB holds no context.*at "
                                        r"least 2\.00 KiB"):
        _fit_context(EngineConfig(model=str(dirs["16-bit"]), kv_cache_memory_bytes=1024), checked, "cpu")


@pytest.mark.parametrize("auto", ["auto", "-1"])
def test_auto_context_on_the_command_line(capsys, dirs, busy_port, auto):
    base = (str(dirs["16-bit"]), "--max-model-len", auto, "--kv-cache-memory", str(4 * 16 * PER_TOKEN),
            "--no-chunked-prefill", "--port", str(busy_port))
    # the fitted context of 48 tokens fits a step of 48: accepted (the model's 64 would not)
    assert _accepted(_serve(capsys, *base, "--max-num-batched-tokens", "48"), busy_port)
    line = _serve(capsys, *base, "--max-num-batched-tokens", "40")
    assert "40 is below --max-model-len auto's context of 48 tokens (what the KV budget holds)" in line, line
    # a number is not fitted (the engine refuses it where the budget cannot hold it, as before)
    line = _serve(capsys, *base[:2], "64", *base[3:], "--max-num-batched-tokens", "48")
    assert "48 is below --max-model-len 64" in line, line


def test_the_engine_config_takes_every_name_the_flag_takes():
    """EngineConfig.quantization's choices are the names quant.config checks (LLM(quantization="gptq") as the CLI)."""
    from typing import get_args

    from accelkit.serve.config import QuantizationName
    from accelkit.serve.quant.config import QUANTIZATION_NAMES

    assert set(get_args(QuantizationName)) == set(QUANTIZATION_NAMES)
