"""tool_choice "auto" with ``--tool-call-parser``, through the real server and the official openai client: a random
tiny Llama whose byte-level tokenizer has the format's call start as an ordinary added token — Qwen's
``<tool_call>`` and ``</tool_call>`` are such tokens (hermes); Llama's ``{"name": `` is text (llama3_json), made a
token here only so that ``logit_bias`` can make the model open calls (a random model seldom would) — or as a special
token, as Mistral's ``[TOOL_CALLS]`` is (mistral: the requests with tools keep it in their text). Everything after
the start is the constraint's doing, and each call's arguments are checked against its tool's schema."""

import json
import re

import httpx
import jsonschema
import openai
import pytest
from transformers import AutoTokenizer

from accelkit.serve.testing import save_bytelevel_model
from tests.integration.serve_server_util import running_server
from tests.integration.test_serve_tool_calls import MESSAGES, SCHEMAS, TEMPLATE, TOOLS, check_call

SEEDS = range(3)


ADDED = {"hermes": ("<tool_call>", "</tool_call>"), "llama3_json": ('{"name": ',), "mistral": ("[TOOL_CALLS]",),
         "mistral_v11": ("[TOOL_CALLS]", "[ARGS]"), "hermes_special": ("<tool_call>", "</tool_call>")}
# formats whose call markers are special tokens: Mistral's always, Hermes' in some tokenizers (Hermes 2 Pro's)
SPECIAL = {"mistral", "mistral_v11", "hermes_special"}
# (the tokenizer's [ARGS] token makes mistral the v11 form)
PARSER = {"mistral_v11": "mistral", "hermes_special": "hermes"}


# (hermes_special only where a test asks for it)
@pytest.fixture(scope="module", params=[p for p in ADDED if p != "hermes_special"])
def served(request, tmp_path_factory):
    """(the server's URL, the id of the token that opens a call, the parser's name)."""
    tokens = {"special_tokens" if request.param in SPECIAL else "added_tokens": ADDED[request.param]}
    model_dir = save_bytelevel_model(tmp_path_factory.mktemp("auto") / "m", seed=4, **tokens)
    opened = AutoTokenizer.from_pretrained(model_dir).convert_tokens_to_ids(ADDED[request.param][0])
    with running_server(str(model_dir), max_model_len=512,
                        server={"chat_template": TEMPLATE,
                                "tool_call_parser": PARSER.get(request.param, request.param)}) as (url, _):
        yield url, opened, request.param


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=f"{served[0]}/v1", api_key="unused", timeout=120, max_retries=0)


def ask(client, served, **kwargs):
    """A chat request with the tools and tool_choice left at its default ("auto"), the model pushed to open calls."""
    kwargs.setdefault("logit_bias", {str(served[1]): 100})
    return client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, temperature=1.0, **kwargs)


def test_every_call_the_model_opens_is_a_whole_call_to_a_given_tool_with_valid_arguments(client, served):
    names = set()
    for seed in SEEDS:
        choice = ask(client, served, max_tokens=160, seed=seed).choices[0]
        assert choice.message.tool_calls, choice
        for call in choice.message.tool_calls:
            check_call(call)
            names.add(call.function.name)
        # the model opens call after call: the last is cut short by max_tokens, and stays text, as written (after
        # whatever free text the model wrote between calls: a token may run past a call's end)
        assert choice.finish_reason == "length", choice
        assert choice.message.content is None or ADDED[served[2]][0] in choice.message.content, choice
    assert names == set(SCHEMAS)


@pytest.mark.parametrize("served", ["mistral", "mistral_v11"], indirect=True)
def test_mistral_calls_take_the_form_the_tokenizer_has_tokens_for(client, served):
    """With the [ARGS] token in the tokenizer, each call is written [TOOL_CALLS]name[ARGS]{…}: the model's tokens
    (its logprobs) hold [ARGS] after the name; without it, the pre-v11 array."""
    choice = ask(client, served, max_tokens=60, seed=0, logprobs=True).choices[0]
    tokens = [t.token for t in choice.logprobs.content]
    assert choice.message.tool_calls, choice
    assert ("[ARGS]" in tokens) is (served[2] == "mistral_v11"), tokens
    assert ('"name"' in "".join(tokens)) is (served[2] == "mistral"), tokens
    # (Mistral's templates raise on a call id that is not 9 letters and digits when the calls come back)
    assert all(re.fullmatch("[A-Za-z0-9]{9}", call.id) for call in choice.message.tool_calls), choice


@pytest.mark.parametrize("served", ["hermes_special"], indirect=True)
def test_hermes_calls_are_read_where_its_markers_are_special_tokens(client, served):
    """Hermes 2 Pro's tokenizer marks <tool_call> and </tool_call> special: requests with tools keep them in the
    text (as vLLM's hermes parser has them), so the calls are read, not lost as content."""
    choice = ask(client, served, max_tokens=160, seed=0).choices[0]
    assert choice.message.tool_calls, choice
    for call in choice.message.tool_calls:
        check_call(call)
        assert re.fullmatch("call_[0-9a-f]{24}", call.id), call


@pytest.mark.parametrize("served", ["hermes"], indirect=True)  # (a llama3_json call has no closing marker)
def test_a_reply_that_ends_after_its_call_finishes_with_tool_calls(client, served):
    """Stopped at the call's closing marker (kept in the text): one call, no content, finish_reason tool_calls."""
    for seed in SEEDS:
        choice = ask(client, served, max_tokens=160, seed=seed, stop=["</tool_call>"],
                     extra_body={"include_stop_str_in_output": True}).choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None, choice
        assert len(choice.message.tool_calls) == 1
        check_call(choice.message.tool_calls[0])


def test_streamed_content_and_calls_join_to_the_non_streamed_ones(client, served):
    for seed in SEEDS:
        whole = ask(client, served, max_tokens=120, seed=seed).choices[0]
        content, calls, reason = "", {}, None
        for chunk in ask(client, served, max_tokens=120, seed=seed, stream=True):
            for choice in chunk.choices:
                content += choice.delta.content or ""
                for delta in choice.delta.tool_calls or ():
                    if delta.id is not None:
                        calls[delta.index] = [delta.id, delta.function.name, ""]
                    calls[delta.index][2] += delta.function.arguments or ""
                reason = choice.finish_reason or reason
        assert reason == whole.finish_reason
        assert (content or None) == whole.message.content
        assert [(name, arguments) for _, name, arguments in calls.values()] == \
            [(c.function.name, c.function.arguments) for c in whole.message.tool_calls]
        assert len({call_id for call_id, _, _ in calls.values()}) == len(calls)


def test_tool_choice_none_leaves_the_text_unconstrained_and_unread(client, served):
    """Unread: a call start the model writes stays in the content — but for a special token (Mistral's), which
    such a request leaves out of its text, as vLLM does (it keeps special tokens only where calls are read)."""
    choice = ask(client, served, max_tokens=40, seed=0, tool_choice="none").choices[0]
    assert choice.message.tool_calls is None, choice
    assert (ADDED[served[2]][0] in choice.message.content) is (served[2] not in SPECIAL), choice
    if served[2] in SPECIAL:  # (asked for, it is there)
        kept = ask(client, served, max_tokens=40, seed=0, tool_choice="none", extra_body={"skip_special_tokens": False})
        assert ADDED[served[2]][0] in kept.choices[0].message.content, kept


def test_required_and_named_choices_are_served_as_without_a_parser(client, served):
    named = ask(client, served, max_tokens=128, seed=0, logit_bias=None,
                tool_choice={"type": "function", "function": {"name": "add"}}).choices[0]
    assert named.finish_reason == "stop" and len(named.message.tool_calls) == 1
    check_call(named.message.tool_calls[0], "add")


ANSWER = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "maximum": 9}},
          "required": ["ok", "n"]}


def test_tools_beside_a_response_format_give_calls_or_the_answer_and_nothing_else(client, served):
    """As OpenAI serves them (agent SDKs send both on every turn): the model calls tools — each call whole and
    valid — or answers with one JSON document valid under the response_format's schema; no free text. Pushed to
    open a call, it calls; kept from it, it answers. Streamed, the same message."""
    response_format = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER, "strict": True}}
    called = answered = 0
    for seed in SEEDS:
        choice = ask(client, served, max_tokens=200, seed=seed, response_format=response_format).choices[0]
        assert choice.message.tool_calls, choice
        for call in choice.message.tool_calls:
            check_call(call)
        called += 1
        kept_from_calls = {str(served[1]): -100}
        choice = ask(client, served, max_tokens=200, seed=seed, response_format=response_format,
                     logit_bias=kept_from_calls).choices[0]
        if choice.finish_reason == "stop":
            assert choice.message.tool_calls is None, choice
            jsonschema.validate(json.loads(choice.message.content), ANSWER)
            answered += 1
        stream = ask(client, served, max_tokens=200, seed=seed, response_format=response_format,
                     logit_bias=kept_from_calls, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == (choice.message.content or ""), (text, choice)
    assert called == len(SEEDS) and answered >= 1
    json_object = ask(client, served, max_tokens=200, seed=0, response_format={"type": "json_object"},
                      logit_bias={str(served[1]): -100}).choices[0]
    assert json_object.finish_reason != "stop" or isinstance(json.loads(json_object.message.content), dict)


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"tools": TOOLS, "structured_outputs": {"regex": "[a-z]+"}}, "structured_outputs",
     "(regex) that cannot go beside tool_choice 'auto'"),
    ({"tools": TOOLS, "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {
        "type": "object", "properties": {"n": {"type": "array", "uniqueItems": True}}}}}}, "response_format",
     "response_format: the JSON Schema keyword uniqueItems (at properties.n)"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "array", "uniqueItems": True}}}}}]}, "tools",
     "tool_choice 'auto': the JSON Schema keyword uniqueItems (at tools[0] ('f').function.parameters.properties.n)"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 5, "maximum": 1}}, "required": ["n"]}}}]}, "tools",
     "tool_choice 'auto': tools[0] ('f').function.parameters: "),
])
def test_bad_auto_requests_are_400s_naming_the_field(served, body, param, words):
    r = httpx.post(f"{served[0]}/v1/chat/completions", json={"model": "tiny", "messages": MESSAGES, "max_tokens": 8,
                                                              **body}, timeout=120)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"], error
