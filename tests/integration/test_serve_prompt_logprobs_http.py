"""vLLM's ``prompt_logprobs`` over real HTTP: per prompt token null for the first, then ``{id: {logprob, rank,
decoded_token}}`` holding the prompt token (its logprob the one completions' echo with logprobs gives, its rank its
place in the vocabulary) and the k most likely (ranks 1..k). In each completions choice; in the chat response.
Refused with stream (vLLM's rule) and past 0..20 (vLLM's -1 too)."""

import httpx
import pytest
import torch
import transformers

from accelkit.serve.testing import save_tiny_model
from tests.integration.serve_server_util import running_server

PROMPTS = ["w5 w6 w7 w8 w9 w10 w11", "w40 w3 w3 w200 w17"]
MESSAGES = [{"role": "user", "content": "w5 w6 w7 w8"}]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    path = save_tiny_model(tmp_path_factory.mktemp("serve-plp") / "tiny", "tiny-llama", seed=3)
    with running_server(str(path), max_model_len=64, max_num_batched_tokens=5) as (url, _):  # prompts in chunks
        yield url, path


@pytest.fixture(scope="module")
def tokenizer(served):
    return transformers.AutoTokenizer.from_pretrained(served[1])


def post(url, path, **body):
    resp = httpx.post(f"{url}{path}", json={"model": "tiny", "temperature": 0, "ignore_eos": True, **body}, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


def echoed(url, ids, k):
    """Completions' echo with logprobs of the prompt ``ids`` (what prompt_logprobs must agree with)."""
    lp = post(url, "/v1/completions", prompt=ids, max_tokens=0, echo=True, logprobs=k)["choices"][0]["logprobs"]
    return lp["token_logprobs"], lp["top_logprobs"]


def check(field, ids, k, echo_logprobs, echo_top):
    """One prompt's prompt_logprobs against the echo of the same prompt with the same k."""
    assert len(field) == len(ids) and field[0] is None
    for i in range(1, len(ids)):
        entry = field[i]
        own = entry[str(ids[i])]  # the prompt token itself, always there
        assert next(iter(entry)) == str(ids[i])  # and first
        # (another request, batched otherwise: equal up to the last bits)
        assert own["logprob"] == pytest.approx(echo_logprobs[i], abs=2e-5), i
        assert {e["decoded_token"]: e["logprob"] for e in entry.values()} == pytest.approx(echo_top[i], abs=2e-5)
        top = sorted(((e["logprob"], e["rank"]) for t, e in entry.items() if t != str(ids[i]) or own["rank"] <= k),
                     key=lambda x: -x[0])
        assert [rank for _, rank in top] == list(range(1, k + 1)), i  # the k most likely: ranks 1..k
        assert len(entry) in (k, k + 1) if k else len(entry) == 1
        if len(entry) == k + 1:  # not among the top k: placed after them
            assert own["rank"] > k
        is_argmax = own["logprob"] >= max(e["logprob"] for e in entry.values())
        assert (own["rank"] == 1) == is_argmax if k else own["rank"] >= 1


def test_completions_each_choice_holds_its_prompts_logprobs(served, tokenizer):
    url, _ = served
    k = 3
    got = post(url, "/v1/completions", prompt=PROMPTS, max_tokens=2, n=2, prompt_logprobs=k)
    assert [c["index"] for c in got["choices"]] == [0, 1, 2, 3]
    for p, prompt in enumerate(PROMPTS):
        ids = tokenizer(prompt)["input_ids"]
        echo_logprobs, echo_top = echoed(url, ids, k)
        for choice in got["choices"][p * 2 : p * 2 + 2]:  # both choices of the prompt: the prompt's list
            check(choice["prompt_logprobs"], ids, k, echo_logprobs, echo_top)
            assert choice["logprobs"] is None  # generated tokens' logprobs were not asked for
    plain = post(url, "/v1/completions", prompt=PROMPTS, max_tokens=2, n=2)
    assert [c["text"] for c in plain["choices"]] == [c["text"] for c in got["choices"]]  # greedy output unchanged
    assert all("prompt_logprobs" not in c for c in plain["choices"])  # not asked for: not there
    assert post(url, "/v1/completions", prompt=PROMPTS[0], max_tokens=2, prompt_logprobs=None)["choices"][0].keys() \
        == plain["choices"][0].keys()


def test_the_prompt_tokens_rank_is_its_place_in_the_vocabulary(served, tokenizer):
    """k = 0: only the prompt token, its rank counted against transformers' log_softmax over the whole vocabulary
    (mostly past k: what the engine counts on the device, not a position in a top-k list)."""
    url, path = served
    ids = tokenizer(PROMPTS[1])["input_ids"]
    field = post(url, "/v1/completions", prompt=ids, max_tokens=1, prompt_logprobs=0)["choices"][0]["prompt_logprobs"]
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.inference_mode():
        ref = torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), dim=-1)
    ranks = []
    for i in range(1, len(ids)):
        assert list(field[i]) == [str(ids[i])]
        entry, lp = field[i][str(ids[i])], float(ref[i - 1, ids[i]])
        assert entry["logprob"] == pytest.approx(lp, abs=2e-4)
        assert entry["decoded_token"] == tokenizer.decode([ids[i]])
        assert 1 + int((ref[i - 1] > lp + 2e-4).sum()) <= entry["rank"] <= 1 + int((ref[i - 1] > lp - 2e-4).sum())
        ranks.append(entry["rank"])
    assert max(ranks) > 1  # some prompt token is not the model's first choice


def test_with_echo_each_keeps_its_own_k(served, tokenizer):
    url, _ = served
    ids = tokenizer(PROMPTS[0])["input_ids"]
    for logprobs, prompt_logprobs in ((1, 4), (4, 1)):
        choice = post(url, "/v1/completions", prompt=ids, max_tokens=2, echo=True, logprobs=logprobs,
                      prompt_logprobs=prompt_logprobs)["choices"][0]
        alone = post(url, "/v1/completions", prompt=ids, max_tokens=2, echo=True, logprobs=logprobs)["choices"][0]
        assert choice["logprobs"] == alone["logprobs"]  # echo's top_logprobs: logprobs' k, not prompt_logprobs'
        echo_logprobs, echo_top = echoed(url, ids, prompt_logprobs)
        check(choice["prompt_logprobs"], ids, prompt_logprobs, echo_logprobs, echo_top)


def test_best_of_returns_the_prompts_logprobs_with_its_choice(served, tokenizer):
    url, _ = served
    ids = tokenizer(PROMPTS[1])["input_ids"]
    got = post(url, "/v1/completions", prompt=ids, max_tokens=2, n=1, best_of=3, temperature=1.0, seed=5,
               prompt_logprobs=2)
    check(got["choices"][0]["prompt_logprobs"], ids, 2, *echoed(url, ids, 2))


def test_chat_puts_them_in_the_response(served):
    url, _ = served
    got = post(url, "/v1/chat/completions", messages=MESSAGES, max_tokens=2, n=2, prompt_logprobs=2)
    ids = httpx.post(f"{url}/tokenize", json={"model": "tiny", "messages": MESSAGES}, timeout=60).json()["tokens"]
    assert got["usage"]["prompt_tokens"] == len(ids)
    check(got["prompt_logprobs"], ids, 2, *echoed(url, ids, 2))  # vLLM's place: beside usage, once
    assert all("prompt_logprobs" not in c for c in got["choices"]) and len(got["choices"]) == 2
    assert "prompt_logprobs" not in post(url, "/v1/chat/completions", messages=MESSAGES, max_tokens=2)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize(("extra", "words"), [
    ({"prompt_logprobs": -1}, "prompt_logprobs=-1 is out of range; expected 0 to 20"),  # vLLM's whole vocabulary
    ({"prompt_logprobs": 21}, "prompt_logprobs=21 is out of range; expected 0 to 20"),
    ({"prompt_logprobs": "2"}, "prompt_logprobs"),
    ({"prompt_logprobs": 1.5}, "prompt_logprobs"),
    ({"prompt_logprobs": True}, "prompt_logprobs"),
    ({"prompt_logprobs": 2, "stream": True}, "not available with stream"),  # vLLM's rule
    ({"prompt_logprobs": 0, "stream": True}, "not available with stream"),
], ids=["minus-1", "21", "string", "fraction", "bool", "stream", "stream-k0"])
def test_bad_values_are_a_400_naming_the_field(served, path, extra, words):
    url, _ = served
    body = {"model": "tiny", "max_tokens": 2, **extra,
            **({"prompt": PROMPTS[0]} if path == "/v1/completions" else {"messages": MESSAGES})}
    resp = httpx.post(f"{url}{path}", json=body, timeout=60)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == "prompt_logprobs" and words in error["message"], error


def test_the_openapi_schema_describes_the_field(served):
    url, _ = served
    schemas = httpx.get(f"{url}/openapi.json", timeout=60).json()["components"]["schemas"]
    for name in ("CompletionRequest", "ChatCompletionRequest"):
        assert "rank" in schemas[name]["properties"]["prompt_logprobs"]["description"]
