"""`accelkit plan`'s model answers (issue 29 item 11): a model name plans that model or is an error — llama-3-70b
was silently llama-3.1-70b —; the unknown-model error says a config.json path is accepted; a plan that does not
fit says what would, each suggestion checked by planning it. In process."""

import json

from accelkit.models import get_preset
from tests.conftest import run_cli

#: Llama 2 13B's Hugging Face config.json (meta-llama/Llama-2-13b-hf): no preset, so it also takes the path route
LLAMA2_13B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 5120,
              "intermediate_size": 13824, "num_attention_heads": 40, "num_hidden_layers": 40, "num_key_value_heads": 40,
              "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "float16"}


def _main(capsys, *args: str) -> tuple[int, str, str]:
    """`accelkit plan ARGS` through the console script's entry point in this process, with its own stdout and stderr
    (`run_cli`): (exit code, stdout, stderr). What these answers say does not depend on a new process (each command
    as its own process is test_cli_processes.py's)."""
    del capsys
    proc = run_cli("plan", *args)
    return proc.returncode, proc.stdout, proc.stderr


def test_llama_3_is_not_silently_llama_3_1(capsys):
    # before: --model llama-3-70b planned llama-3.1-70b (128K context, llama3 RoPE scaling) without a word
    for name, other in (("llama-3-70b", "llama-3.1-70b"), ("llama-3-8b", "llama-3.1-8b")):
        code, out, err = _main(capsys, "--model", name, "--hardware", "h100", "--num-devices", "8", "--json")
        assert code == 0, err
        assert json.loads(out)["model"]["name"] == name
        spec, newer = get_preset(name), get_preset(other)
        assert (spec.max_seq_len, spec.rope_scaling) == (8192, None) and newer.max_seq_len == 131072
        assert spec.num_params() == newer.num_params()  # the same dimensions: only the context differs
    args = ["--hardware", "h100", "--num-devices", "8", "--task", "infer", "--prompt-len", "8000", "--output-len", "500"]
    code, _, err = _main(capsys, "--model", "llama-3-70b", *args)
    assert code == 0 and "exceeds llama-3-70b's context of 8192" in err
    code, _, err = _main(capsys, "--model", "llama-3.1-70b", *args)
    assert code == 0 and "exceeds" not in err


def test_unknown_model_error_says_a_config_json_path_is_accepted(capsys):
    code, _, err = _main(capsys, "--model", "llama-3.2-70b", "--hardware", "h100")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("error: unknown model 'llama-3.2-70b'; did you mean llama-3.1-70b")
    assert "or give the path of a Hugging Face config.json (or of a directory holding one)" in lines[0]


def test_a_plan_that_does_not_fit_says_what_would(capsys, tmp_path):
    # before: a 13B full fine-tune on one 80 GB GPU printed "NO — over by 119 GiB" and nothing about what fits
    config = tmp_path / "llama-2-13b" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(LLAMA2_13B))
    base = ["--model", str(config), "--hardware", "h100"]
    code, out, err = _main(capsys, *base, "--num-devices", "1", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["fits"] is False
    hints = doc["overflow"]["would_fit"]
    # each suggestion is true: --offload fits on the one device, and the count named is the smallest that fits
    assert hints[0] == "--offload (optimizer states in host memory, ZeRO-Offload) on the same 1 device(s)"
    code, out, err = _main(capsys, *base, "--num-devices", "1", "--offload", "--json")
    assert code == 0 and json.loads(out)["fits"] is True, err
    code, out, err = _main(capsys, *base, "--json")
    smallest = json.loads(out)["hardware"]["num_devices"]
    assert code == 0 and smallest > 1
    assert hints[1] == f"--num-devices {smallest}, the smallest count that fits"
    code, out, _ = _main(capsys, *base, "--num-devices", "1")
    assert code == 0 and "would fit: --offload" in out and f"--num-devices {smallest}, the smallest" in " ".join(
        line.strip("│ ") for line in out.splitlines())
