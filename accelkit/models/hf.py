"""Hugging Face ``config.json`` ⇄ ModelSpec, in pure Python (no transformers import).

``from_hf_config`` reads the fields each supported ``model_type`` needs and names any that is missing
or malformed; ``to_hf_config`` writes a config transformers builds the same architecture from.
"""

from __future__ import annotations

import builtins
import json
import math
from pathlib import Path
from typing import Any

from accelkit.core import ModelSpec, UserError

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "gpt2", "bert", "vit", "resnet")
_TRANSFORMER = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
REQUIRED = {
    "llama": (*_TRANSFORMER, "vocab_size"), "mistral": (*_TRANSFORMER, "vocab_size"),
    "qwen2": (*_TRANSFORMER, "vocab_size"), "qwen3": (*_TRANSFORMER, "vocab_size"),
    "mixtral": (*_TRANSFORMER, "vocab_size"), "qwen3_moe": ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                            "vocab_size"),
    "gpt2": ("n_embd", "n_layer", "n_head", "vocab_size"), "bert": (*_TRANSFORMER, "vocab_size"),
    "vit": _TRANSFORMER, "resnet": (),
}


#: transformers' own defaults (configuration_<model_type>.py, 5.x) for the decoder keys a config.json may leave out,
#: where they differ between model types — read as one value for all (the heads, a 2048 context, no window, θ 10000),
#: a Mistral config without num_key_value_heads planned 4× its KV cache and 11% more parameters than transformers
#: builds from the same file, one without sliding_window no window (transformers: 4096). The planner and the serving
#: engine (accelkit.serve.models.args) both read them: num_key_value_heads None is one KV head per head.
DECODER_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"num_key_value_heads": None, "max_position_embeddings": 2048, "rope_theta": 10000.0,
              "rms_norm_eps": 1e-6},
    "mistral": {"num_key_value_heads": 8, "max_position_embeddings": 131072, "rope_theta": 10000.0,
                "rms_norm_eps": 1e-6, "sliding_window": 4096},
    "mixtral": {"num_key_value_heads": 8, "max_position_embeddings": 131072, "rope_theta": 1e6, "rms_norm_eps": 1e-5,
                "sliding_window": None},
    "qwen2": {"num_key_value_heads": 32, "max_position_embeddings": 32768, "rope_theta": 10000.0,
              "rms_norm_eps": 1e-6},
    "qwen3": {"num_key_value_heads": 32, "max_position_embeddings": 32768, "rope_theta": 10000.0,
              "rms_norm_eps": 1e-6},
    "qwen2_moe": {"num_key_value_heads": 16, "max_position_embeddings": 32768, "rope_theta": 10000.0,
                  "rms_norm_eps": 1e-6},
    "qwen3_moe": {"num_key_value_heads": 4, "max_position_embeddings": 32768, "rope_theta": 10000.0,
                  "rms_norm_eps": 1e-6},
}
#: the architecture (config.json's "architectures") of each decoder model type above
DECODER_ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "mixtral": "MixtralForCausalLM",
                         "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
                         "qwen3_moe": "Qwen3MoeForCausalLM"}
_CONFIG_CLASS = {"llama": "LlamaConfig", "mistral": "MistralConfig", "mixtral": "MixtralConfig",
                 "qwen2": "Qwen2Config", "qwen3": "Qwen3Config", "qwen2_moe": "Qwen2MoeConfig",
                 "qwen3_moe": "Qwen3MoeConfig"}


class _Reader:
    """Typed access to a config dict; every error names the file and the field."""

    def __init__(self, data: dict[str, Any], source: str):
        self.data, self.source = data, source

    def _fail(self, key: str, msg: str) -> UserError:
        return UserError(f"{self.source}: field {key!r} {msg}")

    def int(self, key: str, default: Any = ...) -> Any:
        if key not in self.data or self.data[key] is None:
            if default is ...:
                mt = self.data.get("model_type")
                raise self._fail(key, f"is missing (required for model_type {mt!r})")
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._fail(key, f"must be a non-negative integer, got {value!r}")
        return value

    def float(self, key: str, default: float) -> float:
        value = self.data.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._fail(key, f"must be a number, got {value!r}")
        return self.finite(key, value, default)

    def finite(self, key: str, value: builtins.int | builtins.float,
               default: builtins.float | None = None) -> builtins.float:
        """``value`` read from ``key`` as a float, refused unless finite: Python's json reads Infinity, -Infinity and
        NaN (and 1e400 as Infinity), which no strict JSON parser takes, and an integer of 400 digits, which no float
        holds (float() raised OverflowError: an internal error); a rope_theta of Infinity was planned as given."""
        try:
            number = builtins.float(value)
        except OverflowError:
            number = math.inf if value > 0 else -math.inf
        if math.isfinite(number):
            return number
        shown = "NaN" if math.isnan(number) else "Infinity" if number > 0 else "-Infinity"
        fix = f"write one such as {default:g}, or leave the key out" if default is not None else "write one"
        raise self._fail(key, f"must be a finite number, got {shown}; {fix}")

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._fail(key, f"must be true or false, got {value!r}")
        return value

    def int_list(self, key: str, default: list[builtins.int]) -> tuple[builtins.int, ...]:
        value = self.data.get(key, default)
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise self._fail(key, f"must be a list of integers, got {value!r}")
        return tuple(value)


def _rope(r: _Reader, default_theta: float = 10000.0) -> tuple[float, dict[str, Any] | None]:
    """RoPE base and scaling, from transformers v4 (rope_theta/rope_scaling) or v5 (rope_parameters)."""
    params = r.data.get("rope_parameters") or {}
    if not isinstance(params, dict):
        raise r._fail("rope_parameters", "must be an object")
    theta = params.get("rope_theta", r.data.get("rope_theta", default_theta))
    if theta is None:
        theta = default_theta
    if isinstance(theta, bool) or not isinstance(theta, (int, float)):
        raise r._fail("rope_theta", f"must be a number, got {theta!r}")
    theta = r.finite("rope_parameters.rope_theta" if "rope_theta" in params else "rope_theta", theta, default_theta)
    own = {k: v for k, v in params.items() if k != "rope_theta"}
    where, scaling = ("rope_parameters", own) if own else ("rope_scaling", r.data.get("rope_scaling"))
    if scaling is not None and not isinstance(scaling, dict):
        raise r._fail("rope_scaling", "must be an object or null")
    for key, values in (scaling or {}).items():  # a factor of Infinity went into the spec as it was
        for i, value in enumerate(values if isinstance(values, list) else [values]):  # (Phi-3's factor lists)
            if isinstance(value, (builtins.float, int)) and not isinstance(value, bool):
                r.finite(f"{where}.{key}" + (f"[{i}]" if isinstance(values, list) else ""), value)
    if scaling and scaling.get("rope_type", scaling.get("type")) == "default":
        scaling = None
    return theta, scaling or None


def from_hf_config(data: dict[str, Any], *, name: str | None = None, source: str = "config.json") -> ModelSpec:
    """ModelSpec from a parsed Hugging Face config dict."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a JSON object at the top level")
    r = _Reader(data, source)
    model_type = data.get("model_type")
    if model_type is None:
        raise UserError(f"{source}: field 'model_type' is missing; expected one of {', '.join(SUPPORTED)}")
    if model_type not in SUPPORTED:
        raise UserError(
            f"{source}: model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED)}"
        )
    missing = [key for key in REQUIRED[model_type] if data.get(key) is None]
    if missing:
        raise UserError(
            f"{source}: {'fields' if len(missing) > 1 else 'field'} {', '.join(repr(m) for m in missing)} "
            f"{'are' if len(missing) > 1 else 'is'} missing (required for model_type {model_type!r})"
        )
    name = name or str(data.get("_name_or_path") or model_type)
    try:
        return _BUILDERS[model_type](r, name)
    except ValueError as exc:
        if isinstance(exc, UserError):
            raise
        raise UserError(f"{source}: {exc}") from exc


def _decoder(r: _Reader, name: str) -> ModelSpec:
    mt = r.data["model_type"]
    defaults = DECODER_DEFAULTS[mt]
    theta, scaling = _rope(r, defaults["rope_theta"])
    heads, hidden = r.int("num_attention_heads"), r.int("hidden_size")
    # 0 heads read as "0 KV heads" (the one-per-head default), 0 positions as a model of an empty context (a 0 B
    # KV cache per sequence): each names its own key
    positions = r.int("max_position_embeddings", defaults["max_position_embeddings"])
    for key, value in (("num_attention_heads", heads), ("max_position_embeddings", positions)):
        if value == 0:
            raise r._fail(key, "must be at least 1, got 0")
    kv_heads = _kv_heads(r, heads)
    head_dim = r.int("head_dim", 128 if mt == "qwen3" else None)  # Qwen3Config's default is 128, not h / heads
    moe = mt in ("mixtral", "qwen3_moe")
    qwen3 = mt in ("qwen3", "qwen3_moe")
    if mt == "qwen3_moe":
        _check_every_layer_sparse(r)
    # transformers' Qwen3MoeConfig defaults (configuration_qwen3_moe.py) for fields save_pretrained leaves out
    # transformers 5 maps num_experts onto num_local_experts for both (and saves the latter): whichever is given; a
    # num_local_experts of 0 is refused by ModelSpec, not read as "absent" (it became 8 experts)
    given = "num_local_experts" if r.data.get("num_local_experts") is not None else "num_experts"
    num_experts = r.int(given, 128 if mt == "qwen3_moe" else 8)
    return ModelSpec(
        name=name,
        kind="moe" if moe else "decoder",
        family=mt,
        num_layers=r.int("num_hidden_layers"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=None if heads and head_dim == hidden // heads else head_dim,  # None = the default split
        # Qwen3-MoE: the routed experts' width (intermediate_size is for dense layers, which _check_every_layer_sparse
        # rules out)
        ffn_hidden_size=r.int("moe_intermediate_size", 768) if mt == "qwen3_moe" else r.int("intermediate_size"),
        vocab_size=r.int("vocab_size"),
        max_seq_len=positions,
        **_window(r, mt),
        num_experts=num_experts if moe else None,
        experts_per_token=r.int("num_experts_per_tok", 8 if mt == "qwen3_moe" else 2) if moe else None,
        gated_mlp=True,
        tied_embeddings=r.bool("tie_word_embeddings", False),
        # transformers: Qwen2 has q/k/v biases always; Llama's and Qwen3's attention_bias puts one on q, k, v and o,
        # Llama's mlp_bias on gate/up/down; Mistral and Mixtral build no bias whatever the config says
        qkv_bias=mt == "qwen2" or (mt in ("llama", "qwen3", "qwen3_moe") and r.bool("attention_bias", False)),
        out_bias=mt in ("llama", "qwen3", "qwen3_moe") and r.bool("attention_bias", False),
        mlp_bias=mt == "llama" and r.bool("mlp_bias", False),
        qk_norm=qwen3,
        rope_theta=theta,
        rope_scaling=scaling,
        norm_eps=r.float("rms_norm_eps", defaults["rms_norm_eps"]),
    )


def default_kv_heads(model_type: str, heads: int) -> int:
    """num_key_value_heads where config.json leaves the key out, as transformers' config class of ``model_type``
    sets it (Mistral's and Mixtral's 8, Qwen2's and Qwen3's 32, Qwen2-MoE's 16, Qwen3-MoE's 4; Llama's one per head);
    ValueError (what is wrong with the missing key) where ``heads`` is not a multiple of it."""
    default = DECODER_DEFAULTS[model_type]["num_key_value_heads"]
    if default is None:
        return heads
    if heads and heads % default:
        raise ValueError(f"is missing: transformers' {_CONFIG_CLASS[model_type]} then uses {default}, which "
                         f"num_attention_heads {heads} is not a multiple of; write the model's num_key_value_heads")
    return int(default)


def _kv_heads(r: _Reader, heads: int) -> int:
    """num_key_value_heads as transformers reads it: :func:`default_kv_heads` when the key is absent, one per head when
    it is null."""
    if "num_key_value_heads" in r.data:
        return int(r.int("num_key_value_heads", heads))
    try:
        return default_kv_heads(r.data["model_type"], heads)
    except ValueError as exc:
        raise r._fail("num_key_value_heads", str(exc)) from None


def _check_every_layer_sparse(r: _Reader) -> None:
    """Qwen3-MoE layers are dense when listed in mlp_only_layers or when (i + 1) % decoder_sparse_step != 0
    (transformers' Qwen3MoeDecoderLayer); a ModelSpec has one MLP kind for every layer, as every published
    Qwen3-MoE config does (mlp_only_layers [], decoder_sparse_step 1)."""
    dense = r.data.get("mlp_only_layers") or []
    if dense:
        raise r._fail("mlp_only_layers", f"= {dense!r}: the planner models Qwen3-MoE with every layer sparse; "
                                         "expected []")
    if r.int("decoder_sparse_step", 1) != 1:
        raise r._fail("decoder_sparse_step", f"= {r.data['decoder_sparse_step']!r}: the planner models Qwen3-MoE "
                                             "with every layer sparse; expected 1")


def _window(r: _Reader, mt: str) -> dict[str, Any]:
    """sliding_window and num_full_attention_layers as transformers builds them.

    Mistral and Mixtral: every layer attends over the last sliding_window tokens (null: all); Qwen3-MoE too, with
    use_sliding_window true. Qwen2 and Qwen3 (transformers
    5.x configuration_qwen2.Qwen2Config.__post_init__): sliding_window is kept only when use_sliding_window (default
    false) is true, and layer_types — when the config does not list them — marks layer i "sliding_attention" iff
    i >= max_window_layers (default 28); Qwen2Attention gives only those layers the window
    (modeling_qwen2: ``config.sliding_window if self.layer_type == "sliding_attention" else None``)."""
    if mt in ("mistral", "mixtral"):  # absent: MistralConfig's 4096, MixtralConfig's none; null: none
        if "sliding_window" not in r.data:
            return {"sliding_window": DECODER_DEFAULTS[mt]["sliding_window"]}
        return {"sliding_window": r.int("sliding_window", None) or None}
    if mt == "qwen3_moe" and r.bool("use_sliding_window", False):  # Qwen3MoeAttention: every layer
        return {"sliding_window": r.int("sliding_window", 4096) or None}
    if mt not in ("qwen2", "qwen3") or not r.bool("use_sliding_window", False):
        return {}
    # Qwen2Config's default 4096 when the key is absent; null: no window
    window = (r.int("sliding_window", None) if "sliding_window" in r.data else 4096) or None
    layers = r.int("num_hidden_layers")
    types = r.data.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) for t in types):
            raise r._fail("layer_types", f"must be a list of {layers} layer type names, got {types!r}")
        windowed = sum(t == "sliding_attention" for t in types)  # only the count sizes the KV cache
    else:
        windowed = max(0, layers - r.int("max_window_layers", 28))
    if window is None or windowed == 0:
        return {}
    return {"sliding_window": window, "num_full_attention_layers": layers - windowed}


def _gpt2(r: _Reader, name: str) -> ModelSpec:
    h = r.int("n_embd")
    return ModelSpec(
        name=name, kind="decoder", family="gpt2", num_layers=r.int("n_layer"), hidden_size=h,
        num_heads=r.int("n_head"), ffn_hidden_size=r.int("n_inner", 4 * h), vocab_size=r.int("vocab_size"),
        max_seq_len=r.int("n_positions", 1024), linear_bias=True, norm="layernorm", position="learned",
        tied_embeddings=r.bool("tie_word_embeddings", True), norm_eps=r.float("layer_norm_epsilon", 1e-5),
    )


def _bert(r: _Reader, name: str) -> ModelSpec:
    return ModelSpec(
        name=name, kind="encoder", family="bert", num_layers=r.int("num_hidden_layers"),
        hidden_size=r.int("hidden_size"), num_heads=r.int("num_attention_heads"),
        ffn_hidden_size=r.int("intermediate_size"), vocab_size=r.int("vocab_size"),
        max_seq_len=r.int("max_position_embeddings", 512), linear_bias=True, norm="layernorm",
        position="learned", type_vocab_size=r.int("type_vocab_size", 2), pooler=True,
        norm_eps=r.float("layer_norm_eps", 1e-12),
    )


def _vit(r: _Reader, name: str) -> ModelSpec:
    image, patch = r.int("image_size", 224), r.int("patch_size", 16)
    if not r.bool("qkv_bias", True):
        raise UserError(f"{r.source}: field 'qkv_bias' = false is not supported for ViT (standard ViTs use it)")
    return ModelSpec(
        name=name, kind="encoder", family="vit", num_layers=r.int("num_hidden_layers"),
        hidden_size=r.int("hidden_size"), num_heads=r.int("num_attention_heads"),
        ffn_hidden_size=r.int("intermediate_size"), max_seq_len=(image // max(patch, 1)) ** 2 + 1,
        linear_bias=True, norm="layernorm", position="learned", image_size=image, patch_size=patch,
        num_channels=r.int("num_channels", 3), pooler=True, norm_eps=r.float("layer_norm_eps", 1e-12),
    )


def _resnet(r: _Reader, name: str) -> ModelSpec:
    if r.data.get("layer_type", "bottleneck") != "bottleneck":
        raise UserError(f"{r.source}: field 'layer_type' = {r.data['layer_type']!r}; only 'bottleneck' is supported")
    labels = r.data.get("id2label")
    # neither: transformers' default of 2 labels (PretrainedConfig), the classifier ResNetForImageClassification
    # builds — read as "no head", the count left it out and a bench drew labels 0…999 for its 2 outputs (IndexError)
    num_labels = len(labels) if isinstance(labels, dict) and labels else r.int("num_labels", 2)
    return ModelSpec(
        name=name, kind="cnn", family="resnet", stage_depths=r.int_list("depths", [3, 4, 6, 3]),
        stage_widths=r.int_list("hidden_sizes", [256, 512, 1024, 2048]), stem_width=r.int("embedding_size", 64),
        num_channels=r.int("num_channels", 3), image_size=r.int("image_size", 224), num_labels=num_labels,
    )


_BUILDERS = {
    "llama": _decoder, "mistral": _decoder, "qwen2": _decoder, "qwen3": _decoder, "mixtral": _decoder,
    "qwen3_moe": _decoder,
    "gpt2": _gpt2, "bert": _bert, "vit": _vit, "resnet": _resnet,
}


def load_config(path: str | Path) -> ModelSpec:
    """ModelSpec from a ``config.json`` file or a directory holding one."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise UserError(f"no config.json at {path}; pass a preset name, a config.json, or a directory holding one")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"{p}: not UTF-8 text (byte {exc.start}: {exc.reason}); a config.json is UTF-8 JSON — "
                        "save it as UTF-8") from None
    except RecursionError:
        raise UserError(f"{p}: JSON nested too deeply to be a model config") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise UserError(f"{p}: not a usable JSON document ({exc})") from None
    except OSError as exc:
        raise UserError(f"{p}: cannot be read ({exc.strerror or exc})") from None
    # a Hub-style folder's config.json is named after its folder ('config.json' given from inside it too); any
    # other file after itself — two configs side by side must not share a name in results and sweeps
    # (absolute, not resolved: a Hub cache's snapshots/<sha>/config.json links into blobs/, which would name them all)
    folder = p.absolute().parent
    name = (_hub_cache_name(folder) or folder.name or None) if p.name == "config.json" else p.stem
    return from_hf_config(data, name=name, source=str(p))


def _hub_cache_name(folder: Path) -> str | None:
    """``ORG/NAME`` for a Hugging Face Hub cache snapshot (``models--ORG--NAME/snapshots/<sha>``), else None.

    The snapshot folder is a commit hash: named after it, every cached model read as a 40-digit hex (found in
    review). The cache joins the repo id's parts with '--', which a Hub name cannot contain."""
    repo = folder.parent.parent.name
    if folder.parent.name != "snapshots" or not repo.startswith("models--") or len(repo) == len("models--"):
        return None
    return repo[len("models--"):].replace("--", "/")


def to_hf_config(spec: ModelSpec) -> dict[str, Any]:
    """A config dict (``model_type`` included) that transformers builds this architecture from."""
    if spec.family in ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe"):
        cfg: dict[str, Any] = {
            "model_type": spec.family, "vocab_size": spec.vocab_size, "hidden_size": spec.hidden_size,
            "intermediate_size": spec.ffn_hidden_size, "num_hidden_layers": spec.num_layers,
            "num_attention_heads": spec.num_heads, "num_key_value_heads": spec.kv_heads,
            "head_dim": spec.head_size, "max_position_embeddings": spec.max_seq_len,
            "rms_norm_eps": spec.norm_eps, "tie_word_embeddings": spec.tied_embeddings,
            "rope_parameters": {"rope_type": "default", **(spec.rope_scaling or {}), "rope_theta": spec.rope_theta},
        }
        if spec.family in ("llama", "qwen3", "qwen3_moe"):  # one flag for q, k, v and o
            if spec.qkv_bias != spec.out_bias:
                raise ValueError(f"{spec.name}: {spec.family}'s attention_bias puts a bias on q, k, v and o together; "
                                 "set qkv_bias and out_bias alike")
            cfg["attention_bias"] = spec.qkv_bias
        if spec.family == "llama":
            cfg["mlp_bias"] = spec.mlp_bias
        if spec.family in ("mistral", "mixtral"):  # written even when None: MistralConfig defaults to 4096
            if spec.num_full_attention_layers:
                raise ValueError(f"{spec.name}: {spec.family} windows every layer or none; "
                                 "num_full_attention_layers must be 0")
            cfg["sliding_window"] = spec.sliding_window
        if spec.family == "qwen3_moe":  # every layer sparse (see _check_every_layer_sparse), or every one windowed
            cfg.update(moe_intermediate_size=spec.ffn_hidden_size, num_experts=spec.num_experts,
                       num_experts_per_tok=spec.experts_per_token, norm_topk_prob=True, decoder_sparse_step=1,
                       mlp_only_layers=[], use_sliding_window=spec.sliding_window is not None)
            if spec.num_full_attention_layers:
                raise ValueError(f"{spec.name}: qwen3_moe windows every layer or none; "
                                 "num_full_attention_layers must be 0")
            if spec.sliding_window is not None:
                cfg["sliding_window"] = spec.sliding_window
        if spec.family in ("qwen2", "qwen3"):  # layers at index >= max_window_layers use the window (Qwen2Config)
            cfg["use_sliding_window"] = spec.sliding_window is not None
            if spec.sliding_window is not None:
                cfg["sliding_window"] = spec.sliding_window
                cfg["max_window_layers"] = spec.num_full_attention_layers
        if spec.family == "mixtral":
            cfg["num_local_experts"] = spec.num_experts
            cfg["num_experts_per_tok"] = spec.experts_per_token
        return cfg
    if spec.family == "gpt2":
        return {
            "model_type": "gpt2", "vocab_size": spec.vocab_size, "n_embd": spec.hidden_size,
            "n_layer": spec.num_layers, "n_head": spec.num_heads, "n_inner": spec.ffn_hidden_size,
            "n_positions": spec.max_seq_len, "layer_norm_epsilon": spec.norm_eps,
            "tie_word_embeddings": spec.tied_embeddings,
            "bos_token_id": min(50256, spec.vocab_size - 1), "eos_token_id": min(50256, spec.vocab_size - 1),
        }
    if spec.family == "bert":
        return {
            "model_type": "bert", "vocab_size": spec.vocab_size, "hidden_size": spec.hidden_size,
            "num_hidden_layers": spec.num_layers, "num_attention_heads": spec.num_heads,
            "intermediate_size": spec.ffn_hidden_size, "max_position_embeddings": spec.max_seq_len,
            "type_vocab_size": spec.type_vocab_size, "layer_norm_eps": spec.norm_eps,
        }
    if spec.family == "vit":
        return {
            "model_type": "vit", "hidden_size": spec.hidden_size, "num_hidden_layers": spec.num_layers,
            "num_attention_heads": spec.num_heads, "intermediate_size": spec.ffn_hidden_size,
            "image_size": spec.image_size, "patch_size": spec.patch_size, "num_channels": spec.num_channels,
            "layer_norm_eps": spec.norm_eps, "qkv_bias": True,
        }
    cfg = {
        "model_type": "resnet", "depths": list(spec.stage_depths), "hidden_sizes": list(spec.stage_widths),
        "embedding_size": spec.stem_width, "num_channels": spec.num_channels, "layer_type": "bottleneck",
        "image_size": spec.image_size,
    }
    if spec.num_labels is not None:
        cfg["id2label"] = {str(i): f"LABEL_{i}" for i in range(spec.num_labels)}
    return cfg
