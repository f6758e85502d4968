"""A config.json that leaves keys out is read with transformers' own defaults for its model_type, so `models show`
gives the numbers of the model transformers builds from the same file (found in a hunt: a Mistral config without
num_key_value_heads was planned with 32 KV heads — transformers: 8 — 4× the KV cache and 11% more parameters; one
without sliding_window with no window — transformers: 4096; a ResNet without id2label with no classifier —
transformers: 2 labels, and `bench resnet` drew labels 0…999 for its 2 outputs, an IndexError)."""

from __future__ import annotations

import json

import pytest

from accelkit.cli.app import main
from accelkit.core import UserError
from accelkit.models import from_hf_config

# only the keys accelkit requires: every other one is left to the model type's defaults
MINIMAL = {"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 32, "intermediate_size": 32,
           "vocab_size": 64}


@pytest.mark.parametrize("model_type", ["llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe"])
def test_a_minimal_decoder_config_reads_as_transformers_builds_it(model_type):
    import torch
    import transformers

    from accelkit.models.build import _CLASSES, count_parameters

    spec = from_hf_config({"model_type": model_type, **MINIMAL})
    config_cls, model_cls = (getattr(transformers, n) for n in _CLASSES[model_type])
    reference = config_cls(**MINIMAL)
    assert spec.kv_heads == reference.num_key_value_heads
    assert spec.max_seq_len == reference.max_position_embeddings
    assert spec.sliding_window == (reference.sliding_window if model_type in ("mistral", "mixtral") else None)
    assert spec.rope_theta == reference.rope_parameters["rope_theta"]
    assert spec.norm_eps == reference.rms_norm_eps
    with torch.device("meta"):
        assert spec.num_params() == count_parameters(model_cls(reference))


def test_a_missing_kv_heads_default_that_does_not_fit_the_heads_is_one_line_naming_the_key(tmp_path, capsys):
    # Qwen2Config's default of 32 KV heads cannot serve 28 query heads: named, not planned as some other model
    folder = tmp_path / "qwen"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2", **MINIMAL, "num_attention_heads": 28,
                                                    "hidden_size": 3584}))
    with pytest.raises(SystemExit) as exc:
        main(["models", "show", str(folder)])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert "'num_key_value_heads' is missing" in line and "Qwen2Config then uses 32" in line
    assert "28" in line and captured.out == ""


def test_zero_experts_is_refused_not_read_as_the_default():
    with pytest.raises(UserError, match="num_experts=0"):
        from_hf_config({"model_type": "mixtral", **MINIMAL, "num_key_value_heads": 8, "num_local_experts": 0})


def test_a_resnet_config_without_labels_counts_transformers_two_label_classifier():
    import torch
    import transformers

    cfg = {"depths": [1, 1, 1, 1], "hidden_sizes": [32, 64, 128, 256], "embedding_size": 16,
           "layer_type": "bottleneck"}
    spec = from_hf_config({"model_type": "resnet", **cfg})
    with torch.device("meta"):
        model = transformers.ResNetForImageClassification(transformers.ResNetConfig(**cfg))
    assert spec.num_labels == model.config.num_labels
    assert spec.num_params() == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("key", ["num_attention_heads", "max_position_embeddings"])
def test_zero_heads_or_positions_are_refused_naming_their_own_key(key):
    # before: 0 heads was refused as "num_kv_heads=0" (a key the config did not have), 0 positions was shown as a
    # model with a 0 B KV cache per sequence
    with pytest.raises(UserError, match=f"'{key}' must be at least 1, got 0"):
        from_hf_config({"model_type": "llama", **MINIMAL, key: 0})
