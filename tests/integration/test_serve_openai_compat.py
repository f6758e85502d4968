"""`accelkit serve` as the official openai client, LangChain, vLLM's benchmark and curl scripts written for vLLM
expect it, over real HTTP on 127.0.0.1: nulls as defaults, no silent change of meaning, vLLM's extensions that
the engine has (stop_token_ids, allowed_token_ids, include_stop_str_in_output, truncate_prompt_tokens, chat template
variables), the streamed role chunk's timing, context errors, several model names, CORS, Retry-After and vLLM's
/tokenize, /detokenize and /ping."""

import asyncio
import json
import logging

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import save_tiny_model
from tests.integration.serve_server_util import running_server, serve_in_process

KEY = "k3y"
AUTH = {"authorization": f"Bearer {KEY}"}
ORIGIN = "https://app.example.com"
MAX_MODEL_LEN = 128
# the template marks what the tests look for with words of the tiny vocabulary: w20 a developer message, w11 the end
# of every message, w7 enable_thinking=false (a template variable), w8 the generation prompt
TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'developer' %}w20 {% endif %}{{ m['content'] }} w11 {% endfor %}"
            "{% if enable_thinking is defined and not enable_thinking %}w7 {% endif %}"
            "{% if add_generation_prompt %}w8{% endif %}")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny_model(tmp_path_factory.mktemp("serve-openai") / "tiny", "tiny-llama"))


@pytest.fixture(scope="module")
def server(model_dir):
    """Two model ids, an API key, CORS for one origin, a small context and the marking chat template."""
    config = {"served_model_aliases": ("org/tiny-2",), "allowed_origins": (ORIGIN,), "chat_template": TEMPLATE}
    with running_server(model_dir, api_key=KEY, server=config, max_model_len=MAX_MODEL_LEN) as (url, state):
        yield url, state


@pytest.fixture(scope="module")
def offline(model_dir):
    """Greedy texts of the offline engine for token ids: what the server must return for the same ids."""
    llm = LLM(model_dir, kv_cache_memory_bytes=4 << 20)

    def generate(ids: list[int], max_tokens: int) -> tuple[str, list[int]]:
        out = llm.generate([ids], SamplingParams.greedy(max_tokens, ignore_eos=True))[0]
        return out.text, list(out.token_ids)

    return generate


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


def post(url: str, path: str, body: dict, headers: dict | None = None) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, headers={**AUTH, **(headers or {})}, timeout=60)


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)


# ---- #1 nulls are defaults; whole floats are integers -------------------------------------------------------
def test_nulls_mean_the_default(server, offline, tokenizer):
    url, _ = server
    c = client(url)
    ids = tokenizer.encode("w5 w6")
    expected, _ = offline(ids, 4)
    done = c.completions.create(model="tiny", prompt="w5 w6", max_tokens=4, temperature=0, top_p=None, n=None,
                                presence_penalty=None, frequency_penalty=None, stop=None, seed=None, echo=None,
                                logprobs=None, best_of=None, stream=None, user=None,
                                extra_body={"ignore_eos": True, "top_k": None, "stop_token_ids": None})
    assert done.choices[0].text == expected
    nulls = {"temperature": None, "top_p": None, "n": None, "presence_penalty": None, "frequency_penalty": None,
             "stream": None, "logprobs": None, "top_logprobs": None, "stop": None, "seed": None, "tools": None,
             "tool_choice": None, "response_format": None, "logit_bias": None, "stream_options": None,
             "ignore_eos": None, "model": None, "max_completion_tokens": None, "skip_special_tokens": None}
    chat = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "w5", "name": None}],
                                              "max_tokens": 2, **nulls})
    assert chat.status_code == 200, chat.text
    assert chat.json()["model"] == "tiny" and chat.json()["usage"]["completion_tokens"] >= 1


def test_a_wrong_type_names_the_field_not_a_union_member(server):
    url, _ = server
    for field, value in (("temperature", "hot"), ("top_p", [1]), ("stop", 5), ("prompt", 3.5), ("max_tokens", "4")):
        resp = post(url, "/v1/completions", {"model": "tiny", "prompt": "w5", field: value})
        error = resp.json()["error"]
        assert resp.status_code == 400 and error["param"] == field, resp.text
        assert error["message"].startswith(f"{field}: "), error  # not "temperature.int: …", "stop.str: …"


def test_a_prompt_list_that_mixes_shapes_says_which_shapes_a_prompt_takes(server):
    """["w5 w6", [5, 6, 7]] got "prompt.1: expected a valid string, or a valid integer" — pydantic's guesses at the
    union's members; now one sentence on the shapes a prompt takes and what this list mixed."""
    url, _ = server
    for prompt, holds in ((["w5 w6", [5, 6, 7]], "strings and lists of token ids"), ([5, "x"], "token ids and strings"),
                          ([[5, 6], {"a": 1}], "lists of token ids and a dict")):
        resp = post(url, "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 2})
        error = resp.json()["error"]
        assert resp.status_code == 400 and error["param"] == "prompt", resp.text
        assert error["message"] == ("prompt: a prompt is a string, a list of token ids, or a list of either (several "
                                    f"prompts); this list holds {holds}"), error["message"]
    for prompt in (["w5", "w6"], [5, 6], [[5, 6], [7]]):  # each shape alone is still a prompt
        assert post(url, "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 2}).status_code == 200


def test_whole_floats_are_integers(server):
    url, _ = server
    resp = post(url, "/v1/completions", {"model": "tiny", "prompt": "w5", "max_tokens": 4.0, "n": 1.0, "seed": 1.0,
                                         "ignore_eos": True})
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["completion_tokens"] == 4
    for value in (4.5, True, "4"):
        resp = post(url, "/v1/completions", {"model": "tiny", "prompt": "w5", "max_tokens": value})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "max_tokens", resp.text


# ---- #2 never a silent change of meaning ---------------------------------------------------------------------
CHAT, COMP = "/v1/chat/completions", "/v1/completions"
REFUSED = [
    (CHAT, {"response_format": {"type": "regex"}}, "response_format"),
    (CHAT, {"functions": [{"name": "f", "parameters": {}}]}, "functions"),
    (CHAT, {"function_call": {"name": "f"}}, "function_call"),
    # (tool_choice "required" or a named function: tests/integration/test_serve_tool_calls.py)
    (CHAT, {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}], "tool_choice": "auto"},
     "tool_choice"),
    (CHAT, {"echo": True}, "echo"),
    (CHAT, {"continue_final_message": True}, "continue_final_message"),  # with add_generation_prompt's default
    (COMP, {"use_beam_search": True}, "use_beam_search"),
    (CHAT, {"priority": 3}, "priority"),  # this server schedules first come, first served
]
NEUTRAL = {"response_format": {"type": "text"}, "logit_bias": {}, "tool_choice": "none", "function_call": "auto",
           "functions": [], "tools": [], "parallel_tool_calls": True, "min_tokens": 0, "min_p": 0,
           "repetition_penalty": 1.0, "include_stop_str_in_output": False, "skip_special_tokens": True,
           "echo": False, "continue_final_message": False, "use_beam_search": False, "allowed_token_ids": None,
           "truncate_prompt_tokens": None}


def refused(server, path: str, extra: dict) -> dict:
    """The 400's error object for a two-token request to ``path`` with ``extra``; the engine still alive."""
    url, state = server
    body = {"model": "tiny", "max_tokens": 2, **extra,
            **({"messages": [{"role": "user", "content": "w5"}]} if path == CHAT else {"prompt": "w5"})}
    resp = post(url, path, body)
    assert resp.status_code == 400, resp.text
    assert state.loop.is_alive
    return resp.json()["error"]


@pytest.mark.parametrize(("path", "extra", "param"), REFUSED, ids=[f"{p[-16:]}-{x}" for p, _, x in REFUSED])
def test_fields_that_change_the_output_are_refused_not_ignored(server, path, extra, param):
    error = refused(server, path, extra)
    assert error["param"] == param and error["code"] == "unsupported" and error["type"] == "invalid_request_error"


@pytest.mark.parametrize(("path", "extra", "param"), [
    (CHAT, {"response_format": {"type": "json_object"}}, "response_format"),
    (COMP, {"guided_choice": ["w5", "w6"]}, "guided_choice"),
    (CHAT, {"structured_outputs": {"regex": "w[0-9]+"}}, "structured_outputs"),
    (COMP, {"guided_grammar": "root ::= 'w5'"}, "guided_grammar"),  # (grammars run on llguidance: #28)
    (CHAT, {"structured_outputs": {"grammar": "root ::= 'w5'"}}, "structured_outputs"),
])
def test_structured_outputs_on_a_word_level_tokenizer_are_a_400_naming_why(server, path, extra, param):
    # (tests/integration/test_serve_structured_outputs.py runs them on a byte-level BPE)
    error = refused(server, path, extra)
    assert error["param"] == param and "byte-level BPE or SentencePiece" in error["message"], error


def test_their_neutral_values_are_accepted(server):
    url, _ = server
    resp = post(url, CHAT, {"model": "tiny", "messages": [{"role": "user", "content": "w5"}], "max_tokens": 2, **NEUTRAL})
    assert resp.status_code == 200, resp.text
    tool_auto = post(url, CHAT, {"model": "tiny", "messages": [{"role": "user", "content": "w5"}], "max_tokens": 2,
                                 "tool_choice": "auto"})  # "auto" without tools: no tool call can happen
    assert tool_auto.status_code == 200, tool_auto.text


def test_unknown_fields_are_ignored_with_one_warning_naming_them(server, caplog):
    url, _ = server
    body = {"model": "tiny", "max_tokens": 2, "frobnicate": 1, "store": False,
            "messages": [{"role": "user", "content": "w5", "mood": "x"}], "stream_options": None}
    with caplog.at_level(logging.WARNING, logger="accelkit.serve"):
        resp = post(url, CHAT, body)
    assert resp.status_code == 200, resp.text
    warnings = [r.getMessage() for r in caplog.records if "unknown field" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "frobnicate" in warnings[0] and "store" in warnings[0] and "messages[0].mood" in warnings[0]


# ---- what the engine has: stop_token_ids, top_k 0/-1, chat template variables -------------------------------
def test_stop_token_ids_end_generation_at_that_token(server, offline, tokenizer):
    url, _ = server
    ids = tokenizer.encode("w5 w6")
    _, tokens = offline(ids, 6)
    stop_at = tokens[2]
    cut = tokens.index(stop_at) + 1  # generation ends at the first time that token comes
    expected, _ = offline(ids, cut)
    without_it, _ = offline(ids, cut - 1)
    body = {"model": "tiny", "prompt": "w5 w6", "max_tokens": 6, "temperature": 0, "ignore_eos": True,
            "stop_token_ids": [stop_at]}
    resp = post(url, COMP, body)
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and resp.json()["usage"]["completion_tokens"] == cut, resp.text
    # the token that ended it is counted, its text left out — a word token too — as vLLM leaves it out unless
    # include_stop_str_in_output (it was kept: found in review); stop_reason names it, as vLLM's choices do
    assert choice["text"] == without_it and choice["stop_reason"] == stop_at, choice
    kept = post(url, COMP, {**body, "include_stop_str_in_output": True}).json()["choices"][0]
    assert kept["text"] == expected and kept["stop_reason"] == stop_at, kept
    streamed = post(url, COMP, {**body, "stream": True}).text
    chunks = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
    assert "".join(c["choices"][0]["text"] for c in chunks) == without_it
    assert [c["choices"][0]["stop_reason"] for c in chunks][-1] == stop_at
    chat = post(url, "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "w5"}],
                                              "max_tokens": 6, "stop": ["w9"], "temperature": 0})
    assert "stop_reason" in chat.json()["choices"][0], chat.text
    bad = post(url, COMP, {"model": "tiny", "prompt": "w5", "stop_token_ids": [5, -1]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "stop_token_ids", bad.text


def test_return_tokens_as_token_ids_names_logprobs_tokens_by_id(server, tokenizer):
    """vLLM's return_tokens_as_token_ids (dropped with a log line until a review found it): completions' and chat's
    logprobs name each token token_id:<id> — the same tokens, by id."""
    url, _ = server
    body = {"model": "tiny", "prompt": "w5 w6", "max_tokens": 4, "temperature": 0, "ignore_eos": True,
            "logprobs": 2}
    plain = post(url, COMP, body).json()["choices"][0]["logprobs"]
    named = post(url, COMP, {**body, "return_tokens_as_token_ids": True}).json()["choices"][0]["logprobs"]
    ids = [int(t.removeprefix("token_id:")) for t in named["tokens"]]
    assert all(t.startswith("token_id:") for t in named["tokens"]) and named["token_logprobs"] == plain["token_logprobs"]
    assert [tokenizer.decode([i]) for i in ids] == plain["tokens"]
    assert all(all(k.startswith("token_id:") for k in top) for top in named["top_logprobs"])
    chat = post(url, "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "w5"}],
                                              "max_tokens": 3, "temperature": 0, "logprobs": True, "top_logprobs": 1,
                                              "return_tokens_as_token_ids": True}).json()["choices"][0]["logprobs"]
    for entry in chat["content"]:
        assert entry["token"].startswith("token_id:") and bytes(entry["bytes"]).decode() == entry["token"], entry
        assert all(t["token"].startswith("token_id:") for t in entry["top_logprobs"])


def test_bad_words_never_come_out_in_completions_or_chat(server):
    """vLLM's bad_words, on both endpoints (chat's was ignored with a log line: found in review): the greedy output's
    own second word, masked, is in neither output; past the limit, a 400 naming the field."""
    url, _ = server
    body = {"model": "tiny", "prompt": "w5 w6 w7", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    free = post(url, COMP, body).json()["choices"][0]["text"].split()
    banned = post(url, COMP, {**body, "bad_words": [free[1]]}).json()["choices"][0]["text"].split()
    assert free[1] not in banned and banned[0] == free[0], (free, banned)
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "w5 w6"}], "max_tokens": 8, "temperature": 0,
            "ignore_eos": True}
    said = post(url, "/v1/chat/completions", chat).json()["choices"][0]["message"]["content"].split()
    kept_out = post(url, "/v1/chat/completions", {**chat, "bad_words": said[:2]}).json()
    assert not set(said[:2]) & set(kept_out["choices"][0]["message"]["content"].split()), (said, kept_out)
    too_many = post(url, COMP, {**body, "bad_words": ["w9"] * 129})
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "bad_words", too_many.text


def test_a_stop_string_within_min_tokens_ends_nothing_whatever_other_stop_strings_there_are(server, tokenizer):
    """A stop string that ended within min_tokens does not stop the output later: each stop string is searched where
    it could end in the new text (a longer, unrelated one widened the search back into the min_tokens window:
    found in review)."""
    url, _ = server
    body = {"model": "tiny", "prompt": "w5 w6 w7", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    text = post(url, COMP, body).json()["choices"][0]["text"]
    second = text.split()[1]  # (the output's second word: it ends within min_tokens=2)
    alone = post(url, COMP, {**body, "stop": [second], "min_tokens": 2}).json()["choices"][0]
    beside = post(url, COMP, {**body, "stop": [second, "z" * 16], "min_tokens": 2}).json()["choices"][0]
    assert (alone["text"], alone["finish_reason"]) == (beside["text"], beside["finish_reason"]), (alone, beside)
    assert text.count(second) > 1 or alone["text"] == text, (text, alone)


@pytest.mark.parametrize("top_k", [0, -1])
def test_top_k_0_and_minus_1_mean_no_limit(server, top_k):
    url, _ = server
    body = {"model": "tiny", "prompt": "w5 w6", "max_tokens": 6, "temperature": 1.0, "seed": 11, "ignore_eos": True}
    unlimited = post(url, COMP, body).json()["choices"][0]["text"]
    resp = post(url, COMP, {**body, "top_k": top_k})
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["text"] == unlimited  # the same seeded draw as with no top_k at all
    assert "0 or -1 means no limit" in post(url, COMP, {**body, "top_k": -2}).json()["error"]["message"]


# ---- vLLM's allowed_token_ids, include_stop_str_in_output, truncate_prompt_tokens ------------------------------
def _stream_text(url: str, path: str, body: dict) -> tuple[str, str]:
    """The streamed deltas of one choice, joined, and its finish_reason."""
    text, reason = "", None
    with httpx.stream("POST", f"{url}{path}", json={**body, "stream": True}, headers=AUTH, timeout=60) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                choice = json.loads(line[6:])["choices"][0]
                text += choice["delta"].get("content", "") if path == CHAT else choice["text"]
                reason = choice["finish_reason"] or reason
    return text, reason


def test_allowed_token_ids_are_the_only_tokens_sampled(server, offline, tokenizer):
    url, _ = server
    _, greedy = offline(tokenizer.encode("w5 w6"), 8)
    allowed = [t for t in range(40, 120) if t not in greedy][:3]  # none of them is what greedy picks
    names = {tokenizer.decode([t]) for t in allowed}
    base = {"model": "tiny", "max_tokens": 8, "ignore_eos": True, "allowed_token_ids": allowed}
    for sampling in ({"temperature": 0}, {"temperature": 1.0, "seed": 3}):
        done = post(url, COMP, {**base, **sampling, "prompt": "w5 w6", "logprobs": 0}).json()
        tokens = done["choices"][0]["logprobs"]["tokens"]
        assert len(tokens) == 8 and set(tokens) <= names, (tokens, names)
        chat = post(url, CHAT, {**base, **sampling, "messages": [{"role": "user", "content": "w5"}],
                                "logprobs": True}).json()
        tokens = [entry["token"] for entry in chat["choices"][0]["logprobs"]["content"]]
        assert len(tokens) == 8 and set(tokens) <= names, (tokens, names)
    without = post(url, COMP, {**base, "allowed_token_ids": None, "prompt": "w5 w6", "temperature": 0, "logprobs": 0})
    assert not set(without.json()["choices"][0]["logprobs"]["tokens"]) & names  # the premise: greedy picks others
    for bad in ([], [5, 512], [-1], ["5"], 5):
        resp = post(url, COMP, {"model": "tiny", "prompt": "w5", "allowed_token_ids": bad})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "allowed_token_ids", resp.text
    assert "allowed_token_ids[1]=512 is not a token id; expected ids in [0, 512)" in \
        post(url, COMP, {"model": "tiny", "prompt": "w5", "allowed_token_ids": [5, 512]}).json()["error"]["message"]
    # only EOS allowed while min_tokens forbids it: the engine's refusal, a 400 naming the field too
    eos = tokenizer.eos_token_id
    resp = post(url, COMP, {"model": "tiny", "prompt": "w5", "allowed_token_ids": [eos], "min_tokens": 2})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "allowed_token_ids", resp.text
    assert "min_tokens=2 forbids" in resp.json()["error"]["message"]


@pytest.mark.parametrize("path", [COMP, CHAT])
def test_include_stop_str_in_output_keeps_the_stop_string_at_the_end(server, tokenizer, path):
    url, _ = server
    body = {"model": "tiny", "max_tokens": 12, "temperature": 0, "ignore_eos": True,
            **({"messages": [{"role": "user", "content": "w5 w6"}]} if path == CHAT else {"prompt": "w5 w6"})}

    def text_of(resp: httpx.Response) -> str:
        assert resp.status_code == 200, resp.text
        choice = resp.json()["choices"][0]
        return choice["message"]["content"] if path == CHAT else choice["text"]

    full = text_of(post(url, path, body))
    words = full.split()
    for stop in (words[3], f"{words[4]} {words[5]}"):  # one token's text, and a stop string across two tokens
        start = full.find(stop)
        cut = text_of(post(url, path, {**body, "stop": [stop]}))
        kept = post(url, path, {**body, "stop": [stop], "include_stop_str_in_output": True})
        assert cut == full[:start] and not cut.endswith(stop)
        assert text_of(kept) == full[: start + len(stop)] and text_of(kept).endswith(stop)
        assert kept.json()["choices"][0]["finish_reason"] == "stop"
        assert _stream_text(url, path, {**body, "stop": [stop], "include_stop_str_in_output": True}) == \
            (text_of(kept), "stop")


def test_truncate_prompt_tokens_runs_the_last_k_and_usage_and_echo_say_so(server, tokenizer):
    url, _ = server
    prompt = "w5 w6 w7 w8 w9 w10 w11"
    ids = tokenizer.encode(prompt)
    body = {"model": "tiny", "max_tokens": 4, "temperature": 0, "ignore_eos": True, "echo": True, "logprobs": 1}
    whole = post(url, COMP, {**body, "prompt": prompt}).json()
    for k in (1, 3):
        cut = post(url, COMP, {**body, "prompt": prompt, "truncate_prompt_tokens": k})
        direct = post(url, COMP, {**body, "prompt": ids[-k:]}).json()  # the kept ids sent as the prompt
        assert cut.status_code == 200, cut.text
        assert cut.json()["usage"] == direct["usage"] and direct["usage"]["prompt_tokens"] == k
        assert cut.json()["choices"] == direct["choices"]  # echo, completion and logprobs alike
        assert cut.json()["choices"][0]["text"].startswith(tokenizer.decode(ids[-k:]))
    assert whole["usage"]["prompt_tokens"] == len(ids)
    same = post(url, COMP, {**body, "prompt": prompt, "truncate_prompt_tokens": len(ids)}).json()
    assert same["choices"] == whole["choices"]  # nothing cut: the echo is the text as sent
    long_ids = list(range(5, 5 + 2 * MAX_MODEL_LEN))  # past the context, but not its last 10 tokens
    fits = post(url, COMP, {"model": "tiny", "prompt": long_ids, "max_tokens": 2, "truncate_prompt_tokens": 10})
    assert fits.status_code == 200 and fits.json()["usage"]["prompt_tokens"] == 10, fits.text
    fits = post(url, COMP, {"model": "tiny", "prompt": _words(2 * MAX_MODEL_LEN), "max_tokens": 2,
                            "truncate_prompt_tokens": 10})
    assert fits.status_code == 200 and fits.json()["usage"]["prompt_tokens"] == 10, fits.text
    for k in (0, -1):
        bad = post(url, COMP, {"model": "tiny", "prompt": prompt, "truncate_prompt_tokens": k})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "truncate_prompt_tokens", bad.text


def test_truncate_prompt_tokens_cuts_a_chat_after_its_template(server):
    """As vLLM: the rendered template's tokens are truncated (its start, here the user's first words, goes)."""
    url, _ = server
    messages = [{"role": "user", "content": "w30 w31 w32 w33 w34"}]
    rendered = post(url, "/tokenize", {"messages": messages}).json()["tokens"]
    body = {"model": "tiny", "max_tokens": 4, "temperature": 0, "ignore_eos": True}
    chat = post(url, CHAT, {**body, "messages": messages, "truncate_prompt_tokens": 4}).json()
    direct = post(url, COMP, {**body, "prompt": rendered[-4:]}).json()
    assert chat["usage"] == direct["usage"] and chat["usage"]["prompt_tokens"] == 4 < len(rendered)
    assert chat["choices"][0]["message"]["content"] == direct["choices"][0]["text"]


@pytest.mark.parametrize(("extra", "template_args"), [
    ({}, {"add_generation_prompt": True}),
    ({"chat_template_kwargs": {"enable_thinking": False}}, {"add_generation_prompt": True, "enable_thinking": False}),
    ({"add_generation_prompt": False}, {"add_generation_prompt": False}),
    ({"add_generation_prompt": False, "continue_final_message": True},
     {"add_generation_prompt": False, "continue_final_message": True}),
])
def test_chat_template_variables_reach_the_template(server, offline, tokenizer, extra, template_args):
    url, _ = server
    messages = [{"role": "developer", "content": "w30"},  # passed to the template as is, as vLLM does
                {"role": "user", "content": [{"type": "text", "text": "w5"}, {"type": "text", "text": "w6"}]},
                {"role": "assistant", "content": "w9 w10"}]
    as_template_sees_them = [messages[0], {"role": "user", "content": "w5\nw6"}, messages[2]]  # parts joined by \n
    expected_ids = list(tokenizer.apply_chat_template(as_template_sees_them, chat_template=TEMPLATE, tokenize=True,
                                                      return_dict=False, **template_args))
    assert tokenizer.convert_tokens_to_ids("w20") in expected_ids  # the premise: the developer message is marked
    resp = post(url, CHAT, {"model": "tiny", "messages": messages, "max_tokens": 3, "temperature": 0,
                            "ignore_eos": True, **extra})
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["prompt_tokens"] == len(expected_ids)
    assert resp.json()["choices"][0]["message"]["content"] == offline(expected_ids, 3)[0]  # exactly these ids ran
    tokenized = post(url, "/tokenize", {"messages": messages, **extra})
    assert tokenized.json()["tokens"] == expected_ids, tokenized.text


def test_chat_template_kwargs_cannot_replace_what_the_server_passes(server):
    url, _ = server
    for key in ("chat_template", "messages", "tokenize", "add_generation_prompt"):
        resp = post(url, CHAT, {"model": "tiny", "messages": [{"role": "user", "content": "w5"}],
                                "chat_template_kwargs": {key: "x"}})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "chat_template_kwargs", resp.text


# ---- #6 context errors ---------------------------------------------------------------------------------------
def _words(n: int) -> str:
    return " ".join(f"w{5 + i % 400}" for i in range(n))


def test_context_overflow_is_context_length_exceeded(server):
    url, _ = server
    c = client(url)
    limit = f"This model's maximum context length is {MAX_MODEL_LEN} tokens"
    cases = [
        (COMP, {"prompt": _words(MAX_MODEL_LEN + 5), "max_tokens": 1}, "prompt"),
        (CHAT, {"messages": [{"role": "user", "content": _words(MAX_MODEL_LEN + 5)}]}, "messages"),
        (COMP, {"prompt": _words(40), "max_tokens": 100}, "max_tokens"),
        (CHAT, {"messages": [{"role": "user", "content": "w5"}], "max_completion_tokens": 500}, "max_completion_tokens"),
    ]
    for path, extra, param in cases:
        resp = post(url, path, {"model": "tiny", **extra})
        error = resp.json()["error"]
        assert resp.status_code == 400 and error["code"] == "context_length_exceeded", resp.text
        assert limit in error["message"] and error["param"] == param
    with pytest.raises(openai.BadRequestError) as caught:
        c.completions.create(model="tiny", prompt=_words(40), max_tokens=100)
    assert caught.value.code == "context_length_exceeded" and "(100 > 128 - 40)" in caught.value.message


def test_the_completions_default_of_16_is_refused_past_the_context_and_says_it_was_the_default(server):
    """As OpenAI and vLLM do: max_tokens defaults to 16 for completions, and a prompt that leaves less room is
    refused rather than cut — with a message that says 16 was the default, not something the client sent."""
    url, _ = server
    prompt = _words(MAX_MODEL_LEN - 10)
    resp = post(url, COMP, {"model": "tiny", "prompt": prompt})
    error = resp.json()["error"]
    assert resp.status_code == 400 and error["code"] == "context_length_exceeded", resp.text
    assert "was not given and defaults to 16" in error["message"] and "at most 10" in error["message"]
    assert post(url, COMP, {"model": "tiny", "prompt": prompt, "max_tokens": 10}).status_code == 200
    chat = post(url, CHAT, {"model": "tiny", "messages": [{"role": "user", "content": _words(MAX_MODEL_LEN - 20)}],
                            "ignore_eos": True})  # chat's default: the rest of the context
    usage = chat.json()["usage"]
    assert chat.status_code == 200 and usage["prompt_tokens"] + usage["completion_tokens"] == MAX_MODEL_LEN, chat.text


# ---- #7 model names ------------------------------------------------------------------------------------------
def test_model_names_aliases_and_404(server):
    url, _ = server
    c = client(url)
    assert [m.id for m in c.models.list().data] == ["tiny", "org/tiny-2"]
    assert c.models.retrieve("org/tiny-2").id == "org/tiny-2"
    with pytest.raises(openai.NotFoundError) as caught:
        c.models.retrieve("gpt-4o")
    assert caught.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError) as caught:
        c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "w5"}], max_tokens=2)
    assert caught.value.code == "model_not_found" and "gpt-4o" in caught.value.message
    alias = c.completions.create(model="org/tiny-2", prompt="w5", max_tokens=2)
    assert alias.model == "tiny"  # responses report the first name, as vLLM's do
    omitted = post(url, COMP, {"prompt": "w5", "max_tokens": 2})
    assert omitted.status_code == 200 and omitted.json()["model"] == "tiny", omitted.text


# ---- #9 CORS -------------------------------------------------------------------------------------------------
def test_cors_preflight_and_headers_for_the_allowed_origin_only(server):
    url, _ = server
    preflight = {"origin": ORIGIN, "access-control-request-method": "POST",
                 "access-control-request-headers": "authorization,content-type"}
    ok = httpx.options(f"{url}/v1/chat/completions", headers=preflight)  # no API key: browsers send none here
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == ORIGIN, ok.text
    assert "authorization" in ok.headers["access-control-allow-headers"]
    other = httpx.options(f"{url}/v1/chat/completions", headers={**preflight, "origin": "https://evil.example"})
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    resp = post(url, COMP, {"model": "tiny", "prompt": "w5", "max_tokens": 1}, headers={"origin": ORIGIN})
    assert resp.headers["access-control-allow-origin"] == ORIGIN
    refused = httpx.get(f"{url}/v1/models", headers={"origin": ORIGIN})  # a 401 a page can read
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == ORIGIN


# ---- #10/#11 vLLM's /tokenize, /detokenize, /ping ------------------------------------------------------------
def test_tokenize_detokenize_ping(server, tokenizer):
    url, _ = server
    tok = post(url, "/tokenize", {"prompt": "w5 w6 w7", "return_token_strs": True}).json()
    assert tok == {"count": 3, "max_model_len": MAX_MODEL_LEN, "tokens": tokenizer.encode("w5 w6 w7"),
                   "token_strs": ["w5", "w6", "w7"]}
    assert post(url, "/detokenize", {"tokens": tok["tokens"]}).json() == {"prompt": "w5 w6 w7"}
    bad = post(url, "/detokenize", {"tokens": [5, 10**9]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    both = post(url, "/tokenize", {"prompt": "w5", "messages": [{"role": "user", "content": "w5"}]})
    assert both.status_code == 400
    assert post(url, "/tokenize", {"model": "gpt-4", "prompt": "w5"}).status_code == 404
    assert httpx.get(f"{url}/ping").status_code == 200 and httpx.post(f"{url}/ping").status_code == 200  # no key


# ---- #4 the role chunk goes out with the first output; #12 Retry-After ---------------------------------------
def test_stream_role_chunk_waits_for_the_first_output_and_429_says_when_to_retry(model_dir):
    """One request runs at a time: a chat stream queued behind a long request gets its role chunk only when it
    produced its first token — after the long request's tokens, not before it was scheduled (vLLM's benchmark
    takes the first chunk with choices as the first token)."""
    long_tokens = 600

    async def run(url):
        seen = {"long": 0, "long_done": False}
        order: list[tuple[str, int]] = []
        started = asyncio.Event()
        async with httpx.AsyncClient(timeout=300) as http:
            async def long_request():
                body = {"prompt": "w5 w6", "max_tokens": long_tokens, "ignore_eos": True, "stream": True}
                async with http.stream("POST", f"{url}/v1/completions", json=body) as resp:
                    async for line in resp.aiter_lines():
                        if line.startswith("data: {"):
                            seen["long"] += 1
                            started.set()
                seen["long_done"] = True

            async def chat_stream():
                await started.wait()
                body = {"messages": [{"role": "user", "content": "w5"}], "max_tokens": 3, "stream": True,
                        "stream_options": {"include_usage": True}}
                async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as resp:
                    assert resp.status_code == 200
                    # admitted (the headers came): one running + one waiting fill --max-queue 1, so a third is 429
                    full = await http.post(f"{url}/v1/completions", json={"prompt": "w5", "max_tokens": 1})
                    order.append(("429" if full.status_code == 429 else str(full.status_code),
                                  int(full.headers.get("retry-after", "0"))))
                    premise = not seen["long_done"]
                    async for line in resp.aiter_lines():
                        if not line.startswith("data: {"):
                            continue
                        data = json.loads(line[6:])
                        if not data["choices"]:
                            order.append(("usage", data["usage"]["completion_tokens"]))
                        elif data["choices"][0]["delta"].get("role") == "assistant":
                            order.append(("role", seen["long"]))
                        elif data["choices"][0]["delta"].get("content"):
                            order.append(("content", seen["long"]))
                return premise

            _, premise = await asyncio.gather(long_request(), chat_stream())
        return order, premise

    with running_server(model_dir, max_num_seqs=1, max_queue=1) as (url, _):
        order, premise = asyncio.run(run(url))
        preflight = httpx.options(f"{url}/v1/completions", headers={"origin": ORIGIN,
                                                                     "access-control-request-method": "POST"})
    assert preflight.status_code == 405 and "access-control-allow-origin" not in preflight.headers  # no CORS unasked
    assert premise, "the long request finished before the queue could be seen full"
    assert order[0] == ("429", 1)  # Retry-After: a whole number of seconds
    kinds = [k for k, _ in order[1:]]
    assert kinds[0] == "role" and kinds[1] == "content" and kinds[-1] == "usage", order
    # the old server sent the role chunk at once, when the long request had streamed a handful of its 600 tokens;
    # now it comes after them (give or take the few the client has not read yet on the other connection)
    assert order[1][1] >= long_tokens // 2, order


def test_priority_orders_the_waiting_requests_under_the_priority_policy(model_dir):
    """vLLM's `priority`: with --scheduling-policy priority a lower value is scheduled first (it was ignored);
    without that policy anything but 0 is a 400, as in vLLM."""
    async def run(url, state):
        done: list[str] = []
        async with httpx.AsyncClient(timeout=300) as http:
            first = asyncio.Event()

            async def long_request():
                body = {"prompt": "w5 w6", "max_tokens": 400, "ignore_eos": True, "stream": True}
                async with http.stream("POST", f"{url}/v1/completions", json=body) as resp:
                    async for _ in resp.aiter_lines():
                        first.set()
                done.append("long")

            async def short(name, priority):
                await http.post(f"{url}/v1/completions", json={"prompt": "w7", "max_tokens": 2, "priority": priority})
                done.append(name)

            async def queued_in_order():
                await first.wait()
                tasks = [asyncio.ensure_future(short("first-but-lax", 5))]
                while state.admission.in_flight < 2:  # the lax one waits behind the long one before the urgent comes
                    await asyncio.sleep(0.01)
                tasks.append(asyncio.ensure_future(short("late-but-urgent", -1)))
                while state.admission.in_flight < 3:
                    await asyncio.sleep(0.01)
                premise = "long" not in done
                await asyncio.gather(*tasks)
                return premise

            _, premise = await asyncio.gather(long_request(), queued_in_order())
        return done, premise

    with running_server(model_dir, max_num_seqs=1, scheduling_policy="priority") as (url, state):
        done, premise = asyncio.run(run(url, state))
    assert premise, "the long request finished before both short ones were waiting"
    # the two short ones in the order the policy scheduled them; where "long" lands is the client's business: a
    # loaded event loop can still be reading the long stream's buffered lines when the urgent one's response is in
    assert [name for name in done if name != "long"] == ["late-but-urgent", "first-but-lax"], done


def test_cli_several_served_model_names_and_allowed_origins(model_dir, cli):
    bad = cli("serve", "--model", model_dir, "--allowed-origins", "https://a.example/path")
    assert bad.returncode == 2 and bad.stderr.count("error:") == 1 and "--allowed-origins" in bad.stderr, bad.stderr

    def check(url):
        assert [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]] == ["tiny", "org/tiny-2"]
        preflight = httpx.options(f"{url}/v1/completions", headers={"origin": "http://localhost:3000",
                                                                     "access-control-request-method": "POST"})
        assert preflight.headers["access-control-allow-origin"] == "http://localhost:3000"

    # the flags' parsing is what is tested: the CLI's entry point in this process, serving until SIGTERM
    served = serve_in_process(model_dir, "--served-model-name", "org/tiny-2",
                              "--allowed-origins", f"{ORIGIN}, http://localhost:3000", then=check)
    assert served.returncode == 0, served.stderr[-2000:]
