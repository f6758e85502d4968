import json

import pytest

from accelkit.core import UserError
from accelkit.models import PRESETS, from_hf_config, get_preset, load_config, resolve_model, to_hf_config

# exact transformers counts (acceptance criteria of the foundation issue)
EXPECTED = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "qwen2.5-7b": 7_615_616_512,
    "mixtral-8x7b": 46_702_792_704,
    # the totals Qwen's model cards state (8.2B, 32.8B, 30.5B with 3.3B activated, 235B with 22B activated)
    "qwen3-8b": 8_190_735_360,
    "qwen3-32b": 32_762_123_264,
    "qwen3-30b-a3b": 30_532_122_624,
    "qwen3-235b-a22b": 235_093_634_560,
    "bert-large": 335_141_888,
    "resnet-50": 25_557_032,
}


@pytest.mark.parametrize(("name", "params"), EXPECTED.items())
def test_published_parameter_counts(name, params):
    assert get_preset(name).num_params() == params


def test_mixtral_active_params():
    spec = get_preset("mixtral-8x7b")
    # 2 of 8 experts per layer: total − 32 layers · 6 idle experts · 3·4096·14336
    assert spec.num_active_params() == 46_702_792_704 - 32 * 6 * 3 * 4096 * 14336 == 12_879_925_248


def test_kv_bytes_per_token():
    # 2 · 80 layers · 8 kv heads · 128 · 2 bytes = 320 KiB per token for Llama 3.1 70B in bf16
    assert get_preset("llama-3.1-70b").kv_bytes_per_token(2) == 327_680
    assert get_preset("bert-base").kv_bytes_per_token(2) == 0


@pytest.mark.parametrize("name", list(PRESETS))
def test_hf_config_roundtrip(name):
    spec = get_preset(name)
    again = from_hf_config(json.loads(json.dumps(to_hf_config(spec))), name=name)
    assert again.num_params() == spec.num_params()
    assert again.replace(max_seq_len=spec.max_seq_len) == spec.replace(max_seq_len=spec.max_seq_len)


def test_load_config_from_dir_and_file(tmp_path):
    cfg = to_hf_config(get_preset("qwen2.5-7b"))
    model_dir = tmp_path / "qwen"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(cfg))
    assert load_config(model_dir).num_params() == 7_615_616_512
    assert resolve_model(str(model_dir / "config.json")).num_params() == 7_615_616_512


def test_v4_style_rope_fields_are_read():
    cfg = {**to_hf_config(get_preset("llama-3.1-8b")), "rope_theta": 500000.0,
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
    cfg.pop("rope_parameters")
    spec = from_hf_config(cfg)
    assert spec.rope_theta == 500000.0 and spec.rope_scaling["factor"] == 8.0


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.pop("hidden_size"), "field 'hidden_size' is missing"),
        (lambda c: c.update(num_hidden_layers="32"), "field 'num_hidden_layers' must be a non-negative integer"),
        (lambda c: c.update(num_hidden_layers=-1), "num_hidden_layers"),
        (lambda c: c.update(tie_word_embeddings="yes"), "tie_word_embeddings"),
        (lambda c: c.update(model_type="gptj"), "model_type 'gptj' is not supported"),
        (lambda c: c.pop("model_type"), "field 'model_type' is missing"),
        (lambda c: c.update(num_key_value_heads=5), "num_kv_heads"),
    ],
)
def test_malformed_config_names_the_field(tmp_path, mutate, message):
    cfg = to_hf_config(get_preset("llama-3.1-8b"))
    mutate(cfg)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(UserError, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_invalid_json_and_missing_file(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON.*line 1"):
        load_config(bad)
    with pytest.raises(UserError, match="no config.json"):
        load_config(tmp_path / "nowhere")


TINY = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}


@pytest.mark.parametrize(("model_type", "biases"), [
    ("llama", {}), ("llama", {"attention_bias": True}), ("llama", {"mlp_bias": True}),
    ("llama", {"attention_bias": True, "mlp_bias": True}),
    ("mistral", {"attention_bias": True, "mlp_bias": True}),  # MistralAttention / MLP: bias=False whatever
    ("mixtral", {"attention_bias": True}), ("qwen2", {}), ("qwen3", {}), ("qwen3", {"attention_bias": True}),
    ("qwen3_moe", {"attention_bias": True, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}),
])
def test_hf_biases_count_like_transformers(model_type, biases):
    # before: llama's attention_bias left out o_proj's bias, mlp_bias was ignored, and mistral's attention_bias
    # added q/k/v biases transformers does not build
    import torch
    import transformers

    from accelkit.models.build import _CLASSES, build_model, count_parameters

    cfg = {**TINY, **biases}
    spec = from_hf_config({"model_type": model_type, **cfg})
    config_cls, model_cls = (getattr(transformers, n) for n in _CLASSES[model_type])
    with torch.device("meta"):
        reference = count_parameters(model_cls(config_cls(**cfg)))
    assert spec.num_params() == reference
    assert count_parameters(build_model(spec, device="meta")) == reference  # and to_hf_config carries them back


def test_sliding_window_is_carried_and_caps_the_kv_cache(tmp_path, capsys):
    # before: "sliding_window": 4096 was dropped, so a 32k-context Mistral's KV cache was planned over 32k tokens
    import json as _json

    from accelkit.cli.app import main
    from accelkit.models.build import hf_config

    cfg = {"model_type": "mistral", **TINY, "max_position_embeddings": 32768, "sliding_window": 4096}
    spec = from_hf_config(cfg)
    assert spec.sliding_window == 4096
    assert (spec.kv_cache_tokens(32768), spec.kv_cache_tokens(1000)) == (4096, 1000)
    assert to_hf_config(spec)["sliding_window"] == 4096 and hf_config(spec).sliding_window == 4096
    full = from_hf_config({**cfg, "sliding_window": None})
    assert full.sliding_window is None and full.kv_cache_tokens(32768) == 32768
    assert hf_config(full).sliding_window is None  # not MistralConfig's default 4096
    assert from_hf_config({**cfg, "model_type": "llama"}).sliding_window is None  # Llama has none
    path = tmp_path / "config.json"
    path.write_text(_json.dumps(cfg))
    main(["models", "show", str(path), "--json"])
    doc = _json.loads(capsys.readouterr().out)
    assert doc["sliding_window"] == 4096
    assert doc["kv_bytes_per_sequence_bf16"] == doc["kv_bytes_per_token_bf16"] * 4096


QWEN2_WINDOWS = [  # (config fields beyond TINY's 2 layers, windowed layers): transformers' Qwen2Config decides
    ({"use_sliding_window": True, "sliding_window": 64, "max_window_layers": 1}, 1),  # layer 1 windowed
    ({"use_sliding_window": True, "sliding_window": 64, "max_window_layers": 0}, 2),  # both
    ({"use_sliding_window": True, "sliding_window": 64, "max_window_layers": 2}, 0),  # none: full attention
    ({"use_sliding_window": True, "sliding_window": 64}, 0),  # max_window_layers defaults to 28 > 2 layers
    ({"use_sliding_window": False, "sliding_window": 64, "max_window_layers": 0}, 0),  # the flag is off
    ({"sliding_window": 64, "max_window_layers": 0}, 0),  # use_sliding_window defaults to false
    ({"use_sliding_window": True, "max_window_layers": 0}, 2),  # sliding_window defaults to 4096
    ({"use_sliding_window": True, "sliding_window": None, "max_window_layers": 0}, 0),
    ({"use_sliding_window": True, "sliding_window": 64, "max_window_layers": 0,
      "layer_types": ["sliding_attention", "full_attention"]}, 1),  # listed layer types win
]


@pytest.mark.parametrize(("fields", "windowed"), QWEN2_WINDOWS)
def test_qwen2_sliding_window_follows_transformers_per_layer_rule(fields, windowed):
    # before: from_hf_config ignored Qwen2's use_sliding_window / sliding_window / max_window_layers, so a Qwen2
    # whose upper layers attend over a window was planned with every layer's KV cache over the whole context
    import transformers

    cfg = {"model_type": "qwen2", **TINY, "max_position_embeddings": 32768, **fields}
    spec = from_hf_config(cfg)
    reference = transformers.Qwen2Config(**{k: v for k, v in cfg.items() if k != "model_type"})
    assert reference.layer_types.count("sliding_attention") * (reference.sliding_window is not None) == windowed
    assert spec.num_window_layers == windowed
    window = reference.sliding_window if windowed else None
    assert spec.sliding_window == window
    # KV tokens one sequence keeps at 32k: full layers × context + windowed layers × window
    layers = TINY["num_hidden_layers"]
    assert spec.kv_cache_layer_tokens(32768) == (layers - windowed) * 32768 + windowed * (window or 0)
    assert spec.kv_bytes_per_token(2) * spec.kv_cache_tokens(32768) == pytest.approx(
        2 * spec.kv_heads * spec.head_size * 2 * spec.kv_cache_layer_tokens(32768))
    # and back: transformers builds the same windowed layers from to_hf_config
    from accelkit.models.build import hf_config

    built = hf_config(spec)
    assert built.layer_types.count("sliding_attention") * (built.sliding_window is not None) == windowed
    assert from_hf_config(to_hf_config(spec)) == spec.replace(name="qwen2")


def test_qwen2_sliding_window_sizes_the_planned_kv_cache():
    # 28-layer Qwen2 at 32K context, window 4096 on the 8 layers from max_window_layers 20: 20·32768 + 8·4096
    from accelkit.plan.memory import kv_cache_bytes

    cfg = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
           "max_position_embeddings": 32768, "use_sliding_window": True, "sliding_window": 4096,
           "max_window_layers": 20}
    spec = from_hf_config(cfg)
    per_layer_token = 2 * 4 * 128 * 2  # K and V, 4 KV heads of 128, bf16
    full = kv_cache_bytes(spec.replace(sliding_window=None, num_full_attention_layers=0), batch=1, seq=32768,
                          kv_cache_dtype="auto", dtype_bytes=2)
    assert full == per_layer_token * 28 * 32768
    assert kv_cache_bytes(spec, batch=1, seq=32768, kv_cache_dtype="auto", dtype_bytes=2) == per_layer_token * (20 * 32768 + 8 * 4096)
    # pp 2: the first stage holds layers 0-13, all full-attention — the heaviest
    assert kv_cache_bytes(spec, batch=1, seq=32768, kv_cache_dtype="auto", dtype_bytes=2, pp=2) == per_layer_token * 14 * 32768
    assert from_hf_config({**cfg, "use_sliding_window": False}).sliding_window is None


def test_models_show_says_which_layers_a_sliding_window_covers(tmp_path, capsys, monkeypatch):
    import json as _json

    from accelkit.cli.app import main

    monkeypatch.setenv("COLUMNS", "250")
    shown = {}
    for name, extra in (("mistral", {"sliding_window": 4096}),
                        ("qwen2", {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 1})):
        path = tmp_path / f"{name}.json"
        path.write_text(_json.dumps({"model_type": name, **TINY, "max_position_embeddings": 32768, **extra}))
        main(["models", "show", str(path)])
        shown[name] = next(line for line in capsys.readouterr().out.splitlines() if "KV cache / sequence" in line)
    assert "(4,096 kept: sliding window 4,096)" in shown["mistral"]
    # Qwen2: the first max_window_layers layers keep every position — no fractional mean "kept" figure
    assert "sliding window 4,096 on 1 of 2 layers; the other 1 keep every position" in shown["qwen2"]


def test_an_architecture_transformers_refuses_is_a_usage_error_before_the_run(tmp_path):
    """transformers 5's Llama refuses hidden_size 250 with 8 heads even with head_dim 32 (which the planner models):
    the bench failed each variant's load with a truncated "StrictDataclassClassValidationError: Class validation
    error for validator 'validate_architecture'" and exit 1; now one line, exit 2, before anything runs."""
    import json

    import pytest

    from accelkit.bench.workloads import make_workload
    from accelkit.bench.workloads.base import check_workload
    from accelkit.core import UserError

    path = tmp_path / "odd" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 250, "num_attention_heads": 8, "head_dim": 32,
                                "num_key_value_heads": 2, "intermediate_size": 512, "num_hidden_layers": 2,
                                "vocab_size": 1000}))
    workload = make_workload("llm-train", {"model": str(path), "batch_size": 1, "seq_len": 16})
    with pytest.raises(UserError, match=r"cannot build this llama architecture: The hidden size \(250\) is not a "
                                        r"multiple of the number of attention heads \(8\)\.$"):
        check_workload(workload, "cpu")
    check_workload(make_workload("llm-train", {"model": "tiny-llama", "batch_size": 1, "seq_len": 16}), "cpu")


def test_a_config_file_is_named_after_itself_and_a_config_json_after_its_folder(tmp_path, monkeypatch):
    """Every file was named after its folder: llama_s.json and llama_xl.json side by side were both 'r2' in results
    and sweep labels; a config.json given by a relative name from inside its folder lost the folder's name."""
    import json

    cfg = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
           "num_hidden_layers": 2, "vocab_size": 100}
    folder = tmp_path / "r2"
    folder.mkdir()
    for name in ("llama_s.json", "llama_xl.json", "config.json"):
        (folder / name).write_text(json.dumps(cfg))
    assert [load_config(folder / n).name for n in ("llama_s.json", "llama_xl.json")] == ["llama_s", "llama_xl"]
    assert load_config(folder).name == load_config(folder / "config.json").name == "r2"
    monkeypatch.chdir(folder)
    assert load_config("config.json").name == "r2"
    # a Hub cache: snapshots/<sha>/config.json is a link into blobs/ — named after the snapshot, not 'blobs'
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "abc123"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    (blobs / "f00d").write_text(json.dumps(cfg))
    (snapshot / "config.json").symlink_to(blobs / "f00d")
    assert load_config(snapshot).name == load_config(snapshot / "config.json").name == "abc123"


@pytest.mark.parametrize(("fields", "named"), [({"mlp_only_layers": [1]}, "mlp_only_layers"),
                                               ({"decoder_sparse_step": 2}, "decoder_sparse_step")])
def test_qwen3_moe_with_dense_layers_is_refused_naming_the_field(fields, named):
    # a ModelSpec has one MLP kind for all layers: counting a dense layer as sparse would misstate weights and FLOPs
    cfg = {**to_hf_config(get_preset("tiny-qwen3-moe")), **fields}
    with pytest.raises(UserError, match=f"field '{named}'.*every layer sparse"):
        from_hf_config(cfg)
