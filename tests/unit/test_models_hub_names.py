"""Models named as the Hugging Face Hub names them: a Hub cache snapshot by its repo id (not the commit hash of its
folder), and a Hub id that is no path here answered with the closest presets."""

import json

import pytest

from accelkit.core import UserError
from accelkit.models import resolve_model

QWEN3_0_6B = {"model_type": "qwen3", "head_dim": 128, "hidden_size": 1024, "intermediate_size": 3072,
              "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 151936,
              "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000, "tie_word_embeddings": True}
SHA = "c1899de289a04d12100db370d81485cdf75e47ca"


def _hub_cache(root, repo_folder: str):
    """The layout huggingface_hub writes: snapshots/<sha>/config.json, a link into blobs/."""
    blob = root / repo_folder / "blobs" / "0a1b2c3d"
    blob.parent.mkdir(parents=True)
    blob.write_text(json.dumps(QWEN3_0_6B))
    snapshot = root / repo_folder / "snapshots" / SHA
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to("../../blobs/0a1b2c3d")
    return snapshot


@pytest.mark.parametrize(("folder", "name"), [("models--Qwen--Qwen3-0.6B", "Qwen/Qwen3-0.6B"), ("models--gpt2", "gpt2")])
def test_a_hub_cache_snapshot_is_named_by_its_repo_id(tmp_path, folder, name):
    snapshot = _hub_cache(tmp_path, folder)
    assert resolve_model(str(snapshot)).name == name
    assert resolve_model(str(snapshot / "config.json")).name == name


def test_other_folders_keep_their_own_name(tmp_path):
    folder = tmp_path / "snapshots" / "my-model"  # a folder called snapshots outside a Hub cache
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(QWEN3_0_6B))
    assert resolve_model(str(folder)).name == "my-model"


@pytest.mark.parametrize(("hub_id", "preset"), [("meta-llama/Llama-3.1-8B", "llama-3.1-8b"), ("Qwen/Qwen3-8B", "qwen3-8b")])
def test_a_hub_id_suggests_the_closest_preset(tmp_path, monkeypatch, hub_id, preset):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as caught:
        resolve_model(hub_id)
    message = str(caught.value)
    assert message.startswith(f"unknown model {hub_id!r}; did you mean {preset}") and "Hub id" in message


def test_a_folder_shaped_like_a_hub_id_is_still_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Qwen" / "Qwen3-0.6B").mkdir(parents=True)
    (tmp_path / "Qwen" / "Qwen3-0.6B" / "config.json").write_text(json.dumps(QWEN3_0_6B))
    assert resolve_model("Qwen/Qwen3-0.6B").num_layers == 28
