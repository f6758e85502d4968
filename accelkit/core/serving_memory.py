"""What a served language model occupies — its KV cache, how much of it fits, its weights: the one home of this
arithmetic.

The serving engine (``accelkit/serve``: its preflight and its model runner) and the planner
(``accelkit plan --task infer``) both size the KV cache with these functions, so the tokens the planner says
fit are the tokens the engine allocates. Pure Python: the planner never imports torch.

Storage, per token and layer (``accelkit/serve/kv_cache.py`` is the layout this counts):

- ``auto``: K and V in the model dtype, ``2 · kv_heads · head_dim · dtype_bytes``;
- ``fp8`` (e4m3) and ``int8``: 1-byte codes plus one float16 scale per token, KV head and tensor (K or V),
  ``2 · kv_heads · (head_dim + 2)`` — 0.52× of bf16 at head_dim 64, 0.51× at 128, not the 0.5× a count of
  one byte per element gives. vLLM's and TensorRT-LLM's fp8 caches keep their scales per layer tensor (or per
  head) instead, outside the per-token storage: ``kv_scales="per-tensor"`` counts that layout, 1 byte per element
  (the planner uses it to model those engines).

The budget is the engine's rule: ``kv_cache_memory_bytes`` when given; else on a GPU
``gpu_memory_utilization`` × the device memory still free once the weights are loaded (the rest is left for
activations and the allocator); else, on a CPU, 1 GiB. The budget is cut into blocks of ``block_size``
tokens, one of which is kept as the scratch block padded rows write to.

Weights: ``weight_bytes_per_param`` by dtype or quantization scheme, which the planner multiplies by a device's
parameters and the engine's preflight by the checkpoint's.
"""

from __future__ import annotations

from typing import Literal, get_args

from accelkit.core.units import GiB

KVCacheDtype = Literal["auto", "fp8", "int8"]
#: where a quantized cache keeps its scales: per token and KV head, in the cache (accelkit serve), or one per layer
#: tensor (or head) outside it (vLLM, TensorRT-LLM)
KVScales = Literal["per-token-head", "per-tensor"]
#: bytes of one quantized-cache scale: float16, one per token, KV head and tensor (K or V)
KV_SCALE_BYTES = 2
#: bytes of one quantized code (fp8 e4m3 or int8)
KV_CODE_BYTES = 1
#: the KV budget on a CPU when ``kv_cache_memory_bytes`` is not given
CPU_KV_BUDGET_BYTES = 1 * GiB
#: the engine's defaults (``EngineConfig``), which the planner assumes too
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
DEFAULT_BLOCK_SIZE = 16
#: blocks of the budget kept out of the scheduler's hands (padding rows of a captured decode batch write there)
SCRATCH_BLOCKS = 1


def kv_bytes_per_token(*, num_layers: int, num_kv_heads: int, head_dim: int, kv_cache_dtype: KVCacheDtype,
                       dtype_bytes: int, kv_scales: KVScales = "per-token-head") -> int:
    """K and V bytes one token occupies over ``num_layers`` layers, scales included, exactly as the engine's
    cache stores them: ``auto`` ``2·L·H·D·dtype_bytes`` (``dtype_bytes``: the model dtype's element size);
    ``fp8``/``int8`` ``2·L·H·(D·1 + 2)`` (a float16 scale per token and KV head beside the 1-byte codes;
    ``dtype_bytes`` does not enter), or ``2·L·H·D`` with ``kv_scales="per-tensor"`` (vLLM's layout).
    ``num_kv_heads``: the heads this device holds (per tensor-parallel rank)."""
    for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim),
                        ("dtype_bytes", dtype_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "num_layers" else 1):
            raise ValueError(f"{name}={value!r} is not valid; expected a positive integer")
    if kv_cache_dtype == "auto":
        per_head = head_dim * dtype_bytes
    elif kv_cache_dtype in ("fp8", "int8"):
        if kv_scales not in get_args(KVScales):
            raise ValueError(f"kv_scales={kv_scales!r} is not valid; expected one of {', '.join(get_args(KVScales))}")
        per_head = head_dim * KV_CODE_BYTES + (KV_SCALE_BYTES if kv_scales == "per-token-head" else 0)
    else:
        raise ValueError(f"kv_cache_dtype={kv_cache_dtype!r} is not valid; expected one of "
                         f"{', '.join(get_args(KVCacheDtype))}")
    return 2 * num_layers * num_kv_heads * per_head


def kv_budget_bytes(*, kv_cache_memory_bytes: int | None, device_free_bytes: int | None,
                    gpu_memory_utilization: float) -> int:
    """Bytes the engine gives its KV cache: ``kv_cache_memory_bytes`` when set; else on a GPU
    ``int(device_free_bytes × gpu_memory_utilization)``, ``device_free_bytes`` being what is free once the weights
    (and RoPE tables) are loaded; else — a CPU, ``device_free_bytes`` None — :data:`CPU_KV_BUDGET_BYTES`."""
    if kv_cache_memory_bytes is not None:
        return kv_cache_memory_bytes
    if device_free_bytes is None:
        return CPU_KV_BUDGET_BYTES
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(
            f"gpu_memory_utilization={gpu_memory_utilization!r} is not valid; expected a fraction in (0, 1]")
    return int(max(device_free_bytes, 0) * gpu_memory_utilization)


def kv_cache_num_blocks(*, budget_bytes: int, bytes_per_token: int, block_size: int) -> int:
    """Blocks of ``block_size`` tokens the scheduler may hand out from ``budget_bytes``: the budget's whole blocks
    less the scratch block. Below one usable block the answer is 0 (the engine refuses such a budget)."""
    if bytes_per_token < 1 or block_size < 1:
        raise ValueError(f"bytes_per_token={bytes_per_token} and block_size={block_size} must be positive")
    return max(budget_bytes // (bytes_per_token * block_size) - SCRATCH_BLOCKS, 0)


def min_kv_cache_bytes(*, max_model_len: int, block_size: int, bytes_per_token: int) -> int:
    """The smallest budget the engine accepts: the blocks of one full ``max_model_len`` context plus the scratch
    block (``kv_cache_num_blocks`` of it times ``block_size`` is at least ``max_model_len``)."""
    return (-(-max_model_len // block_size) + SCRATCH_BLOCKS) * block_size * bytes_per_token


#: weight bytes per parameter by dtype or quantization scheme, under the planner's names (``--precision``,
#: ``Recipe.quantization``); int4: 0.5 + a bf16 scale and zero point per group of 128 = 4/128
WEIGHT_BYTES_PER_PARAM: dict[str, float] = {
    "fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0,
    "int8-weight": 1.0, "int8-dynamic": 1.0, "fp8-weight": 1.0, "fp8-dynamic": 1.0, "int4-weight": 0.5 + 4 / 128,
}
#: the engine's ``dtype`` names → the scheme they store weights in
ENGINE_DTYPE_SCHEMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def weight_bytes_per_param(scheme: str) -> float:
    """Bytes one weight takes when served under ``scheme`` (a key of :data:`WEIGHT_BYTES_PER_PARAM`)."""
    try:
        return WEIGHT_BYTES_PER_PARAM[scheme]
    except KeyError:
        raise ValueError(f"weight scheme {scheme!r} is not valid; expected one of "
                         f"{', '.join(WEIGHT_BYTES_PER_PARAM)}") from None
