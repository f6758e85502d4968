"""The real `accelkit` command in a subprocess: --json documents, exit codes, one-line errors."""

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


def _json(cli, *args):
    proc = cli(*args, "--json", check=True)
    return json.loads(proc.stdout)  # the whole of stdout is one JSON document


def test_version(cli):
    proc = cli("--version", check=True)
    assert proc.stdout.startswith("accelkit ")


def test_hw_show_json(cli):
    h200 = _json(cli, "hw", "show", "h200")
    assert h200["memory_gb"] == 141 and h200["memory_bandwidth_tb_per_s"] == 4.8
    assert h200["peak_tflops"]["bf16"] == 989 and h200["peak_tflops"]["fp8"] == 1979
    assert "H200" in h200["source"] and h200["status"]
    mi = _json(cli, "hw", "show", "mi300x")
    assert mi["memory_gb"] == 192 and mi["memory_bandwidth_tb_per_s"] == 5.3 and mi["peak_tflops"]["bf16"] == 1307.4


def test_hw_list_and_models_list(cli):
    hardware = {h["name"] for h in _json(cli, "hw", "list")}
    assert len(hardware) == 19 and {"A100-SXM4-40GB", "H100-SXM5-96GB", "H200-SXM-141GB", "MI300X"} <= hardware
    names = {m["name"] for m in _json(cli, "models", "list")}
    assert {"llama-3.1-405b", "mixtral-8x7b", "vit-b16", "resnet-152", "tiny-llama"} <= names


@pytest.mark.parametrize(
    ("name", "params", "active"),
    [("llama-3.1-8b", 8_030_261_248, None), ("llama-3.1-70b", 70_553_706_496, None), ("qwen2.5-7b", 7_615_616_512, None),
     ("mixtral-8x7b", 46_702_792_704, 12_879_925_248), ("bert-large", 335_141_888, None)],
)
def test_models_show_params(cli, name, params, active):
    data = _json(cli, "models", "show", name)
    assert data["params"] == params
    assert data["active_params"] == (active or params)


def test_models_show_config_json(cli, tmp_path):
    from accelkit.models import get_preset, to_hf_config

    (tmp_path / "config.json").write_text(json.dumps(to_hf_config(get_preset("mixtral-8x7b"))))
    assert _json(cli, "models", "show", str(tmp_path))["params"] == 46_702_792_704


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("hw", "show", "nosuch"), "unknown hardware 'nosuch'"),
        (("hw", "show", "h300"), "did you mean H200"),
        (("models", "show", "lama-3.1-8b"), "did you mean llama-3.1-8b"),
        (("hw", "probe", "--dtype", "tf32"), "cpu has no tf32"),
        (("hw", "probe", "--dtype", "int4"), "'int4' is not valid"),
        (("hw", "probe", "--copy-size", "lots"), "--copy-size='lots' is not a size"),
        (("results", "show", "12345"), "no result with id 12345"),
        (("results", "export", "--format", "xml"), "'xml' is not one of 'json', 'csv'"),
        (("hw", "list", "--bogus"), "No such option"),
    ],
)
def test_user_mistakes_exit_2_with_one_line(cli, args, needle):
    proc = cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert needle.lower() in proc.stderr.lower()
    assert "Traceback" not in proc.stderr
    # one line; a check that needs torch loaded (hw probe's device and dtypes) may follow a progress line (#29)
    *progress, error = proc.stderr.strip().splitlines()
    assert error.startswith("error: ") and all(re.match(r"\[ *\d+\.\d s\] ", line) for line in progress), proc.stderr
    assert proc.stdout == ""


def test_malformed_config_names_field(cli, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    proc = cli("models", "show", str(tmp_path / "config.json"))
    assert proc.returncode == 2 and "'num_hidden_layers', 'num_attention_heads', 'intermediate_size', 'vocab_size' are missing" in proc.stderr


def test_light_commands_do_not_import_torch():
    code = (
        "import sys\nfrom accelkit.cli.app import main\n"
        "for argv in (['hw','show','h200','--json'], ['models','show','llama-3.1-70b','--json'],"
        " ['hw','list','--json'], ['models','list','--json'], ['results','list','--json'],"
        " ['models','show','sd3-medium','--json'],"
        " ['plan','--model','sd3-medium','--task','infer','--compare','h100,h200,mi300x,b200','--json']):\n"
        "    try:\n        main(argv)\n    except SystemExit as e:\n        assert not e.code, e.code\n"
        "bad = [m for m in ('torch', 'transformers', 'diffusers') if m in sys.modules]\nassert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, capture_output=True)


def test_serve_refuses_a_bad_model_directory_before_importing_torch(tmp_path):
    """#29: serve's progress starts once the checks that need no torch have passed, so these fail in one line
    without the seconds torch takes to import (a fresh interpreter: what is imported is what this tests)."""
    cases = {"list": b"[1, 2]", "unsupported": json.dumps({"architectures": ["GPT2LMHeadModel"]}).encode(),
             "positions": None}
    for name, config in cases.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_bytes(config or json.dumps({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
            "max_position_embeddings": 128}).encode())
    (tmp_path / "positions" / "model.safetensors").write_bytes(b"not a safetensors file" * 20)
    code = (
        "import sys\nfrom accelkit.cli.app import main\n"
        f"for argv in (['serve','--model',{str(tmp_path / 'list')!r}], ['serve','--model',{str(tmp_path / 'unsupported')!r}],"
        f" ['serve','--model',{str(tmp_path / 'positions')!r},'--max-model-len','4096'],"
        f" ['serve','--model',{str(tmp_path / 'positions')!r}]):\n"
        "    try:\n        main(argv)\n    except SystemExit as e:\n        assert e.code == 2, (argv, e.code)\n"
        "bad = [m for m in ('torch', 'transformers', 'fastapi') if m in sys.modules]\nassert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 0 and len(lines) == 4 and all(line.startswith("error: ") for line in lines), proc.stderr
    assert "holds a JSON list" in lines[0] and "GPT2LMHeadModel" in lines[1] and "--max-model-len 4096" in lines[2]
    assert "is not a safetensors file" in lines[3]


def test_probe_quick_json_stores_and_lists(cli):
    data = _json(cli, "hw", "probe", "--quick", "--min-time", "0.05")  # the default sizes, short loops
    for dtype in ("fp32", "bf16"):
        m = data["details"]["matmul"][dtype]
        assert m["tflops"] > 0 and m["stats"]["n"] >= 5 and m["stats"]["median"] == m["tflops"]
        assert {"p50", "p90", "p99", "stdev", "cv", "iqr_over_median"} <= set(m["stats"])
        assert len(data["samples"][f"matmul_{dtype}_tflops"]) == m["stats"]["n"]
    bw = data["details"]["bandwidth"]
    assert bw["gbps"] > 0 and bw["stats"]["n"] >= 5
    assert data["environment"]["torch_threads"] >= 1
    listed = _json(cli, "results", "list")
    assert listed[0]["id"] == data["result_id"] and listed[0]["kind"] == "probe"
    shown = _json(cli, "results", "show", str(data["result_id"]))
    assert shown["details"]["matmul"]["bf16"]["tflops"] == data["details"]["matmul"]["bf16"]["tflops"]
    csv_text = cli("results", "export", "--format", "csv", check=True).stdout
    assert csv_text.splitlines()[1].startswith(str(data["result_id"]))


def test_human_output_renders(cli):
    proc = cli("hw", "show", "mi300x", check=True)
    assert "1307.4 TFLOP/s" in proc.stdout and "per peer" in proc.stdout
    proc = cli("results", "list", check=True)
    assert "No results yet" in proc.stdout
