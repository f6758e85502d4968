"""`accelkit models show|list` state only what the architecture has (found in a hunt: `models show resnet-50` listed
'norm rmsnorm, position rope, rope_theta 10000, norm_eps 1e-05' — ModelSpec's defaults read as facts about a CNN —,
GPT-3 and BERT a rope_theta beside their learned positions; `models list` gave Qwen3-32B as 'h5120 heads 64/8',
which reads as heads of 80, its config's head_dim is 128)."""

from __future__ import annotations

import pytest

from accelkit.cli.app import main


def _rows(capsys, *argv: str) -> dict[str, str]:
    main(list(argv))
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) >= 2 and cells[0]:
            rows[cells[0]] = cells[1]
    return rows


@pytest.mark.parametrize(("model", "absent"), [
    ("resnet-50", ("norm", "position", "rope_theta", "norm_eps")),
    ("gpt3-175b", ("rope_theta",)),
    ("bert-base", ("rope_theta",)),
    ("vit-b16", ("rope_theta",)),
])
def test_models_show_lists_no_field_the_architecture_lacks(capsys, monkeypatch, model, absent):
    monkeypatch.setenv("COLUMNS", "250")
    rows = _rows(capsys, "models", "show", model)
    assert rows["params"]  # the table was parsed
    assert not set(absent) & set(rows), rows


def test_models_show_keeps_the_rope_fields_of_a_rope_model(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    rows = _rows(capsys, "models", "show", "llama-3.1-8b")
    assert rows["position"] == "rope" and rows["rope_theta"] == "500000.0" and "llama3" in rows["rope_scaling"]


def test_models_list_shows_a_head_dim_that_is_not_hidden_over_heads(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    main(["models", "list"])
    shapes = {line.split("│")[1].strip(): line.split("│")[6].strip()
              for line in capsys.readouterr().out.splitlines() if line.count("│") >= 7}
    assert shapes["qwen3-32b"] == "L64 h5120 heads 64/8×128 ffn 25600"
    assert shapes["qwen3-30b-a3b"] == "L48 h2048 heads 32/4×128 ffn 768, 128×top8"
    assert shapes["qwen3-8b"] == "L36 h4096 heads 32/8 ffn 12288"  # 4096 / 32 = 128: nothing to add


@pytest.mark.parametrize("model", ["", "  "])
def test_models_show_refuses_an_empty_model_instead_of_reading_the_working_directory(tmp_path, capsys, monkeypatch,
                                                                                      model):
    # an unset "$MODEL" showed ./config.json as if it had been named (Path("") is ".")
    import json

    from accelkit.models import get_preset, to_hf_config

    (tmp_path / "config.json").write_text(json.dumps(to_hf_config(get_preset("tiny-llama"))))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["models", "show", model])
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert "params" not in captured.out
    assert captured.err.strip().splitlines() == [
        "error: models show: the model is empty; give a preset name (`accelkit models list`), a config.json, or a "
        "directory holding one"]


def test_a_blank_model_is_refused_by_every_command_that_resolves_one(tmp_path, monkeypatch):
    """`--model ""` (an unset "$MODEL") resolved to the current directory: plan planned whatever ./config.json held."""
    from accelkit.core import UserError
    from accelkit.models import resolve_model

    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    monkeypatch.chdir(tmp_path)
    for blank in ("", "  "):
        with pytest.raises(UserError, match="the model is empty; give a preset name"):
            resolve_model(blank)
