"""``build_model(spec, dtype=...)`` builds what transformers' ``from_config(config, dtype=...)`` builds: it called
``model.to(dtype)``, which also cast the buffers transformers computes in fp32 on purpose (RoPE's ``inv_freq``: a
bf16 one puts an angle error growing with the position into every logit), on the real and the meta device alike."""

from __future__ import annotations

import pytest
import torch

from accelkit.models import get_preset
from accelkit.models.build import build_model, hf_config

transformers = pytest.importorskip("transformers")

AUTO = {"llama": "AutoModelForCausalLM", "mixtral": "AutoModelForCausalLM", "qwen2": "AutoModelForCausalLM",
        "gpt2": "AutoModelForCausalLM", "bert": "AutoModel", "vit": "AutoModel",
        "resnet": "AutoModelForImageClassification"}


def _dtypes(model: torch.nn.Module) -> dict[str, torch.dtype]:
    return {name: t.dtype for name, t in [*model.named_parameters(), *model.named_buffers()]}


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-mixtral", "tiny-qwen2", "tiny-gpt", "tiny-bert", "tiny-vit",
                                  "tiny-resnet"])
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_every_tensor_has_the_dtype_transformers_from_config_gives_it(name, device):
    spec = get_preset(name)
    auto = getattr(transformers, AUTO[spec.family])
    with torch.device(device):
        expected = _dtypes(auto.from_config(hf_config(spec), dtype=torch.bfloat16))
    built = build_model(spec, device=device, dtype=torch.bfloat16)
    assert _dtypes(built) == expected
    assert {t.device.type for t in [*built.parameters(), *built.buffers()]} == {device}
    assert {p.dtype for p in built.parameters()} == {torch.bfloat16}


def test_rope_inv_freq_stays_the_fp32_one():
    spec = get_preset("tiny-llama")
    fp32 = build_model(spec).model.rotary_emb
    bf16 = build_model(spec, dtype=torch.bfloat16)
    rotary = bf16.model.rotary_emb
    assert rotary.inv_freq.dtype == rotary.original_inv_freq.dtype == torch.float32
    assert torch.equal(rotary.inv_freq, fp32.inv_freq)
    # and the model runs, its logits in bf16
    with torch.inference_mode():
        assert bf16(input_ids=torch.zeros(1, 4, dtype=torch.long)).logits.dtype == torch.bfloat16
