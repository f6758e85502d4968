"""Which quantized checkpoints the engine serves, read from ``quantization_config`` in ``config.json`` as vLLM reads
it (no torch import: ``ModelArgs.from_config`` parses this before anything loads).

Supported, one scheme per model:

- ``quant_method: compressed-tensors`` (llm-compressor's output), one config group targeting ``Linear``:
  ``format: float-quantized`` FP8 e4m3 weights with per-tensor or per-channel scales, activations static per-tensor,
  dynamic per-token or none (W8A16); ``format: pack-quantized`` INT4 weights, group-wise scales (any group size,
  128 in practice), symmetric or asymmetric, no activation quantization (W4A16);
- ``quant_method: modelopt`` (NVIDIA ModelOpt) with ``quant_algo`` ``FP8`` (per-tensor weight and static activation
  scales) or ``FP8_PER_CHANNEL_PER_TOKEN``;
- ``quant_method: gptq`` with ``bits: 4`` (``checkpoint_format`` ``gptq``, whose zero points are stored minus one,
  or ``gptq_v2``), ``desc_act: false``;
- online ``quantization="fp8"`` (``--quantization fp8``) of a 16-bit checkpoint: per-output-channel FP8 weight
  scales computed at load, dynamic per-token activation scales, as vLLM's ``--quantization fp8``.

Anything else is a ``ValueError`` naming the ``quantization_config`` field and its value — a quantized checkpoint is
never loaded as if its codes were 16-bit weights. KV-cache scales a checkpoint carries (``kv_cache_scheme``,
``kv_cache_quant_algo``) are not used: the cache is what ``kv_cache_dtype`` says, with its own per-token scales.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

QuantMethod = Literal["compressed-tensors", "modelopt", "gptq", "fp8"]
#: ``fp8``: float8 e4m3 weights; ``int4``: 4-bit integer codes packed eight to an int32
WeightKind = Literal["fp8", "int4"]
#: how FP8 activations are scaled where the matmul runs in FP8 (``None``: weight-only, 16-bit activations)
ActivationScheme = Literal["static-tensor", "dynamic-token", "dynamic-tensor"]
ONLINE_METHODS = ("fp8",)
#: vLLM's ``--quantization`` names of a checkpoint's own format → that format (its ``quant_method``). vLLM's marlin
#: names pick a kernel for the same checkpoint; here they select nothing: a quantized checkpoint is served from its
#: own ``quantization_config``, and the name given only has to be the checkpoint's (AWQ is named so that an AWQ
#: checkpoint gets the refusal of its format, not of the flag)
CHECKPOINT_METHOD_NAMES: dict[str, str] = {"gptq": "gptq", "gptq_marlin": "gptq", "awq": "awq", "awq_marlin": "awq",
                                           "compressed-tensors": "compressed-tensors", "modelopt": "modelopt"}
#: the formats of those a checkpoint is served in, as a message lists them
SERVED_FORMAT_NAMES = "gptq (or vLLM's gptq_marlin), compressed-tensors, modelopt"
#: every ``--quantization`` value taken: fp8 at load, or the checkpoint's own format
QUANTIZATION_NAMES = (*ONLINE_METHODS, *CHECKPOINT_METHOD_NAMES)
_SUPPORTED = ("compressed-tensors (FP8 float-quantized W8A8/W8A16, INT4 pack-quantized W4A16), modelopt (FP8, "
              "FP8_PER_CHANNEL_PER_TOKEN), gptq (4-bit)")


@dataclass(frozen=True, slots=True, kw_only=True)
class QuantConfig:
    """One quantization scheme for every quantized Linear of the model."""

    method: QuantMethod  # where it comes from: a checkpoint's quant_method, or "fp8" = online at load
    kind: WeightKind
    group_size: int | None = None  # int4: input columns sharing one scale (and zero point)
    symmetric: bool = True  # int4: False = a zero point per group
    activations: ActivationScheme | None = None  # fp8: the activation scaling of the FP8 matmul
    ignore: tuple[str, ...] = ()  # modules the checkpoint keeps 16-bit (for messages; the tensors decide)
    gptq_zero_offset: int = 0  # gptq (v1 format): stored zero points are the real ones minus this

    @property
    def is_online(self) -> bool:
        return self.method in ONLINE_METHODS

    @property
    def description(self) -> str:
        """One line for logs and errors, e.g. ``compressed-tensors fp8 (activations dynamic-token)``."""
        if self.kind == "int4":
            return f"{self.method} int4 weight-only (group {self.group_size}, {'' if self.symmetric else 'a'}symmetric)"
        return f"{self.method} fp8 (activations {self.activations or '16-bit: weight-only'})"


def online_quantization(name: str) -> QuantConfig:
    """``EngineConfig.quantization`` → the scheme applied to a 16-bit checkpoint at load."""
    if name != "fp8":
        raise ValueError(f"quantization={name!r} is not supported; expected 'fp8' (or none)")
    return QuantConfig(method="fp8", kind="fp8", activations="dynamic-token")


def quantization_name_problem(name: str, checkpoint: QuantConfig | None, config_path: str, *,
                              flag: str = "--quantization") -> str | None:
    """Why ``--quantization name`` (vLLM's names, :data:`QUANTIZATION_NAMES`) does not fit the checkpoint whose
    ``quantization_config`` parsed to ``checkpoint`` (None: a 16-bit checkpoint); None when it does — ``fp8`` of a
    16-bit checkpoint (quantized at load), or the name of the checkpoint's own format (served from its config, as
    vLLM serves it). vLLM refuses a name other than the checkpoint's too. ``flag``: how the message names the
    setting — the CLI's flag, or ``quantization`` (``EngineConfig``/``LLM(quantization=…)``), said ``quantization='x'``."""
    def said(value: str) -> str:
        return f"{flag} {value}" if flag.startswith("-") else f"{flag}={value!r}"

    drop = f"drop {flag}" if flag.startswith("-") else f"leave {flag} out"
    if name in ONLINE_METHODS:
        if checkpoint is None:
            return None
        return (f"{said(name)} quantizes a 16-bit checkpoint at load, but {config_path} describes a quantized one "
                f"({checkpoint.description}), served from its own quantization_config; {drop} or give "
                f"{said(checkpoint.method)}")
    fmt = CHECKPOINT_METHOD_NAMES.get(name)
    if fmt is None:
        return (f"{flag} {name!r} is not a quantization accelkit serves; give fp8 (a 16-bit checkpoint quantized at "
                f"load) or the checkpoint's own format ({SERVED_FORMAT_NAMES})")
    if checkpoint is None:
        return (f"{said(name)} names the {fmt} format of a quantized checkpoint, but {config_path} has no "
                "quantization_config (16-bit weights), and accelkit quantizes at load to fp8 only: give "
                f"{said('fp8')}, serve a checkpoint quantized that way, or {drop}")
    if checkpoint.method != fmt:
        return (f"{said(name)} names the {fmt} format, but {config_path} describes a {checkpoint.method} checkpoint "
                f"({checkpoint.description}); {drop} (the checkpoint is served from its own quantization_config) or "
                f"give {said(checkpoint.method)}")
    return None


def parse_quantization_config(quant: Any) -> QuantConfig:
    """``quantization_config`` of config.json → the scheme; anything unsupported is a ValueError naming the field."""
    if not isinstance(quant, dict):
        raise ValueError(f"quantization_config={quant!r} in config.json is not an object; expected "
                         '{"quant_method": ...}')
    method = quant.get("quant_method")
    if method == "compressed-tensors":
        return _compressed_tensors(quant)
    if isinstance(method, str) and method.lower().startswith("modelopt"):
        return _modelopt(quant)
    if method == "gptq":
        return _gptq(quant)
    raise ValueError(f"quantization_config.quant_method={method!r} in config.json is not supported; supported: "
                     f"{_SUPPORTED} — or serve the unquantized model")


def _refuse(field: str, value: Any, expected: str) -> ValueError:
    return ValueError(f"quantization_config.{field}={value!r} in config.json is not supported; expected {expected}")


def _compressed_tensors(quant: dict[str, Any]) -> QuantConfig:
    at, group = _ct_group(quant)
    fmt = group.get("format") or quant.get("format")
    weights = group["weights"]
    w_type, bits = weights.get("type"), weights.get("num_bits")
    ignore = tuple(str(x) for x in quant.get("ignore") or ())
    if w_type == "float" and bits == 8:
        return _ct_fp8(at, group, fmt, ignore)
    if w_type == "int" and bits == 4:
        return _ct_int4(at, group, fmt, ignore)
    raise _refuse(f"{at}.weights", {"type": w_type, "num_bits": bits},
                  "FP8 ({'type': 'float', 'num_bits': 8}) or INT4 ({'type': 'int', 'num_bits': 4})")


def _ct_group(quant: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The one config group (its field path, e.g. ``config_groups.group_0``), with what no scheme here allows
    refused: several groups, targets other than Linear, sparsity, transforms, output activations, dynamic weights."""
    groups = quant.get("config_groups") or {}
    if not isinstance(groups, dict) or len(groups) != 1:
        raise _refuse("config_groups", sorted(groups) if isinstance(groups, dict) else groups,
                      "one group (one scheme for every Linear)")
    (name, group), = groups.items()
    at = f"config_groups.{name}"
    if not isinstance(group, dict):
        raise _refuse(at, group, "an object")
    if group.get("targets") != ["Linear"]:
        raise _refuse(f"{at}.targets", group.get("targets"), "['Linear']")
    for key in ("sparsity_config", "transform_config"):
        if quant.get(key):
            raise _refuse(key, quant[key], "none (sparse and transformed checkpoints are not served)")
    if group.get("output_activations"):
        raise _refuse(f"{at}.output_activations", group["output_activations"], "null")
    weights = group.get("weights")
    if not isinstance(weights, dict):
        raise _refuse(f"{at}.weights", weights, "an object (weight quantization)")
    if weights.get("dynamic"):
        raise _refuse(f"{at}.weights.dynamic", weights["dynamic"], "false")
    return at, group


def _ct_fp8(at: str, group: dict[str, Any], fmt: Any, ignore: tuple[str, ...]) -> QuantConfig:
    weights = group["weights"]
    # compressed-tensors names weight-only FP8 (W8A16) 'naive-quantized' — the same e4m3 weight and weight_scale
    # tensors as 'float-quantized', which it gives schemes with FP8 activations (refusing it turned away
    # llm-compressor's own W8A16 output: found in review)
    if fmt not in ("float-quantized", "naive-quantized") or (fmt == "naive-quantized"
                                                             and group.get("input_activations")):
        raise _refuse("format", fmt, "'float-quantized' for FP8 weights ('naive-quantized' for FP8 weights alone)")
    if weights.get("symmetric") is False:
        raise _refuse(f"{at}.weights.symmetric", False, "true for float weights")
    if weights.get("strategy") not in ("tensor", "channel"):
        raise _refuse(f"{at}.weights.strategy", weights.get("strategy"), "'tensor' or 'channel' for FP8 weights")
    return QuantConfig(method="compressed-tensors", kind="fp8",
                       activations=_ct_activations(group.get("input_activations"), at), ignore=ignore)


def _ct_int4(at: str, group: dict[str, Any], fmt: Any, ignore: tuple[str, ...]) -> QuantConfig:
    weights = group["weights"]
    if fmt != "pack-quantized":
        raise _refuse("format", fmt, "'pack-quantized' for INT4 weights")
    if weights.get("strategy") != "group":
        raise _refuse(f"{at}.weights.strategy", weights.get("strategy"), "'group' for INT4 weights")
    group_size = weights.get("group_size")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 8 or group_size % 8:
        raise _refuse(f"{at}.weights.group_size", group_size, "a positive multiple of 8 (128 in practice)")
    if weights.get("actorder"):
        raise _refuse(f"{at}.weights.actorder", weights["actorder"], "null (act-order INT4 is not served)")
    if group.get("input_activations"):
        raise _refuse(f"{at}.input_activations", group["input_activations"], "null for INT4 weights (W4A16)")
    return QuantConfig(method="compressed-tensors", kind="int4", group_size=group_size,
                       symmetric=weights.get("symmetric", True) is not False, ignore=ignore)


def _ct_activations(acts: Any, at: str) -> ActivationScheme | None:
    """A float-quantized group's ``input_activations`` → how the FP8 matmul scales its input."""
    if not acts:
        return None
    if not isinstance(acts, dict) or acts.get("type") != "float" or acts.get("num_bits") != 8:
        raise _refuse(f"{at}.input_activations", acts, "FP8 activations ({'type': 'float', 'num_bits': 8}) or null")
    strategy, dynamic = acts.get("strategy"), bool(acts.get("dynamic"))
    if strategy == "tensor":
        return "dynamic-tensor" if dynamic else "static-tensor"
    if strategy == "token" and dynamic:
        return "dynamic-token"
    raise _refuse(f"{at}.input_activations.strategy", strategy, "'tensor' (static or dynamic) or dynamic 'token'")


def _modelopt(quant: dict[str, Any]) -> QuantConfig:
    # hf_quant_config.json's layout nests it under "quantization"; config.json's is flat (vLLM reads both)
    nested = quant.get("quantization")
    source = nested if isinstance(nested, dict) else quant
    field = "quantization.quant_algo" if source is nested else "quant_algo"
    algo = str(source.get("quant_algo") or "").upper()
    ignore = tuple(str(x) for x in source.get("exclude_modules") or source.get("ignore") or ())
    if algo == "FP8":
        return QuantConfig(method="modelopt", kind="fp8", activations="static-tensor", ignore=ignore)
    if algo == "FP8_PER_CHANNEL_PER_TOKEN":
        return QuantConfig(method="modelopt", kind="fp8", activations="dynamic-token", ignore=ignore)
    raise _refuse(field, source.get("quant_algo"), "'FP8' or 'FP8_PER_CHANNEL_PER_TOKEN' for quant_method='modelopt'")


def _gptq(quant: dict[str, Any]) -> QuantConfig:
    bits, group_size = quant.get("bits"), quant.get("group_size")
    if bits != 4:
        raise _refuse("bits", bits, "4 for quant_method='gptq'")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 8 or group_size % 8:
        raise _refuse("group_size", group_size, "a positive multiple of 8 (128 in practice)")
    if quant.get("desc_act"):
        raise _refuse("desc_act", quant["desc_act"], "false (act-order GPTQ is not served)")
    if quant.get("lm_head"):
        raise _refuse("lm_head", quant["lm_head"], "false (a quantized lm_head is not served)")
    if quant.get("dynamic"):
        raise _refuse("dynamic", quant["dynamic"], "none (per-module GPTQ overrides are not served)")
    # GPTQModel's and transformers' field is format (checkpoint_format its older alias): a gptq_v2 checkpoint that
    # says so only in format was read as v1, its zero points off by one (found in review)
    key = "format" if quant.get("format") is not None else "checkpoint_format"
    fmt = quant.get(key) or "gptq"
    if fmt not in ("gptq", "gptq_v2"):
        raise _refuse(key, fmt, "'gptq' or 'gptq_v2' (Marlin-format and other repacked checkpoints are not served)")
    if quant.get("is_marlin_format"):
        raise _refuse("is_marlin_format", quant["is_marlin_format"], "false (Marlin-repacked checkpoints are not served)")
    if quant.get("pack_dtype", "int32") not in ("int32", "torch.int32"):
        raise _refuse("pack_dtype", quant["pack_dtype"], "'int32' (codes packed eight to an int32)")
    return QuantConfig(method="gptq", kind="int4", group_size=group_size, symmetric=quant.get("sym", True) is not False,
                       gptq_zero_offset=1 if fmt == "gptq" else 0)
