"""skip_special_tokens (vLLM's): false keeps the tokenizer's special tokens in the text — what a tool-call format
made of control tokens needs — and leaves out the stop token that ended the output, as vLLM does, unless
include_stop_str_in_output; the token ids are the same either way. Offline and over HTTP."""

from __future__ import annotations

import httpx
import pytest

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import save_bytelevel_model
from tests.integration.serve_server_util import running_server

PAD, EOS = 3, 2  # "<pad>" and "</s>": special tokens of the byte-level test tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_bytelevel_model(tmp_path_factory.mktemp("special") / "m", seed=4))


@pytest.fixture(scope="module")
def llm(model_dir):
    return LLM(model_dir, kv_cache_memory_bytes=8 << 20, max_model_len=128)


def test_special_tokens_are_in_the_text_only_when_asked_and_the_ids_agree(llm):
    tok = llm.engine.tokenizer

    def run(**kwargs):
        params = SamplingParams(temperature=1.0, seed=3, max_tokens=12, ignore_eos=True, logit_bias={PAD: 3.0},
                                **kwargs)
        return llm.generate(["p:"], params)[0].outputs[0]

    kept, skipped = run(skip_special_tokens=False), run()
    assert kept.token_ids == skipped.token_ids and PAD in kept.token_ids, kept
    # streamed out token by token, the text is what decoding the whole output gives (a special token between the
    # bytes of one character splits it, in both)
    assert kept.text == tok.decode(kept.token_ids, skip_special_tokens=False) and "<pad>" in kept.text, kept.text
    assert skipped.text == tok.decode(kept.token_ids, skip_special_tokens=True) and "<pad>" not in skipped.text


def test_the_stop_token_that_ended_the_output_stays_out_unless_asked_for(llm):
    tok = llm.engine.tokenizer

    def run(**kwargs):
        params = SamplingParams(temperature=1.0, seed=1, max_tokens=12, min_tokens=3, logit_bias={PAD: 8.0, EOS: 10.0},
                                skip_special_tokens=False, **kwargs)
        return llm.generate(["p:"], params)[0].outputs[0]

    out = run()
    assert out.finish_reason == "stop" and out.token_ids[-1] == EOS and PAD in out.token_ids, out
    assert out.text == tok.decode(out.token_ids[:-1], skip_special_tokens=False) and "<pad>" in out.text, out
    assert run(include_stop_str_in_output=True).text == out.text + "</s>"


def test_the_http_field_reaches_the_engine(model_dir):
    body = {"model": "tiny", "prompt": "p:", "max_tokens": 8, "seed": 3, "temperature": 1.0, "ignore_eos": True,
            "logit_bias": {str(PAD): 3.0}}
    with running_server(model_dir) as (url, _):
        kept = httpx.post(f"{url}/v1/completions", json={**body, "skip_special_tokens": False}, timeout=60).json()
        skipped = httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()
    assert "<pad>" in kept["choices"][0]["text"], kept
    assert "<pad>" not in skipped["choices"][0]["text"], skipped
