"""A Hugging Face config.json whose numbers the planner reads hold Infinity, -Infinity or NaN (Python's json reads
them, and 1e400 as Infinity; no strict JSON parser does): refused in one line naming the file, the key and the fix.
`"rope_theta": Infinity` was shown by `models show` and planned by `plan --model DIR` (exit 0); a NaN epsilon was
refused under the spec's name (norm_eps), not the file's key. Keys accelkit does not read are left alone, as a
diffusers scheduler's `"lambda_min_clipped": -Infinity` must be."""

from __future__ import annotations

import json

import pytest

from accelkit.models import from_hf_config, get_preset, load_config, to_hf_config

BASE = to_hf_config(get_preset("tiny-llama"))  # v5 style: rope_theta and the llama3 scaling in rope_parameters
V4 = {k: v for k, v in BASE.items() if k != "rope_parameters"}


def _write(tmp_path, text: str):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(text)
    return folder


def _with(data: dict, key: str, literal: str) -> str:
    """``data`` as JSON with ``key`` set to ``literal`` as written (Infinity, NaN, 1e400)."""
    return json.dumps({**data, key: "@@"}).replace('"@@"', literal)


@pytest.mark.parametrize(("data", "key", "literal", "named", "fix"), [
    (V4, "rope_theta", "Infinity", "'rope_theta'", "got Infinity; write one such as 10000, or leave the key out"),
    (V4, "rope_theta", "1e400", "'rope_theta'", "got Infinity; write one such as 10000, or leave the key out"),
    # an integer no float holds: float() raised OverflowError, an internal error
    (V4, "rope_theta", "1" + "0" * 400, "'rope_theta'", "got Infinity; write one such as 10000, or leave the key out"),
    (BASE, "rms_norm_eps", "1" + "0" * 400, "'rms_norm_eps'",
     "got Infinity; write one such as 1e-06, or leave the key out"),
    (BASE, "rms_norm_eps", "NaN", "'rms_norm_eps'", "got NaN; write one such as 1e-06, or leave the key out"),
    (BASE, "rms_norm_eps", "-Infinity", "'rms_norm_eps'",
     "got -Infinity; write one such as 1e-06, or leave the key out"),
])
def test_a_non_finite_number_is_refused_naming_the_file_and_key(tmp_path, cli, data, key, literal, named, fix):
    folder = _write(tmp_path, _with(data, key, literal))
    expected = f"error: {folder / 'config.json'}: field {named} must be a finite number, {fix}"
    for args in (("models", "show", str(folder)), ("plan", "--model", str(folder), "--hardware", "h100")):
        proc = cli(*args)
        assert proc.returncode == 2 and proc.stdout == "", (args, proc.stdout)
        assert proc.stderr.strip().splitlines() == [expected], args


@pytest.mark.parametrize(("data", "named"), [
    ({**BASE, "rope_parameters": {**BASE["rope_parameters"], "rope_theta": float("inf")}},
     "'rope_parameters.rope_theta' must be a finite number, got Infinity; write one such as 10000"),
    ({**BASE, "rope_parameters": {**BASE["rope_parameters"], "factor": float("nan")}},
     "'rope_parameters.factor' must be a finite number, got NaN; write one"),
    ({**V4, "rope_scaling": {"rope_type": "linear", "factor": float("inf")}},
     "'rope_scaling.factor' must be a finite number, got Infinity; write one"),
    ({**V4, "rope_scaling": {"rope_type": "longrope", "long_factor": [1.0, float("inf")], "short_factor": [1.0]}},
     "'rope_scaling.long_factor[1]' must be a finite number, got Infinity; write one"),
])
def test_rope_parameters_are_named_where_they_are(tmp_path, data, named):
    folder = _write(tmp_path, json.dumps(data))  # json.dumps writes inf and nan as Infinity and NaN
    with pytest.raises(ValueError) as info:
        load_config(folder)
    assert str(info.value).startswith(f"{folder / 'config.json'}: field {named}")


def test_a_config_dict_is_checked_too():
    """``from_hf_config`` takes a dict from Python, where inf needs no JSON."""
    with pytest.raises(ValueError, match=r"^config.json: field 'rope_theta' must be a finite number, got Infinity"):
        from_hf_config({**V4, "rope_theta": float("inf")})


def test_a_key_that_is_not_read_may_hold_anything(tmp_path):
    """Only the numbers the model is built from are checked: a key accelkit does not read is as before."""
    folder = _write(tmp_path, _with(BASE, "initializer_range", "NaN"))
    assert load_config(folder).num_params() == get_preset("tiny-llama").num_params()


def test_rope_scaling_as_real_configs_write_it_is_read(tmp_path):
    """Nulls, booleans and lists of factors, as checkpoints ship them (a Qwen3 with YaRN's `attention_factor: null`
    and `truncate: false`; Phi-3's longrope factor lists): `plan --model` refused each ("rope_scaling=… is not
    valid; expected dict[str, float | int | str]"). Kept as written, through the JSON round trip."""
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
               "attention_factor": None, "truncate": False, "long_factor": [1.0, 1.25]}
    model = load_config(_write(tmp_path, json.dumps({**V4, "rope_scaling": scaling})))
    assert model.rope_scaling == scaling
    assert type(model).from_dict(json.loads(json.dumps(model.to_dict()))) == model


def test_a_rope_theta_of_zero_is_refused_naming_it():
    """θ = 0 gives RoPE no frequencies (0 to a negative power is inf); it was planned as any other base."""
    from accelkit.core import UserError
    from accelkit.models import from_hf_config

    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
           "intermediate_size": 32, "vocab_size": 64, "rope_theta": 0}
    with pytest.raises(UserError, match="rope_theta=0 gives RoPE no frequencies"):
        from_hf_config(cfg)
    assert from_hf_config({**cfg, "rope_theta": 500000.0}).rope_theta == 500000.0
