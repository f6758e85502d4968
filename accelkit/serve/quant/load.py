"""Quantization as a transform of the decoder built on the meta device, before its weights load: each quantized
``nn.Linear`` is swapped for an :class:`Fp8Linear` or :class:`Int4Linear`, and the checkpoint's tensors of those
layers are rewritten, in place, into the names and layout the new modules hold — so the decoder (``llama.py``)
never mentions quantization, and its loader concatenates fused parts (``q‖k‖v``, ``gate‖up``) as for 16-bit ones.

Which layers are quantized is read from the tensors themselves (an ``F8_E4M3`` weight with a ``weight_scale``,
a ``weight_packed``, a GPTQ ``qweight``), checked against the config's scheme; the ``ignore`` list only explains.
Online FP8 quantizes every Linear of the decoder layers but the MoE router (``mlp.gate``) and Qwen2-MoE's shared
expert gate, as vLLM's ``--quantization fp8`` leaves them.

MoE experts: FP8 ones (a checkpoint's, or online) become an :class:`Fp8Experts`, INT4 ones an :class:`Int4Experts`;
a quantized ``lm_head`` or embedding is refused by name.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import torch
from torch import nn

from accelkit.serve.models.args import ModelArgs
from accelkit.serve.models.moe import Experts
from accelkit.serve.quant.config import QuantConfig
from accelkit.serve.quant.linear import (
    FP8_DTYPE,
    FP8_MAX,
    Fp8Experts,
    Fp8Linear,
    Int4Experts,
    Int4Linear,
    pack_int4,
    unpack_int4,
)

log = logging.getLogger("accelkit.serve")

_KV_SCALE = re.compile(r"\.(k_scale|v_scale|kv_scale|k_proj\.output_scale|v_proj\.output_scale)$")
_QUANT_SUFFIXES = (".weight_scale", ".weight_packed", ".qweight", ".input_scale", ".weight_zero_point", ".qzeros")
_NOT_QUANTIZED = ("mlp.gate", "shared_expert_gate")  # routers stay 16-bit (vLLM builds them unquantized)

CheckpointNames = Callable[[str, ModelArgs], list[list[str]]]


def quantize_model(model: nn.Module, tensors: dict[str, torch.Tensor], quant: QuantConfig, args: ModelArgs,
                   checkpoint_names: CheckpointNames) -> set[str]:
    """Swap the quantized Linears of ``model`` (on meta) and rewrite their checkpoint tensors; returns the state-dict
    names whose values keep their checkpoint dtype (codes and scales: the loader casts everything else)."""
    _drop_kv_scales(tensors)
    _refuse_unserved(tensors, quant)
    keep: set[str] = set()
    num_swapped = 0
    for name, module in list(model.named_modules()):
        if isinstance(module, Experts):
            experts = _quantized_experts(name, tensors, quant, args, checkpoint_names)
            if experts is not None:
                model.get_submodule(name.rpartition(".")[0]).experts = experts
                keep.update(f"{name}.{key}" for key, _ in experts.named_parameters())
                num_swapped += 1
            continue
        if not isinstance(module, nn.Linear) or not name.startswith("layers.") or name.endswith(_NOT_QUANTIZED):
            continue
        (parts,) = checkpoint_names(name + ".weight", args)
        prefixes = [p.removesuffix(".weight") for p in parts]
        found = {_format_of(p, tensors) for p in prefixes}
        if len(found) != 1:
            raise ValueError(f"the checkpoint stores the parts of {name} ({', '.join(prefixes)}) in different formats "
                             f"({sorted(str(f) for f in found)}); re-export it with one scheme")
        fmt = found.pop()
        if fmt is None and not quant.is_online:
            continue  # kept 16-bit by the checkpoint (its ignore list)
        has_bias = module.bias is not None
        _drop_zero_biases(prefixes, tensors, quant, has_bias=has_bias)
        if quant.is_online:
            if fmt is not None:
                raise ValueError(f"quantization={quant.method!r} quantizes a 16-bit checkpoint, but {prefixes[0]} is "
                                 "already quantized; leave quantization out")
            for p in prefixes:
                _quantize_fp8_per_channel(p, tensors)
            fmt = "fp8"
        if fmt == "gptq":
            for p in prefixes:
                _gptq_to_packed(p, tensors, quant)
            fmt = "int4"
        if fmt != quant.kind:
            raise ValueError(f"quantization_config describes {quant.kind} weights but {prefixes[0]} holds {fmt} ones; "
                             "config.json and the weights do not belong together")
        new = (_fp8_module(prefixes, tensors, quant, module.in_features, has_bias) if fmt == "fp8"
               else _int4_module(prefixes, tensors, quant, module.in_features, module.out_features, has_bias))
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent), attr, new)
        keep.update(f"{name}.{key}" for key, _ in new.named_parameters() if key != "bias")
        num_swapped += 1
    if num_swapped == 0:
        raise ValueError(f"quantization_config describes {quant.description}, but no Linear layer of the checkpoint "
                         "is quantized; config.json and the weights do not belong together")
    log.info("quantization: %s, %d Linear layers and expert groups", quant.description, num_swapped)
    return keep


def _quantized_experts(name: str, tensors: dict[str, torch.Tensor], quant: QuantConfig, args: ModelArgs,
                       checkpoint_names: CheckpointNames) -> Experts | None:
    """The quantized experts of MoE layer ``name`` (None: the checkpoint keeps them 16-bit), their checkpoint tensors
    rewritten so that each expert's parts concatenate and the experts stack: FP8 scales to (1,) or (rows,), static
    input scales dropped (experts run dequantized); GPTQ converted to pack-quantized."""
    assert args.moe is not None
    prefixes = [p.removesuffix(".weight") for stacked in ("gate_up_proj", "down_proj")
                for group in checkpoint_names(f"{name}.{stacked}", args) for p in group]
    found = {_format_of(p, tensors) for p in prefixes}
    if found == {None} and not quant.is_online:
        return None
    _drop_zero_biases(prefixes, tensors, quant, has_bias=False)
    if quant.is_online:
        if found != {None}:
            raise ValueError(f"quantization={quant.method!r} quantizes a 16-bit checkpoint, but the experts of {name} "
                             "are already quantized; leave quantization out")
        for p in prefixes:
            _quantize_fp8_per_channel(p, tensors)
        found = {"fp8"}
    if found == {"gptq"}:
        for p in prefixes:
            _gptq_to_packed(p, tensors, quant)
        found = {"int4"}
    if len(found) != 1 or found != {quant.kind}:
        raise ValueError(f"the experts of {name} are stored as {sorted(str(f) for f in found)}, but "
                         f"quantization_config describes {quant.kind} weights")
    if quant.kind == "int4":
        assert quant.group_size is not None
        for p in prefixes:
            _check_int4_part(p, tensors, quant, int(tensors[p + ".weight_packed"].shape[1]) * 8)
        return Int4Experts(args.moe, args.hidden_size, group_size=quant.group_size, symmetric=quant.symmetric,
                           scale_dtype=tensors[prefixes[0] + ".weight_scale"].dtype)
    per_channel = set()
    for p in prefixes:
        rows, scale = int(tensors[p + ".weight"].shape[0]), tensors[p + ".weight_scale"]
        if scale.numel() not in (1, rows):
            raise ValueError(f"{p}.weight_scale has shape {list(scale.shape)}: neither per-tensor nor per-channel "
                             f"for {rows} rows (block-wise FP8 is not served)")
        per_channel.add(scale.numel() == rows > 1)
        tensors[p + ".weight_scale"] = scale.reshape(-1)
        tensors.pop(p + ".input_scale", None)
    if len(per_channel) != 1:
        raise ValueError(f"the experts of {name} mix per-tensor and per-channel scales; re-export the checkpoint")
    return Fp8Experts(args.moe, args.hidden_size, per_channel=per_channel.pop(),
                      scale_dtype=tensors[prefixes[0] + ".weight_scale"].dtype)


def _check_int4_part(p: str, tensors: dict[str, torch.Tensor], quant: QuantConfig, in_features: int) -> None:
    """A pack-quantized part: its ``weight_shape`` (dropped) agrees, its zero points are there iff asymmetric."""
    shape = tensors.pop(p + ".weight_shape", None)  # compressed-tensors: the unpacked (out, in)
    rows = int(tensors[p + ".weight_packed"].shape[0])
    if shape is not None and (int(shape[1]) != in_features or int(shape[0]) != rows):
        raise ValueError(f"{p}.weight_shape is {shape.tolist()}, not [{rows}, {in_features}]")
    _check_groups(p, "weight_scale", int(tensors[p + ".weight_scale"].shape[-1]), in_features, quant)
    if (p + ".weight_zero_point" in tensors) == quant.symmetric:
        raise ValueError(f"{p}: quantization_config says symmetric={quant.symmetric}, but the checkpoint "
                         f"{'has' if quant.symmetric else 'lacks'} {p}.weight_zero_point")
    if rows % 8 and not quant.symmetric:
        raise ValueError(f"{p} has {rows} rows; packed zero points need a multiple of 8")


def _check_groups(prefix: str, scale: str, num_groups: int, in_features: int, quant: QuantConfig) -> None:
    """The checkpoint's scales hold one group per ``group_size`` inputs, as quantization_config says. (Found in the
    hunt: a group_size that disagrees with the tensors failed in load_state_dict — "internal error … a bug in
    accelkit", exit 1 — or, for GPTQ, was reported as act-order.)"""
    assert quant.group_size is not None
    if in_features % quant.group_size:
        raise ValueError(f"{prefix} has {in_features} inputs, not a multiple of quantization_config.group_size="
                         f"{quant.group_size}: INT4 groups that do not divide the layer are not served")
    if num_groups * quant.group_size != in_features:
        implied = f" (group size {in_features // num_groups})" if num_groups and not in_features % num_groups else ""
        raise ValueError(f"quantization_config.group_size={quant.group_size} in config.json, but {prefix}.{scale} holds "
                         f"{num_groups} groups for its {in_features} inputs{implied}: config.json and the weights do "
                         "not belong together")


def _format_of(prefix: str, tensors: dict[str, torch.Tensor]) -> str | None:
    """How the checkpoint stores Linear ``prefix``: "fp8", "int4" (compressed-tensors packed), "gptq", or None."""
    if prefix + ".weight_packed" in tensors:
        return "int4"
    if prefix + ".qweight" in tensors:
        return "gptq"
    weight = tensors.get(prefix + ".weight")
    if weight is not None and weight.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        if weight.dtype != FP8_DTYPE:
            raise ValueError(f"{prefix}.weight is {weight.dtype}; FP8 checkpoints are served in e4m3 (float8_e4m3fn)")
        if prefix + ".weight_scale" not in tensors:
            raise ValueError(f"{prefix}.weight is FP8 but the checkpoint has no {prefix}.weight_scale")
        return "fp8"
    return None


def _drop_zero_biases(prefixes: list[str], tensors: dict[str, torch.Tensor], quant: QuantConfig, *,
                      has_bias: bool) -> None:
    """The all-zero ``bias`` a quantizer stored for a quantized Linear the architecture builds without one
    (``has_bias`` false; a pre-quantized checkpoint, not ``quant.is_online``'s 16-bit one): GPTQ-for-LLaMa's
    and early AutoGPTQ's ``QuantLinear`` registered a zero bias buffer for every layer, so their Llama checkpoints carry
    ``q_proj.bias`` ... ``down_proj.bias`` full of zeros (vLLM skips such biases). Dropped: adding zeros changes
    nothing. A bias holding anything else is left in place, for the loader to refuse as a tensor this model does not
    use."""
    if has_bias or quant.is_online:
        return
    for p in prefixes:
        bias = tensors.get(p + ".bias")
        if bias is not None and not torch.any(bias):
            del tensors[p + ".bias"]


def _drop_kv_scales(tensors: dict[str, torch.Tensor]) -> None:
    """A checkpoint's static KV-cache scales: the engine's fp8/int8 cache keeps its own per-token scales."""
    dropped = [n for n in tensors if _KV_SCALE.search(n)]
    for n in dropped:
        del tensors[n]
    if dropped:
        log.info("the checkpoint's %d KV-cache scales are not used: the cache follows kv_cache_dtype", len(dropped))


def _refuse_unserved(tensors: dict[str, torch.Tensor], quant: QuantConfig) -> None:
    """A quantized lm_head, embedding or MoE router: refused by name rather than left for the loader to trip on."""
    for n in tensors:
        is_quantized = n.endswith(_QUANT_SUFFIXES) or tensors[n].dtype == FP8_DTYPE
        if not is_quantized:
            continue
        if n.startswith(("lm_head.", "model.embed_tokens.")):
            raise ValueError(f"a quantized {n.split('.')[0] if n.startswith('lm_head') else 'embedding'} ({n}) is not "
                             "served; re-export the checkpoint with it in the ignore list")
        module = n.rsplit(".", 1)[0]
        if module.endswith(_NOT_QUANTIZED):
            raise ValueError(f"a quantized MoE router ({n}) is not served (routers run 16-bit, as vLLM builds them); "
                             "re-export the checkpoint with the routers in the ignore list")


def _quantize_fp8_per_channel(prefix: str, tensors: dict[str, torch.Tensor]) -> None:
    """Online FP8: one scale per output row, amax / 448, so each row's largest weight maps to e4m3's largest."""
    weight = tensors.pop(prefix + ".weight").float()  # (out, in)
    scale = (weight.abs().amax(dim=1) / FP8_MAX).clamp(min=1e-12)  # (out,)
    tensors[prefix + ".weight"] = (weight / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    tensors[prefix + ".weight_scale"] = scale


def _fp8_module(prefixes: list[str], tensors: dict[str, torch.Tensor], quant: QuantConfig, in_features: int,
                has_bias: bool) -> Fp8Linear:
    """Normalise each part's scales — ModelOpt's 0-d per-tensor and (out,), compressed-tensors' (1,) and (out, 1) —
    to (1,) or (out,), so that the fused parts concatenate."""
    sizes = tuple(int(tensors[p + ".weight"].shape[0]) for p in prefixes)
    per_channel = set()
    has_input = {p + ".input_scale" in tensors for p in prefixes}
    if len(has_input) != 1:
        raise ValueError(f"some of {', '.join(prefixes)} have an input_scale and some not; re-export the checkpoint")
    for p, rows in zip(prefixes, sizes, strict=True):
        scale = tensors[p + ".weight_scale"]
        if scale.numel() == 1:
            tensors[p + ".weight_scale"] = scale.reshape(1)
            per_channel.add(False)
        elif scale.numel() == rows:
            tensors[p + ".weight_scale"] = scale.reshape(rows)
            per_channel.add(True)
        else:
            raise ValueError(f"{p}.weight_scale has shape {list(scale.shape)}: neither per-tensor nor per-channel "
                             f"for {rows} rows (block-wise FP8 is not served)")
        if p + ".input_scale" in tensors:
            input_scale = tensors[p + ".input_scale"]
            if input_scale.numel() != 1:
                raise ValueError(f"{p}.input_scale has shape {list(input_scale.shape)}; expected one per-tensor scale")
            tensors[p + ".input_scale"] = input_scale.reshape(1).to(scale.dtype)
    if len(per_channel) != 1:
        raise ValueError(f"the parts {', '.join(prefixes)} mix per-tensor and per-channel scales; re-export the checkpoint")
    scale_dtype = tensors[prefixes[0] + ".weight_scale"].dtype
    return Fp8Linear(in_features, sizes, per_channel=per_channel.pop(), scale_dtype=scale_dtype,
                     has_input_scale=has_input.pop(), has_bias=has_bias,
                     dynamic_activations=quant.activations != "static-tensor", weight_only=quant.activations is None)


def _int4_module(prefixes: list[str], tensors: dict[str, torch.Tensor], quant: QuantConfig, in_features: int,
                 out_features: int, has_bias: bool) -> Int4Linear:
    assert quant.group_size is not None
    for p in prefixes:
        _check_int4_part(p, tensors, quant, in_features)
    scale_dtype = tensors[prefixes[0] + ".weight_scale"].dtype
    return Int4Linear(in_features, out_features, group_size=quant.group_size, symmetric=quant.symmetric,
                      scale_dtype=scale_dtype, has_bias=has_bias)


def _gptq_to_packed(prefix: str, tensors: dict[str, torch.Tensor], quant: QuantConfig) -> None:
    """GPTQ (AutoGPTQ / GPTQModel) → compressed-tensors' pack-quantized layout, the same codes and scales:

    ``qweight`` (in/8, out) int32, 4-bit unsigned codes packed along the input dim, lowest nibble first;
    ``qzeros`` (in/group, out/8) int32, unsigned zero points packed along the output dim, stored minus one in the
    ``gptq`` (v1) format; ``scales`` (in/group, out) float16; ``g_idx`` (in,), each input's group —
    ``w[o, i] = scales[g, o] · (q[i, o] − zero[g, o])`` with ``g = g_idx[i]``.
    """
    assert quant.group_size is not None
    qweight, qzeros = tensors.pop(prefix + ".qweight"), tensors.pop(prefix + ".qzeros")
    scales, g_idx = tensors.pop(prefix + ".scales"), tensors.pop(prefix + ".g_idx", None)
    in_features = qweight.shape[0] * 8
    _check_groups(prefix, "scales", int(scales.shape[0]), in_features, quant)
    if g_idx is not None and not torch.equal(g_idx.long(), torch.arange(in_features) // quant.group_size):
        raise ValueError(f"{prefix}.g_idx is not input // group_size (act-order); act-order GPTQ is not served")
    codes = unpack_int4(qweight.t().contiguous())  # (out, in) signed = unsigned − 8
    zeros = unpack_int4(qzeros) + quant.gptq_zero_offset  # (groups, out) signed zero − 8
    tensors[prefix + ".weight_packed"] = pack_int4(codes)
    tensors[prefix + ".weight_scale"] = scales.t().contiguous()  # (out, groups)
    if not quant.symmetric:  # symmetric GPTQ's zero is 8 (stored 7 in v1): dropped, as vLLM does
        tensors[prefix + ".weight_zero_point"] = pack_int4(zeros.contiguous()).t().contiguous()  # (out/8, groups)
