"""The planner and the engine agree on the KV tokens that fit (issue 31, criterion 4): a tiny engine built on CPU
with a KV budget allocates the blocks `accelkit plan --task infer --kv-cache-memory` predicts for the same
shape, dtype and budget — and the bytes it really allocated are the bytes per token both of them count
(accelkit/core/serving_memory.py), fp8/int8 scales included."""

import json

import pytest

from accelkit.cli.app import main
from accelkit.core.serving_memory import kv_bytes_per_token
from accelkit.serve import LLM
from accelkit.serve.testing import save_tiny_model

BUDGET = 3_000_001  # not a whole number of blocks: the floor and the scratch block both count
BLOCK_SIZE = 16
# GQA (4 query heads on 2 KV heads) and head_dim 32, so the fp8/int8 scales are 2 of every 34 bytes per head
SHAPE = {"hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 256}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("kv-agree") / "m", "tiny-llama", seed=3, **SHAPE)


def _planned(capsys, model_dir, *, precision, kv):
    main(["plan", "--model", str(model_dir / "config.json"), "--task", "infer", "--hardware", "h100",
          "--num-devices", "1", "--precision", precision, "--kv-dtype", kv, "--kv-cache-memory", str(BUDGET),
          "--block-size", str(BLOCK_SIZE), "--prompt-len", "40", "--output-len", "24", "--json"])
    return json.loads(capsys.readouterr().out)["kv_cache_capacity"]


@pytest.mark.parametrize(("dtype", "precision", "kv"), [("float32", "fp32", "auto"), ("bfloat16", "bf16", "auto"),
                                                        ("float32", "fp32", "fp8"), ("float32", "fp32", "int8")])
def test_plan_predicts_the_kv_blocks_the_engine_allocates(capsys, model_dir, dtype, precision, kv):
    engine = LLM(str(model_dir), dtype=dtype, kv_cache_dtype=kv, kv_cache_memory_bytes=BUDGET, max_model_len=64,
                 block_size=BLOCK_SIZE).engine
    runner = engine.runner
    engine_tokens = engine.block_manager.num_blocks * BLOCK_SIZE
    # what the cache really allocated (every tensor: codes, scales, the scratch block) is the counted bytes per token
    cache = runner.kv_cache
    assert cache.num_bytes == cache.num_blocks * BLOCK_SIZE * runner.kv_bytes_per_token <= BUDGET
    a = engine.model_args
    assert runner.kv_bytes_per_token == kv_bytes_per_token(
        num_layers=a.num_layers, num_kv_heads=2, head_dim=32, kv_cache_dtype=kv, dtype_bytes=runner.dtype.itemsize)

    planned = _planned(capsys, model_dir, precision=precision, kv=kv)
    print(f"{dtype} KV {kv}: engine {engine_tokens} tokens ({engine.block_manager.num_blocks} blocks), planner "
          f"{planned['num_tokens']} tokens ({planned['num_blocks']} blocks), {planned['bytes_per_token']} B/token")
    assert planned["bytes_per_token"] == runner.kv_bytes_per_token
    assert planned["budget_bytes"] == BUDGET and planned["block_size"] == BLOCK_SIZE
    assert abs(planned["num_tokens"] - engine_tokens) <= 0.01 * engine_tokens  # issue 31: within 1%
    assert planned["num_blocks"] == engine.block_manager.num_blocks  # in fact exactly


@pytest.fixture(scope="module")
def arch_dirs(tmp_path_factory):
    """Qwen3 (head_dim 32 ≠ hidden / heads), Qwen3-MoE and Mixtral as transformers saves them (its Qwen3-MoE
    config.json names the experts num_local_experts): the planner reads the same file the engine loads."""
    return {preset: save_tiny_model(tmp_path_factory.mktemp(preset) / "m", preset, seed=4)
            for preset in ("tiny-qwen3", "tiny-qwen3-moe", "tiny-mixtral")}


@pytest.mark.parametrize("preset", ["tiny-qwen3", "tiny-qwen3-moe", "tiny-mixtral"])
@pytest.mark.parametrize(("dtype", "precision", "kv"), [("float32", "fp32", "auto"), ("bfloat16", "bf16", "fp8")])
def test_plan_and_engine_agree_on_the_new_architectures(capsys, arch_dirs, preset, dtype, precision, kv):
    model_dir = arch_dirs[preset]
    engine = LLM(str(model_dir), dtype=dtype, kv_cache_dtype=kv, kv_cache_memory_bytes=BUDGET, max_model_len=64,
                 block_size=BLOCK_SIZE).engine
    engine_tokens = engine.block_manager.num_blocks * BLOCK_SIZE
    planned = _planned(capsys, model_dir, precision=precision, kv=kv)
    print(f"{preset} {dtype} KV {kv}: engine {engine_tokens} tokens, planner {planned['num_tokens']} tokens, "
          f"{planned['bytes_per_token']} B/token")
    assert planned["bytes_per_token"] == engine.runner.kv_bytes_per_token
    assert engine.runner.kv_cache.num_bytes == engine.runner.kv_cache.num_blocks * BLOCK_SIZE * planned["bytes_per_token"]
    assert abs(planned["num_tokens"] - engine_tokens) <= 0.01 * engine_tokens  # issue 31: within 1%
