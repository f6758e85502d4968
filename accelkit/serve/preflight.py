"""Checks before the engine allocates anything: the model directory parses, its config agrees with its
checkpoint, and the weights, RoPE tables and KV cache fit in the memory this machine has free.

Without them a bad directory fails late and loudly: a JSON list as ``config.json`` is an ``AttributeError``,
``vocab_size`` 10¹² a size mismatch deep in ``load_state_dict``, ``num_hidden_layers`` 10⁹ builds a billion
modules, ``max_position_embeddings`` 10¹² asks the allocator for 4 TB of RoPE table, and a KV budget of
100 TiB for 55 TB of zeros. Here each is one ``ValueError`` that names the file or setting and the fix,
raised before a byte is allocated. Only headers are read (safetensors keep their shapes in a JSON header).

Memory checks use lower bounds — what the engine will certainly hold — so they never refuse a model that fits.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from accelkit.core import serving_memory
from accelkit.core.serving_memory import KVCacheDtype
from accelkit.core.units import fmt_bytes
from accelkit.hardware.device import free_memory_bytes
from accelkit.serve.isolation import describe
from accelkit.serve.models.args import (
    MOE_ARCHITECTURES,
    SUPPORTED_ARCHITECTURES,
    ModelArgs,
    config_head_dim,
    unsupported_architectures,
)

_MAX_DIM = 2**31 - 1  # no dimension of a real model comes near; beyond it every tensor index overflows int32
_MAX_HEADER_BYTES = 100 * 2**20  # safetensors' own limit on the JSON header
_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "I16": 2,
                "I8": 1, "U8": 1, "BOOL": 1}
_TORCH_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")


def read_json(path: Path, *, what: str) -> Any:
    """Parse a JSON file; an unreadable, non-UTF-8 or malformed one is a ValueError naming it and the fix."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
            f"{what} must be a UTF-8 JSON file — re-download or re-save it"
        ) from None
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}; {what} must be a readable file") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
            f"fix {what} or re-download it"
        ) from None


def read_config(model_dir: Path) -> dict[str, Any]:
    """``config.json`` as a dict whose size fields are positive integers (ValueError otherwise)."""
    path = model_dir / "config.json"
    if not path.is_file():
        raise ValueError(f"model={str(model_dir)!r} has no config.json; give a Hugging Face-format model directory")
    cfg = read_json(path, what="the model's config.json")
    if not isinstance(cfg, dict):
        raise ValueError(
            f"{path} holds a JSON {type(cfg).__name__}; expected an object of model settings "
            '({"architectures": [...], "hidden_size": ...}) — re-download the model\'s config.json'
        )
    # first: an unsupported model (GPT-2, GPTBigCode …) names its size fields otherwise, and "no 'hidden_size'"
    # would send its user to fix a file that is fine
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not any(a in SUPPORTED_ARCHITECTURES for a in archs):
        raise unsupported_architectures(archs, cfg.get("model_type"), str(path))
    _check_fields(cfg, path)
    modelopt = model_dir / "hf_quant_config.json"
    if "quantization_config" not in cfg and modelopt.is_file():  # ModelOpt's export keeps its scheme there (vLLM reads it)
        data = read_json(modelopt, what="the model's hf_quant_config.json")
        if not isinstance(data, dict):
            raise ValueError(f"{modelopt} holds a JSON {type(data).__name__}; expected ModelOpt's object "
                             '({"quantization": {"quant_algo": ...}})')
        cfg["quantization_config"] = {"quant_method": "modelopt", **data}
    return cfg


def _check_fields(cfg: dict[str, Any], path: Path) -> None:
    """The size fields positive integers in range, the norm and RoPE constants positive numbers, the heads
    dividing evenly (ValueError naming the field and the file)."""
    required = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    optional = ("num_key_value_heads", "head_dim", "sliding_window", "num_local_experts", "num_experts",
                "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_sparse_step")
    for key in (*required, *optional):
        value = cfg.get(key)
        if value is None or (key == "sliding_window" and value == 0):  # transformers writes 0 for "no window" (Qwen2-MoE)
            if key in required:
                raise ValueError(f"{path} has no {key!r}; the engine needs it to build the model")
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_DIM:
            raise ValueError(
                f"{key}={value!r} in {path} is not valid; expected an integer in [1, {_MAX_DIM}] — fix the file "
                "or re-download it"
            )
    max_pos = cfg.get("max_position_embeddings")
    if max_pos is not None and (isinstance(max_pos, bool) or not isinstance(max_pos, int) or max_pos < 2):
        raise ValueError(f"max_position_embeddings={max_pos!r} in {path} is not valid; expected an integer >= 2")
    for key in ("rms_norm_eps", "rope_theta"):
        value = cfg.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise ValueError(f"{key}={value!r} in {path} is not valid; expected a positive number")
    heads, kv_heads = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    if heads % kv_heads:
        raise ValueError(f"num_attention_heads={heads} in {path} is not a multiple of num_key_value_heads={kv_heads}")
    if cfg.get("head_dim") is None and config_head_dim(cfg) * heads != cfg["hidden_size"] and cfg["hidden_size"] % heads:
        raise ValueError(f"hidden_size={cfg['hidden_size']} in {path} is not a multiple of num_attention_heads={heads}")


@dataclass(frozen=True, slots=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    num_bytes: int


def checkpoint_tensors(model_dir: Path) -> dict[str, TensorInfo]:
    """Name → dtype, shape and size of every tensor of the safetensors checkpoint, from the headers only."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        data = read_json(index, what="the checkpoint index")
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ValueError(f"{index} has no weight_map of tensor → file; re-download the checkpoint index")
        files = [model_dir / name for name in sorted(set(weight_map.values()))]
    else:
        files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ValueError(f"model={str(model_dir)!r} has no *.safetensors weights")
    tensors: dict[str, TensorInfo] = {}
    for path in files:
        tensors.update(_header(path))
    return tensors


def _header(path: Path) -> dict[str, TensorInfo]:
    def bad(why: str) -> ValueError:
        return ValueError(f"{path} is not a safetensors file ({why}); re-download or re-save the weights")

    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise bad(f"{size} bytes, shorter than a header")
            (length,) = struct.unpack("<Q", head)
            if length > min(size - 8, _MAX_HEADER_BYTES):
                raise bad(f"its header claims {length} bytes in a {size}-byte file")
            raw = f.read(length)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise bad("its header is not JSON") from None
    if not isinstance(header, dict):
        raise bad("its header is not a JSON object")
    out = {}
    data_bytes = size - 8 - length
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            ok = (dtype in _DTYPE_BYTES and all(isinstance(d, int) and d >= 0 for d in shape)
                  and 0 <= begin <= end <= data_bytes and end - begin == math.prod(shape) * _DTYPE_BYTES[dtype])
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise bad(f"the entry of tensor {name!r} is malformed or points outside the file")
        out[name] = TensorInfo(dtype, shape, end - begin)
    return out


def expected_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Checkpoint name pattern (layer index as ``{i}``) → the shape config.json implies for it."""
    hidden, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = config_head_dim(cfg)
    q, kv = heads * head_dim, kv_heads * head_dim
    layer = "model.layers.{i}."
    return {
        "model.embed_tokens.weight": (vocab, hidden), "lm_head.weight": (vocab, hidden), "model.norm.weight": (hidden,),
        layer + "self_attn.q_proj.weight": (q, hidden), layer + "self_attn.k_proj.weight": (kv, hidden),
        layer + "self_attn.v_proj.weight": (kv, hidden), layer + "self_attn.o_proj.weight": (hidden, q),
        layer + "self_attn.q_proj.bias": (q,), layer + "self_attn.k_proj.bias": (kv,),
        layer + "self_attn.v_proj.bias": (kv,), layer + "self_attn.o_proj.bias": (hidden,),
        layer + "mlp.gate_proj.weight": (inter, hidden), layer + "mlp.up_proj.weight": (inter, hidden),
        layer + "mlp.down_proj.weight": (hidden, inter), layer + "mlp.gate_proj.bias": (inter,),
        layer + "mlp.up_proj.bias": (inter,), layer + "mlp.down_proj.bias": (hidden,),
        layer + "input_layernorm.weight": (hidden,), layer + "post_attention_layernorm.weight": (hidden,),
        layer + "self_attn.q_norm.weight": (head_dim,), layer + "self_attn.k_norm.weight": (head_dim,),
        **_moe_shapes(cfg),
    }


def _moe_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The sparse MLP's tensors (expert index as ``{e}``) for an MoE architecture; none for a dense one."""
    if not any(a in MOE_ARCHITECTURES for a in cfg.get("architectures") or []):
        return {}
    moe = ModelArgs.from_config(cfg).moe
    assert moe is not None
    hidden, f = cfg["hidden_size"], moe.intermediate_size
    mlp = f"model.layers.{{i}}.{moe.checkpoint_prefix}."
    gate, up, down = (mlp + "experts.{e}." + name + ".weight" for name in moe.expert_names)
    shapes: dict[str, tuple[int, ...]] = {
        mlp + "gate.weight": (moe.num_experts, hidden), gate: (f, hidden), up: (f, hidden), down: (hidden, f)}
    shared = moe.shared_expert_intermediate_size
    if shared is not None:
        shapes |= {mlp + "shared_expert.gate_proj.weight": (shared, hidden),
                   mlp + "shared_expert.up_proj.weight": (shared, hidden),
                   mlp + "shared_expert.down_proj.weight": (hidden, shared), mlp + "shared_expert_gate.weight": (1, hidden)}
    return shapes


def check_checkpoint(cfg: dict[str, Any], tensors: dict[str, TensorInfo], model_dir: Path) -> None:
    """The checkpoint's layer count and known tensor shapes are those config.json describes."""
    shapes = expected_shapes(cfg)
    num_layers = cfg["num_hidden_layers"]
    found_layers = {int(m.group(1)) for name in tensors if (m := _LAYER.match(name))}
    num_found = max(found_layers) + 1 if found_layers else 0
    if num_found != num_layers:
        raise ValueError(
            f"num_hidden_layers={num_layers} in {model_dir / 'config.json'} but the checkpoint holds {num_found} "
            "layers: config.json and the weights do not belong together — re-download one of them"
        )
    _check_quantized_without_config(cfg, tensors, model_dir)
    for name, info in tensors.items():
        key = _EXPERT.sub(".experts.{e}.", _LAYER.sub("model.layers.{i}.", name))
        want = shapes.get(key)
        if want is not None and info.shape != want:
            raise ValueError(
                f"config.json in {model_dir} implies {name} of shape {list(want)}, but the checkpoint holds "
                f"{list(info.shape)}: config.json and the weights do not belong together — re-download one of them"
            )


_QUANTIZED_TENSORS = (".qweight", ".qzeros", ".weight_packed", ".weight_scale")  # GPTQ / AWQ, compressed-tensors


def _check_quantized_without_config(cfg: dict[str, Any], tensors: dict[str, TensorInfo], model_dir: Path) -> None:
    """Quantized tensors (GPTQ's ``qweight``, compressed-tensors' ``weight_packed``, FP8 codes with a ``weight_scale``)
    under a config.json with no ``quantization_config`` are refused naming one and where the scheme is: AutoGPTQ's
    older checkpoints keep it in ``quantize_config.json`` alone, older compressed-tensors ones under
    ``compression_config``. (Found in the hunt: such a GPTQ directory got "the checkpoint lacks 7 tensors, e.g.
    q_proj.weight", as if the download were broken.)"""
    if cfg.get("quantization_config") is not None:
        return
    name = next((n for n, t in tensors.items() if n.endswith(_QUANTIZED_TENSORS) or t.dtype.startswith("F8_")), None)
    if name is None:
        return
    if "compression_config" in cfg:
        fix = "rename its compression_config (an older compressed-tensors name) to quantization_config"
    elif (model_dir / "quantize_config.json").is_file():
        fix = ('AutoGPTQ left the scheme in quantize_config.json: add that object to config.json as '
               '"quantization_config", with "quant_method": "gptq"')
    else:
        fix = "add the quantizer's quantization_config to it (the model's original config.json has it)"
    raise ValueError(f"the checkpoint in {model_dir} holds quantized weights ({name}), but {model_dir / 'config.json'} "
                     f"has no quantization_config; {fix}")


class CheckedModel(NamedTuple):
    """What :func:`check_model_dir` read: the config, its model args, the context length, the checkpoint's tensors."""

    config: dict[str, Any]
    args: ModelArgs
    max_model_len: int
    tensors: dict[str, TensorInfo]


def check_model_dir(model_dir: Path, max_model_len: int | None) -> CheckedModel:
    """The checks that need neither torch nor the tokenizer: ``config.json`` parses and names a supported
    architecture, ``max_model_len`` fits its positions, and the checkpoint's headers match the config; returns what
    it read. `accelkit serve` runs it before it imports torch, so a bad directory is one error line within a second;
    the engine runs it again (headers only: milliseconds)."""
    hf_config = read_config(model_dir)
    try:
        model_args = ModelArgs.from_config(hf_config)
    except ValueError as exc:  # names the field and what is supported
        raise ValueError(f"{model_dir / 'config.json'}: {exc}") from None
    except (KeyError, TypeError, AttributeError) as exc:  # a field missing or of the wrong type
        raise ValueError(f"{model_dir / 'config.json'}: {describe(exc)}; fix the file or re-download it") from None
    length = max_model_len or model_args.max_position_embeddings
    if length > model_args.max_context_len:
        scaling = model_args.rope_scaling
        stretched = (f", {scaling['rope_type']} RoPE scaling by {scaling['factor']} to {model_args.max_context_len}"
                     if model_args.max_context_len > model_args.max_position_embeddings and scaling else "")
        raise ValueError(f"max_model_len={length} exceeds the model's max_position_embeddings="
                         f"{model_args.max_position_embeddings}{stretched}; lower max_model_len (--max-model-len)")
    tensors = checkpoint_tensors(model_dir)
    check_checkpoint(hf_config, tensors, model_dir)
    return CheckedModel(hf_config, model_args, length, tensors)


_FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
_QUANT_PARAMS = ("_scale", ".scales", ".weight_zero_point", ".qzeros", ".g_idx", ".weight_shape")  # as stored
_NOT_ONLINE_FP8 = ("norm.weight", ".gate.weight", "shared_expert_gate.weight", "bias")  # norms, routers stay 16-bit


def loaded_weight_bytes(tensors: dict[str, TensorInfo], *, dtype: str, online_fp8: bool = False) -> int:
    """What the checkpoint's weights occupy once loaded in ``dtype``: 16/32-bit tensors at ``dtype``'s size (the
    planner's bytes per parameter); quantized codes (FP8, packed INT4) and their scales as stored; with
    ``online_fp8``, the decoder layers' Linear and expert weights at one byte each (their per-channel scales left
    out: a lower bound)."""
    scheme = serving_memory.ENGINE_DTYPE_SCHEMES.get(dtype, "fp32")
    per_param = serving_memory.weight_bytes_per_param(scheme)  # the planner's table too
    total = 0.0
    for name, info in tensors.items():
        if info.dtype not in _FLOAT_DTYPES or name.endswith(_QUANT_PARAMS):
            total += info.num_bytes
        elif online_fp8 and _LAYER.match(name) and len(info.shape) == 2 and not name.endswith(_NOT_ONLINE_FP8):
            total += math.prod(info.shape)
        else:
            total += math.prod(info.shape) * per_param
    return int(total)


def available_memory(device: str) -> tuple[str, int]:
    """(where, free bytes) of a resolved ``device`` ('cpu', 'cuda:N': what ``resolve_device`` returns)."""
    return ("host memory" if device == "cpu" else device), free_memory_bytes(device)


def kv_bytes_per_token(cfg: dict[str, Any], *, dtype: str, kv_cache_dtype: KVCacheDtype,
                       tensor_parallel_size: int = 1) -> int:
    """The engine's own KV bytes per token on one rank (its K/V heads: 1/N of them with N tensor-parallel ranks, at
    least one): fp8/int8 hold a float16 scale per token and KV head besides the codes; ``dtype`` the resolved one."""
    heads = cfg["num_attention_heads"]
    return serving_memory.kv_bytes_per_token(
        num_layers=cfg["num_hidden_layers"],
        num_kv_heads=max(1, (cfg.get("num_key_value_heads") or heads) // tensor_parallel_size),
        head_dim=config_head_dim(cfg), kv_cache_dtype=kv_cache_dtype, dtype_bytes=_TORCH_BYTES.get(dtype, 4))


def fit_max_model_len(*, model_max: int, budget_bytes: int, bytes_per_token: int, block_size: int) -> int:
    """vLLM's ``--max-model-len auto`` for a KV budget known before the weights load (``--kv-cache-memory``, or a
    CPU's default): the longest context, at most ``model_max``, that the blocks of ``budget_bytes`` hold at
    ``bytes_per_token`` (:func:`kv_bytes_per_token`) — counted as the engine counts them (``kv_cache_num_blocks``:
    whole blocks, less the padding block), so the engine takes it; 0 where not one block fits."""
    blocks = serving_memory.kv_cache_num_blocks(budget_bytes=budget_bytes, bytes_per_token=bytes_per_token,
                                                block_size=block_size)
    return min(model_max, blocks * block_size)


def check_memory(
    model_dir: Path, cfg: dict[str, Any], tensors: dict[str, TensorInfo], *, dtype: str, kv_cache_dtype: KVCacheDtype,
    kv_cache_memory_bytes: int | None, max_model_len: int, block_size: int, host_available: int,
    device_available: int, where: str, max_model_len_is_default: bool = False, tensor_parallel_size: int = 1,
    online_fp8: bool = False,
) -> None:
    """Refuse, before allocating, what cannot fit: checkpoint in host memory (it is read there first), then
    weights + RoPE tables + KV cache on the device, and a KV budget too small for one full context (the
    ``serving_memory.min_kv_cache_bytes`` it names is exactly what the engine accepts). With
    ``tensor_parallel_size`` N every rank reads the whole checkpoint (N copies in host memory at once) and holds
    about 1/N of the weights and its own K/V heads on its device (the KV budget is each rank's)."""
    tp = tensor_parallel_size
    ckpt_bytes = sum(t.num_bytes for t in tensors.values())
    if ckpt_bytes * tp > host_available:
        readers = f" × {tp} tensor-parallel ranks reading it at once" if tp > 1 else ""
        raise ValueError(
            f"the checkpoint in {model_dir} is {fmt_bytes(ckpt_bytes)}{readers}, more than the "
            f"{fmt_bytes(host_available)} of host memory available; free memory or use a machine with more"
        )
    weight_bytes = loaded_weight_bytes(tensors, dtype=dtype, online_fp8=online_fp8) // tp
    head_dim = config_head_dim(cfg)
    rope_bytes = 2 * max_model_len * head_dim * 4  # cos and sin, float32, one row per position
    kv_per_token = kv_bytes_per_token(cfg, dtype=dtype, kv_cache_dtype=kv_cache_dtype, tensor_parallel_size=tp)
    full_context = serving_memory.min_kv_cache_bytes(max_model_len=max_model_len, block_size=block_size,
                                                     bytes_per_token=kv_per_token)
    kv_bytes = kv_cache_memory_bytes
    context = (f"max_model_len={max_model_len} (the model's max_position_embeddings)" if max_model_len_is_default
               else f"max_model_len={max_model_len}")
    if kv_bytes is not None and kv_bytes > device_available:
        raise ValueError(
            f"kv_cache_memory_bytes (--kv-cache-memory) = {fmt_bytes(kv_bytes)} is more than the "
            f"{fmt_bytes(device_available)} of {where} available; lower it"
        )
    if kv_bytes is not None and kv_bytes < full_context:
        raise ValueError(
            f"{context} needs at least {fmt_bytes(full_context)} ({full_context} bytes) of KV cache for one full "
            f"context and the padding block, more than the KV budget of {fmt_bytes(kv_bytes)}; lower max_model_len (--max-model-len) "
            "or raise kv_cache_memory_bytes (--kv-cache-memory)"
        )
    needed = weight_bytes + rope_bytes + max(kv_bytes or 0, full_context)
    if needed > device_available:
        raise ValueError(
            f"this model needs at least {fmt_bytes(needed)} of {where} to serve (weights {fmt_bytes(weight_bytes)}, RoPE tables "
            f"for {context} {fmt_bytes(rope_bytes)}, KV cache "
            f"{fmt_bytes(max(kv_bytes or 0, full_context))}) but {fmt_bytes(device_available)} is available; lower "
            "max_model_len (--max-model-len) or kv_cache_memory_bytes (--kv-cache-memory), or pick a smaller dtype"
        )
