"""Completions' ``echo`` with ``logprobs`` over real HTTP: the prompt tokens' logprobs come first (the first one
null), equal to transformers' fp32 log_softmax over the prompt, then the generated tokens' as without echo;
``max_tokens=0`` with echo returns the prompt alone. This is how lm-evaluation-harness scores a text
(``local-completions`` loglikelihood: token-id prompts, ``echo``, ``logprobs=1``, ``max_tokens=1``)."""

import json

import httpx
import pytest
import torch
import transformers

from accelkit.serve.testing import save_tiny_model
from tests.integration.serve_server_util import running_server

PROMPT = "w5 w6 w7 w8 w9 w10 w11"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = save_tiny_model(tmp_path_factory.mktemp("serve-echo") / "tiny", "tiny-llama", seed=3)
    with running_server(str(path), max_model_len=64, max_num_batched_tokens=5) as (url, _):  # prompts in chunks
        yield url, path


def reference(path, ids):
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.inference_mode():
        return torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), dim=-1)


def post(url, **body):
    resp = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "temperature": 0, "ignore_eos": True, **body},
                      timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


def streamed_choice(url, **body):
    text, lp = "", {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    reason = None
    with httpx.stream("POST", f"{url}/v1/completions", json={"model": "tiny", "temperature": 0, "ignore_eos": True,
                                                            "stream": True, **body}, timeout=60) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                for c in json.loads(line[6:])["choices"]:
                    text += c["text"]
                    reason = c["finish_reason"] or reason
                    for key in lp:
                        lp[key] += (c["logprobs"] or {}).get(key, [])
    return text, lp, reason


def test_echo_with_logprobs_scores_the_prompt_then_generates(served):
    url, path = served
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    ids = tokenizer(PROMPT)["input_ids"]
    ref = reference(path, ids)
    plain_response = post(url, prompt=PROMPT, max_tokens=3, logprobs=2)
    plain = plain_response["choices"][0]
    got = post(url, prompt=PROMPT, max_tokens=3, logprobs=2, echo=True)
    choice, lp = got["choices"][0], got["choices"][0]["logprobs"]
    assert choice["text"] == PROMPT + plain["text"]
    p = len(ids)
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == p + 3
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    for i in range(1, p):
        assert lp["token_logprobs"][i] == pytest.approx(float(ref[i - 1, ids[i]]), abs=2e-4)
        values, top_ids = ref[i - 1].topk(2)
        expected = {tokenizer.decode([t]): v for t, v in zip(top_ids.tolist(), values.tolist(), strict=True)}
        expected[tokenizer.decode([ids[i]])] = float(ref[i - 1, ids[i]])
        assert lp["top_logprobs"][i] == pytest.approx(expected, abs=2e-4)
    # the generated part is what the same request without echo returns, its offsets shifted past the prompt
    generated = {key: value[p:] for key, value in lp.items()}
    shifted = [o + len(PROMPT) for o in plain["logprobs"]["text_offset"]]
    assert generated == {**plain["logprobs"], "text_offset": shifted}
    # the prompt's offsets cut the echoed prompt into its tokens
    offsets = lp["text_offset"][:p]
    assert offsets == sorted(offsets) and offsets[0] == 0
    pieces = [PROMPT[a:b].strip() for a, b in zip(offsets, [*offsets[1:], len(PROMPT)], strict=True)]
    assert pieces[1:] == lp["tokens"][1:p]
    assert got["usage"] == plain_response["usage"]
    # streamed: the prompt's text and logprobs lead the first chunk; joined, the chunks are the response
    text, streamed_lp, _ = streamed_choice(url, prompt=PROMPT, max_tokens=3, logprobs=2, echo=True)
    assert text == choice["text"]
    assert streamed_lp == lp


def test_echo_with_max_tokens_0_returns_the_prompt_alone(served):
    url, path = served
    ids = transformers.AutoTokenizer.from_pretrained(path)(PROMPT)["input_ids"]
    got = post(url, prompt=ids, max_tokens=0, logprobs=0, echo=True)  # lm-eval sends token ids
    choice = got["choices"][0]
    assert choice["finish_reason"] == "length"
    assert len(choice["logprobs"]["tokens"]) == len(ids) and choice["logprobs"]["token_logprobs"][0] is None
    assert all(top is None or len(top) == 1 for top in choice["logprobs"]["top_logprobs"])
    assert got["usage"]["completion_tokens"] == 0 and got["usage"]["prompt_tokens"] == len(ids)
    ref = reference(path, ids)
    assert choice["logprobs"]["token_logprobs"][1:] == pytest.approx(
        [float(ref[i - 1, ids[i]]) for i in range(1, len(ids))], abs=2e-4)
    text, lp, reason = streamed_choice(url, prompt=ids, max_tokens=0, logprobs=0, echo=True)
    assert (text, lp, reason) == (choice["text"], choice["logprobs"], "length")
    # lm-eval's loglikelihood request: one generated token after the scored prompt
    one = post(url, prompt=ids, max_tokens=1, logprobs=1, echo=True)["choices"][0]["logprobs"]
    assert one["token_logprobs"][: len(ids)] == choice["logprobs"]["token_logprobs"]
    assert len(one["token_logprobs"]) == len(ids) + 1


def test_max_tokens_0_without_echo_is_refused(served):
    url, _ = served
    resp = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": PROMPT, "max_tokens": 0}, timeout=60)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["param"] == "max_tokens" and "echo" in error["message"]


def _pieces(text, offsets):
    return [text[a:b].strip() for a, b in zip(offsets, [*offsets[1:], len(text)], strict=True)]


@pytest.mark.parametrize("prompt", [[1, 5, 6, 7], "w5  w6 w7"], ids=["ids-with-bos", "string-two-spaces"])
def test_the_prompts_offsets_index_the_echoed_text(served, prompt):
    """A prompt of ids echoes as tokenizer.decode(ids), ``<s>`` included; a string echoes as sent, two spaces and
    all. The offsets followed a re-decoding without special tokens: ``w5`` pointed at ``<s``, and after a double
    space every offset was one short."""
    url, _ = served
    choice = post(url, prompt=prompt, max_tokens=2, logprobs=0, echo=True)["choices"][0]
    lp, text = choice["logprobs"], choice["text"]
    assert _pieces(text, lp["text_offset"]) == [t.strip() for t in lp["tokens"]]
    streamed_text, streamed_lp, _ = streamed_choice(url, prompt=prompt, max_tokens=2, logprobs=0, echo=True)
    assert (streamed_text, streamed_lp) == (text, lp)


def test_max_tokens_0_is_length_whatever_ended_the_dropped_token(served):
    """The one token the engine samples is dropped; when it was EOS (what a model often predicts after a whole
    text) the choice said "stop"."""
    url, _ = served
    body = {"prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 0, "logit_bias": {"2": 100},
            "ignore_eos": False}
    assert post(url, **body)["choices"][0]["finish_reason"] == "length"
    assert streamed_choice(url, **body)[2] == "length"


def test_min_tokens_with_max_tokens_0_is_refused_by_name(served):
    url, _ = served
    resp = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": PROMPT, "max_tokens": 0, "echo": True,
                                                     "min_tokens": 1}, timeout=60)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "min_tokens"
