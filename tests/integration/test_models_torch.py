"""Every preset's analytic parameter count equals the transformers model built from the same config."""

import json

import pytest
import torch
import transformers

from accelkit.models import PRESETS, get_preset, load_config
from accelkit.models.build import build_model, count_parameters, hf_config


@pytest.mark.parametrize("name", list(PRESETS))
def test_num_params_equals_transformers_on_meta(name):
    spec = get_preset(name)
    model = build_model(spec, device="meta")
    assert count_parameters(model) == spec.num_params()


def test_config_saved_by_transformers_imports_back(tmp_path):
    for name in ("tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-qwen3-moe", "tiny-mixtral", "tiny-bert", "tiny-vit",
                 "tiny-resnet", "tiny-gpt"):
        spec = get_preset(name)
        hf_config(spec).save_pretrained(tmp_path / name)  # transformers' own config.json
        assert json.loads((tmp_path / name / "config.json").read_text())["model_type"]
        again = load_config(tmp_path / name)
        assert again.num_params() == spec.num_params(), name


def test_tiny_models_run_forward():
    torch.manual_seed(0)
    llama = build_model(get_preset("tiny-llama"))
    logits = llama(torch.randint(0, 512, (2, 16))).logits
    assert logits.shape == (2, 16, 512) and torch.isfinite(logits).all()
    bert = build_model(get_preset("tiny-bert"))
    assert bert(torch.randint(0, 1024, (2, 16))).last_hidden_state.shape == (2, 16, 64)
    vit = build_model(get_preset("tiny-vit"))
    assert vit(torch.randn(2, 3, 32, 32)).last_hidden_state.shape == (2, 17, 64)
    resnet = build_model(get_preset("tiny-resnet"))
    assert resnet(torch.randn(2, 3, 64, 64)).logits.shape == (2, 10)
    assert isinstance(llama, transformers.LlamaForCausalLM)


def test_build_is_seeded():
    a = build_model(get_preset("tiny-llama"), seed=3)
    b = build_model(get_preset("tiny-llama"), seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
