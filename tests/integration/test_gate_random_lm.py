"""The default top-1 gate on a random-init language model (what `accelkit tune llm-train` gates): bf16's logits
differ from fp32's by rounding only and pass; a model with other weights fails. Before the clear-margin rule the
near-tied logits of random weights failed bf16 at 95% agreement (cosine 0.9999)."""

import copy
import json

import torch

from accelkit.core import Recipe
from accelkit.models import resolve_model
from accelkit.models.build import build_model
from accelkit.recipes import apply
from accelkit.recipes.gates import check

LLAMA = {
    "model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 32, "num_hidden_layers": 4, "vocab_size": 5000,
    "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False,
}


def test_bf16_of_a_random_llm_passes_and_other_weights_fail(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    spec = resolve_model(str(path))
    model = build_model(spec, seed=0).eval()
    ids = torch.randint(0, spec.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        ref = model(input_ids=ids).logits
        bf16 = apply(copy.deepcopy(model), Recipe(precision="bf16"))(input_ids=ids).logits
        other = build_model(spec, seed=1).eval()(input_ids=ids).logits
    result = check(ref, bf16, logits=True)
    assert result.criterion == "top1" and result.passed, result
    assert result.drift.num_top1_positions is not None and result.drift.num_top1_positions > 64  # most positions count
    broken = check(ref, other, logits=True)
    assert broken.criterion == "top1" and not broken.passed
