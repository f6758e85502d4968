"""The sampling features over real HTTP with the official openai client: logprobs in OpenAI's shapes (streamed
too), n choices (several prompts, streaming interleaved), best_of, seeds per choice, penalties, logit_bias."""

import json

import httpx
import openai
import pytest

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import save_tiny_model
from tests.integration.serve_server_util import running_server

MAX_QUEUE = 8


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny_model(tmp_path_factory.mktemp("serve-sampling") / "tiny", "tiny-llama"))


@pytest.fixture(scope="module")
def server(model_dir):
    with running_server(model_dir, max_model_len=128, max_queue=MAX_QUEUE, max_num_seqs=8) as (url, state):
        yield url, state


@pytest.fixture(scope="module")
def offline(model_dir):
    return LLM(model_dir, kv_cache_memory_bytes=4 << 20, max_model_len=128)


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)


def test_completion_logprobs_match_the_engine_and_openais_shape(server, offline):
    url, _ = server
    resp = client(url).completions.create(model="tiny", prompt="w5 w6 w7", max_tokens=6, temperature=0, logprobs=2,
                                          extra_body={"ignore_eos": True})
    choice = resp.choices[0]
    ref = offline.generate(offline.engine.encode("w5 w6 w7"), SamplingParams.greedy(6, ignore_eos=True, logprobs=2))[0]
    lp = choice.logprobs
    assert lp is not None and len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert lp.token_logprobs == pytest.approx([chosen for chosen, _ in ref.logprobs], abs=1e-4)
    # each token's own text (this word-level tokenizer decodes one token without the space the text has)
    assert lp.tokens == [offline.tokenizer.decode([t]) for t in ref.token_ids]
    assert "".join(lp.tokens) == choice.text.replace(" ", "")
    # where each token's text starts in the text (" w9" there: the space is the token's)
    ends = [*lp.text_offset[1:], len(choice.text)]
    assert [choice.text[a:b].strip() for a, b in zip(lp.text_offset, ends, strict=True)] == lp.tokens
    for token, token_lp, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert len(top) <= 3 and top[token] == pytest.approx(token_lp)  # the 2 most likely (greedy's among them)
        assert max(top.values()) == pytest.approx(token_lp)
    plain = client(url).completions.create(model="tiny", prompt="w5", max_tokens=2)
    assert plain.choices[0].logprobs is None


def test_chat_logprobs_and_their_stream(server):
    url, _ = server
    kwargs = {"model": "tiny", "messages": [{"role": "user", "content": "w5 w9"}], "max_tokens": 5, "temperature": 0,
              "logprobs": True, "top_logprobs": 2, "extra_body": {"ignore_eos": True}}
    resp = client(url).chat.completions.create(**kwargs)
    content = resp.choices[0].logprobs.content
    assert len(content) == resp.usage.completion_tokens == 5
    for item in content:
        assert bytes(item.bytes).decode() == item.token and len(item.top_logprobs) == 2
        assert item.top_logprobs[0].logprob == pytest.approx(item.logprob)  # greedy: the most likely
    streamed = []
    for chunk in client(url).chat.completions.create(stream=True, **kwargs):
        if chunk.choices and chunk.choices[0].logprobs is not None:
            streamed += chunk.choices[0].logprobs.content
    assert [(c.token, c.logprob) for c in streamed] == [(c.token, c.logprob) for c in content]
    no_top = client(url).chat.completions.create(**{**kwargs, "top_logprobs": None})
    assert all(c.top_logprobs == [] for c in no_top.choices[0].logprobs.content)


def test_n_choices_per_prompt_with_derived_seeds(server):
    url, state = server
    kwargs = {"model": "tiny", "prompt": "w5 w6", "max_tokens": 8, "temperature": 1.0, "n": 3, "seed": 7,
              "extra_body": {"ignore_eos": True}}
    first = client(url).completions.create(**kwargs)
    again = client(url).completions.create(**kwargs)
    assert [c.index for c in first.choices] == [0, 1, 2]
    texts = [c.text for c in first.choices]
    assert texts == [c.text for c in again.choices]  # reproducible with the seed
    assert len(set(texts)) == 3  # and each choice its own stream
    one = client(url).completions.create(**{**kwargs, "n": 1})
    assert one.choices[0].text == texts[0]  # choice 0 keeps the request's seed
    assert first.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counted once, as vLLM does
    assert first.usage.completion_tokens == 24
    assert state.admission.in_flight == 0


def test_n_with_a_list_of_prompts_indexes_prompt_times_n_and_streams_interleaved(server, offline):
    url, _ = server
    prompts = ["w5 w6", "w9 w10 w11"]
    greedy = [o.text for o in offline.generate(prompts, SamplingParams.greedy(6, ignore_eos=True))]
    resp = client(url).completions.create(model="tiny", prompt=prompts, max_tokens=6, temperature=0, n=2,
                                          extra_body={"ignore_eos": True})
    assert [(c.index, c.text) for c in resp.choices] == [(0, greedy[0]), (1, greedy[0]), (2, greedy[1]),
                                                         (3, greedy[1])]
    texts: dict[int, str] = {}
    order = []
    for chunk in client(url).completions.create(model="tiny", prompt=prompts, max_tokens=6, temperature=0, n=2,
                                                stream=True, extra_body={"ignore_eos": True}):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            order.append(c.index)
    assert texts == {0: greedy[0], 1: greedy[0], 2: greedy[1], 3: greedy[1]}
    assert order != sorted(order)  # the choices' chunks interleave as the engine steps them together


def test_best_of_returns_the_choice_with_the_highest_logprob_per_token(server):
    """OpenAI's rule ("the highest log probability per token"): a sum — vLLM v0's — would rank an output that ends
    at once first. Choice i samples with seed + i either way, so best_of's candidates are n's choices."""
    url, _ = server
    for extra in ({"ignore_eos": True}, {}):  # (equal lengths, then whatever lengths EOS makes)
        kwargs = {"model": "tiny", "prompt": "w5 w6", "max_tokens": 6, "temperature": 1.0, "seed": 3,
                  "extra_body": extra}
        all4 = client(url).completions.create(n=4, logprobs=0, **kwargs)
        best = client(url).completions.create(n=1, best_of=4, **kwargs)
        per_token = [sum(c.logprobs.token_logprobs) / len(c.logprobs.token_logprobs) for c in all4.choices]
        assert len(best.choices) == 1 and best.choices[0].index == 0
        assert best.choices[0].text == all4.choices[per_token.index(max(per_token))].text, (per_token, all4)
        assert best.choices[0].logprobs is None  # ranked by logprobs the client did not ask for: not returned
    with pytest.raises(openai.BadRequestError, match="best_of"):
        client(url).completions.create(n=1, best_of=3, stream=True, **kwargs)


def test_penalties_and_logit_bias_reach_the_sampler(server):
    url, _ = server
    resp = client(url).completions.create(model="tiny", prompt="w5 w6", max_tokens=20, temperature=0,
                                          presence_penalty=2.0, logprobs=0,
                                          extra_body={"ignore_eos": True, "repetition_penalty": 100.0})
    tokens = resp.choices[0].logprobs.tokens
    assert len(set(tokens)) == len(tokens) == 20
    forced = client(url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "w5"}],
                                                 max_tokens=4, temperature=0, logit_bias={"17": 100},
                                                 logprobs=True, extra_body={"ignore_eos": True})
    assert len({c.token for c in forced.choices[0].logprobs.content}) == 1
    min_tokens = client(url).completions.create(model="tiny", prompt="w5", max_tokens=12, temperature=0,
                                                extra_body={"min_tokens": 12, "min_p": 0.5})
    assert min_tokens.usage.completion_tokens == 12


def test_admission_counts_every_choice(server):
    url, state = server
    capacity = state.admission.capacity
    resp = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": ["w5", "w6"], "n": capacity // 2 + 1})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "n", resp.text
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "w5"}], "top_logprobs": 2})
    resp = httpx.post(f"{url}/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "top_logprobs", resp.text


def test_a_nan_logprob_is_null_in_valid_json(model_dir, tmp_path):
    """A model whose float16 logits overflow gives NaN logprobs: max(nan, -9999.0) let NaN through, so a stream
    event held a bare NaN (not JSON) and the response without streaming was a 500. Now such a logprob is null."""
    import shutil

    from safetensors.torch import load_file, save_file

    broken = tmp_path / "overflow"
    shutil.copytree(model_dir, broken)
    weights = load_file(broken / "model.safetensors")
    key = "lm_head.weight" if "lm_head.weight" in weights else "model.embed_tokens.weight"
    weights[key] = weights[key] * 1e7  # logits past float16's range: inf − inf in log_softmax
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})

    def strict(text):
        def refuse(constant):
            raise ValueError(f"not JSON: {constant}")
        return json.loads(text, parse_constant=refuse)

    body = {"model": "tiny", "prompt": "w5 w6", "max_tokens": 2, "logprobs": 1, "temperature": 0}
    with running_server(str(broken), max_model_len=64, dtype="float16") as (url, _):
        resp = httpx.post(f"{url}/v1/completions", json=body)
        assert resp.status_code == 200, resp.text
        assert strict(resp.text)["choices"][0]["logprobs"]["token_logprobs"] == [None, None]
        with httpx.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}) as stream:
            events = [strict(line[6:]) for line in stream.iter_lines() if line.startswith("data: {")]
    assert [lp for e in events for lp in e["choices"][0]["logprobs"]["token_logprobs"]] == [None, None]


@pytest.mark.parametrize(("bias", "needle"), [
    ({"5_0": 1}, "logit_bias key '5_0' is not a token id"), ({" 5": 1}, "logit_bias key ' 5' is not a token id"),
    ({"+5": 1}, "logit_bias key '+5' is not a token id"), ({"\u0665": 1}, "is not a token id"),
    ({"5": 1, "05": -1}, "logit_bias keys '5' and '05' are the same token"),
])
def test_logit_bias_keys_are_plain_token_ids(server, bias, needle):
    """int() took '5_0' (as 50), ' 5', '+5' and other scripts' digits, and merged '5' and '05' silently."""
    url, _ = server
    resp = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": "w5", "max_tokens": 2,
                                                    "logit_bias": bias})
    assert resp.status_code == 400 and needle in resp.json()["error"]["message"], resp.text
    assert resp.json()["error"]["param"] == "logit_bias"
