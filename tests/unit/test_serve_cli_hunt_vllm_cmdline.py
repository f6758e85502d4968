"""`accelkit serve` with a command line pasted from `vllm serve`: the model as the first argument, several ids after
one `--served-model-name`, vLLM's boolean spellings (`--enable-prefix-caching`, `--no-enable-chunked-prefill`, `-tp`),
its token counts (`--max-model-len 32k`/`32K`/`auto`/`-1`) and the flags it passes that accelkit either honours, takes
as no-ops or refuses in one line naming what to use. Before, each was a click error ("Got unexpected extra
argument(s) (b)", "No such option", "Missing option '--model'", "unable to parse string as an integer"). Each runs in
process and stops before the slow part, at the bind of a port another socket holds: a line naming that port is the
proof that every flag before it was taken."""

from __future__ import annotations

import pytest
import typer

from accelkit.cli.app import app
from accelkit.cli.serve import _max_model_len, _token_count, vllm_argv
from accelkit.cli.spec_options import generated_options
from accelkit.core import UserError
from accelkit.serve.config import EngineConfig
from accelkit.serve.testing import save_tiny_model
from tests.conftest import serve_in_process as _serve


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("servecli_vllm") / "tiny")  # max_position_embeddings 2048


def _reached_the_bind(code, lines, port):
    return code == 2 and len(lines) == 1 and str(port) in lines[0]


def test_several_served_model_names_after_one_flag_as_vllm_takes_them(capsys, model_dir, busy_port):
    code, lines = _serve(capsys, "--model", str(model_dir), "--served-model-name", "a", "b", "c", "--port",
                         str(busy_port))
    assert _reached_the_bind(code, lines, busy_port), lines
    assert vllm_argv(["--served-model-name", "a", "b", "c", "--port", "1"]) == [
        "--served-model-name", "a", "--served-model-name", "b", "--served-model-name", "c", "--port", "1"]
    # a bare word elsewhere is no served name: it is refused as an extra argument
    code, lines = _serve(capsys, "--model", str(model_dir), "--served-model-name", "a", "--prefix-caching", "true",
                         "--port", str(busy_port))
    assert code == 2 and len(lines) == 1 and "'true' is an extra argument" in lines[0], lines


def test_vllm_underscore_spellings_are_taken(capsys, model_dir, busy_port):
    code, lines = _serve(capsys, "--model", str(model_dir), "--max_model_len", "1k", "--no_enable_chunked_prefill",
                         "--max_num_batched_tokens=16", "--port", str(busy_port))
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: --max-num-batched-tokens 16 is below"), lines
    assert vllm_argv(["--", "--x_y"]) == ["--", "--x_y"]  # past --, nothing is a flag


def test_the_model_as_the_first_argument_as_in_vllm_serve(capsys, model_dir, busy_port):
    code, lines = _serve(capsys, str(model_dir), "--served-model-name", "a", "b", "--port", str(busy_port))
    assert _reached_the_bind(code, lines, busy_port), lines
    code, lines = _serve(capsys, "--port", str(busy_port))
    assert code == 2 and len(lines) == 1 and "--model DIR" in lines[0] and "vllm serve DIR" in lines[0], lines
    code, lines = _serve(capsys, "--model", str(model_dir), "stray", "--port", str(busy_port))
    assert code == 2 and len(lines) == 1 and "'stray'" in lines[0] and "--served-model-name" in lines[0], lines


def test_vllm_boolean_spellings_set_the_same_fields(capsys, model_dir, busy_port):
    serve = typer.main.get_command(app).commands["serve"]
    by_flag = {opt: p.name for p in serve.params for opt in (*p.opts, *getattr(p, "secondary_opts", []))}
    for flag in ("--prefix-caching", "--no-prefix-caching", "--enable-prefix-caching", "--no-enable-prefix-caching"):
        assert by_flag[flag] == "engine__enable_prefix_caching", flag
    for flag in ("--enable-chunked-prefill", "--no-enable-chunked-prefill"):
        assert by_flag[flag] == "engine__enable_chunked_prefill", flag
    assert by_flag["-tp"] == by_flag["--tensor-parallel-size"]
    # --no-enable-chunked-prefill really turns it off: the step budget below the context is refused for it
    code, lines = _serve(capsys, "--model", str(model_dir), "--port", str(busy_port), "--enable-prefix-caching",
                         "--no-enable-chunked-prefill", "--max-num-batched-tokens", "16")
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: --max-num-batched-tokens 16 is below"), lines
    with pytest.raises(TypeError, match="no field 'prefix_caching'"):
        generated_options(EngineConfig, into="engine", aliases={"prefix_caching": ("--x",)})


def test_vllm_token_counts_k_is_a_thousand_and_K_is_1024():
    assert [_token_count(t, "--f") for t in ("32768", "32k", "32K", "25.6k", "1m", "1M", " 8k ")] == [
        32768, 32000, 32768, 25600, 1_000_000, 1_048_576, 8000]
    assert [_max_model_len(t) for t in ("auto", "AUTO", "-1")] == [None, None, None]  # the model's own context
    with pytest.raises(UserError, match=r"--f '1\.5K': decimals .* write 1\.5k"):
        _token_count("1.5K", "--f")
    with pytest.raises(UserError, match="--f '0.0015k' is not a whole number of tokens"):
        _token_count("0.0015k", "--f")
    with pytest.raises(UserError, match="--max-model-len 'lots' is not a number of tokens"):
        _max_model_len("lots")


@pytest.mark.parametrize(("length", "context"), [("1k", "--max-model-len 1000"), ("1K", "--max-model-len 1024"),
                                                 ("auto", "the model's context of 2048 tokens"),
                                                 ("-1", "the model's context of 2048 tokens")])
def test_max_model_len_forms_reach_the_engine_config(capsys, model_dir, busy_port, length, context):
    code, lines = _serve(capsys, "--model", str(model_dir), "--port", str(busy_port), "--max-model-len", length,
                         "--no-chunked-prefill", "--max-num-batched-tokens", "0.016k")
    assert code == 2 and len(lines) == 1 and f"16 is below {context}" in lines[0], lines


def test_vllm_flags_accelkit_takes(capsys, model_dir, busy_port):
    code, lines = _serve(capsys, "--model", str(model_dir), "--port", str(busy_port), "--trust-remote-code",
                         "--disable-log-requests", "--disable-log-stats", "--disable-uvicorn-access-log",
                         "--uvicorn-log-level", "INFO", "--generation-config", "vllm", "-pp", "1", "-dp", "1", "-tp",
                         "1", "--tokenizer", str(model_dir), "--max-num-batched-tokens", "4K")
    assert _reached_the_bind(code, lines, busy_port), lines


@pytest.mark.parametrize(("flags", "said"), [
    (("-pp", "2"), "--tensor-parallel-size"), (("--data-parallel-size", "2"), "one server per GPU"),
    (("--generation-config", "auto"), "--generation-config vllm"), (("--tokenizer", "/elsewhere"), "drop --tokenizer"),
    (("--enable-log-requests",), "--log-requests"), (("--uvicorn-log-level", "loud"), "warning, info"),
])
def test_vllm_flags_accelkit_cannot_honour_are_one_line(capsys, model_dir, busy_port, flags, said):
    code, lines = _serve(capsys, "--model", str(model_dir), "--port", str(busy_port), *flags)
    assert code == 2 and len(lines) == 1 and said in lines[0] and str(busy_port) not in lines[0], lines
    assert flags[0] in lines[0] or {"-pp": "--pipeline-parallel-size"}[flags[0]] in lines[0]


def test_a_hub_id_as_vllm_serve_takes_it_says_that_nothing_is_downloaded(capsys, tmp_path, monkeypatch, busy_port):
    monkeypatch.chdir(tmp_path)
    code, lines = _serve(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--port", str(busy_port))
    assert code == 2 and len(lines) == 1, lines
    assert "downloads nothing" in lines[0] and "huggingface-cli download meta-llama/Llama-3.1-8B-Instruct" in lines[0]
    (tmp_path / "meta-llama").mkdir()  # a directory of that name here: the path is the user's, not a hub id
    code, lines = _serve(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--port", str(busy_port))
    assert code == 2 and len(lines) == 1 and "has no config.json" in lines[0], lines


def test_a_message_naming_the_flag_beside_its_field_says_it_once(capsys, model_dir, busy_port):
    """preflight's words for Python callers, "lower max_model_len (--max-model-len)", read "lower --max-model-len
    (--max-model-len)" on the command line."""
    code, lines = _serve(capsys, "--model", str(model_dir), "--max-model-len", "4K", "--port", str(busy_port))
    assert code == 2 and lines == ["error: --max-model-len 4096 exceeds the model's max_position_embeddings=2048; "
                                   "lower --max-model-len"], lines
