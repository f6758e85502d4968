"""Tool calling with tool_choice "required" and a named function, through the real server and the official openai
client: a random tiny Llama with a byte-level BPE tokenizer, so every well-formed call is the structured-output
mask's doing, and each call's arguments are checked against its function's schema by jsonschema."""

import json
import re

import httpx
import jsonschema
import openai
import pytest

from accelkit.serve.testing import save_bytelevel_model
from tests.integration.serve_server_util import running_server

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 10}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
}
ADD = {
    "type": "object",
    "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99},
                   "b": {"type": "integer", "minimum": -5, "maximum": 5}},
    "required": ["a", "b"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "the weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "add", "parameters": ADD}},
]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
MESSAGES = [{"role": "user", "content": "what is the weather in Paris?"}]
# the plain template of save_bytelevel_model, with a line naming the tools when there are any
TEMPLATE = ("{% if tools %}tools:{% for t in tools %} {{ t['function']['name'] }}{% endfor %}\n{% endif %}"
            "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
SEEDS = range(3)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    model_dir = save_bytelevel_model(tmp_path_factory.mktemp("tools") / "m", seed=3)
    with running_server(str(model_dir), max_model_len=512, server={"chat_template": TEMPLATE}) as (url, _):
        yield url


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=f"{served}/v1", api_key="unused", timeout=120, max_retries=0)


def named(name: str) -> dict:
    return {"type": "function", "function": {"name": name}}


def check_call(call, name: str | None = None) -> None:
    # (OpenAI's id form; with the mistral parser, the 9 letters and digits Mistral's templates take back)
    assert call.type == "function" and re.fullmatch("call_[0-9a-f]{24}|[A-Za-z0-9]{9}", call.id), call
    assert name is None or call.function.name == name, call
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_named_function_returns_one_call_with_valid_arguments(client):
    for name in ("get_weather", "add"):
        for seed in SEEDS:
            resp = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice=named(name),
                                                  max_tokens=128, seed=seed)
            choice = resp.choices[0]
            assert choice.finish_reason == "stop" and choice.message.content is None, choice
            assert len(choice.message.tool_calls) == 1
            check_call(choice.message.tool_calls[0], name)


def test_required_returns_one_or_more_calls_of_the_given_tools(client):
    names = set()
    for seed in SEEDS:
        resp = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                              max_tokens=400, seed=seed)
        choice = resp.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None, choice
        assert choice.message.tool_calls
        for call in choice.message.tool_calls:
            check_call(call)
            names.add(call.function.name)
        assert len({c.id for c in choice.message.tool_calls}) == len(choice.message.tool_calls)
    assert names == set(SCHEMAS)  # the model picks among the tools (not one forced path)


def test_required_without_parallel_calls_makes_exactly_one(client):
    for seed in SEEDS:
        resp = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                              parallel_tool_calls=False, max_tokens=200, seed=seed, n=2)
        for choice in resp.choices:
            assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1, choice
            check_call(choice.message.tool_calls[0])


def streamed(client, **kwargs) -> dict[int, dict]:
    """Each choice's tool calls (by index: id, name, arguments joined), content and finish_reason, from the chunks;
    each call's first delta must carry its id, type and name with empty arguments, later ones arguments only."""
    choices: dict[int, dict] = {}
    for chunk in client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, stream=True, **kwargs):
        for c in chunk.choices:
            choice = choices.setdefault(c.index, {"calls": {}, "content": "", "finish_reason": None})
            assert choice["finish_reason"] is None, "a chunk after the finish_reason"
            choice["content"] += c.delta.content or ""
            for d in c.delta.tool_calls or ():
                if d.index not in choice["calls"]:
                    assert d.id.startswith("call_") and d.type == "function" and d.function.arguments == "", d
                    choice["calls"][d.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
                else:
                    assert d.id is None and d.function.name is None, d
                    choice["calls"][d.index]["arguments"] += d.function.arguments
            choice["finish_reason"] = c.finish_reason
    return choices


@pytest.mark.parametrize("tool_choice", [named("get_weather"), named("add"), "required"],
                         ids=["named-weather", "named-add", "required"])
def test_streamed_calls_join_to_the_non_streamed_ones(client, tool_choice):
    for seed in SEEDS:
        kwargs = dict(tool_choice=tool_choice, max_tokens=400, seed=seed, n=2)
        whole = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, **kwargs)
        parts = streamed(client, **kwargs)
        assert sorted(parts) == [0, 1]
        for choice in whole.choices:
            part = parts[choice.index]
            assert part["finish_reason"] == choice.finish_reason
            assert part["content"] == ""
            calls = [part["calls"][i] for i in range(len(part["calls"]))]
            assert [(c["name"], c["arguments"]) for c in calls] == \
                [(c.function.name, c.function.arguments) for c in choice.message.tool_calls]
            for call in choice.message.tool_calls:
                check_call(call)


def test_a_call_cut_short_by_max_tokens(client):
    resp = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice=named("add"),
                                          max_tokens=3, seed=0)
    choice = resp.choices[0]  # a named call stays a call, its arguments the JSON's beginning
    assert choice.finish_reason == "length" and choice.message.tool_calls[0].function.arguments.startswith("{")
    resp = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                          max_tokens=3, seed=0)
    choice = resp.choices[0]  # "required": no list of calls to parse, the text as content
    assert choice.finish_reason == "length" and choice.message.tool_calls is None
    assert choice.message.content.startswith("[")
    parts = streamed(client, tool_choice="required", max_tokens=3, seed=0)
    assert parts[0]["content"] == choice.message.content and not parts[0]["calls"]


def test_required_with_refs_into_a_tools_defs(client):
    unit = {"type": "object", "properties": {"u": {"$ref": "#/$defs/Unit"}}, "required": ["u"],
            "$defs": {"Unit": {"enum": ["c", "f"]}}}
    tools = [TOOLS[1], {"type": "function", "function": {"name": "unit", "parameters": unit}}]
    resp = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=tools, tool_choice="required",
                                          parallel_tool_calls=False, max_tokens=200, seed=1, n=4)
    for choice in resp.choices:
        assert choice.finish_reason == "tool_calls", choice
        for call in choice.message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), {"add": ADD, "unit": unit}[call.function.name])


def test_tools_reach_the_chat_template(client):
    plain = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2, temperature=0)
    none = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2, temperature=0, tools=TOOLS,
                                          tool_choice="none")
    assert none.choices[0].message.tool_calls is None and isinstance(none.choices[0].message.content, str)
    # "tools: get_weather add\n" in front of the same conversation
    assert none.usage.prompt_tokens > plain.usage.prompt_tokens


def test_tool_choice_none_with_a_structural_tag_lets_the_model_choose_text_or_well_formed_calls(client):
    """The way docs/serve.md gives for "auto": the tools rendered, and a structural tag whose structures are the calls
    as the model writes them. Here the trigger is "a" (frequent in a random model's text), so calls are made; every
    one is a whole call to a known tool whose arguments its schema accepts, and the text around them is free."""
    begins = {name: 'a{"name": ' + json.dumps(name) + ', "arguments": ' for name in SCHEMAS}
    tag = {"structures": [{"begin": begin, "schema": SCHEMAS[name], "end": "}"} for name, begin in begins.items()],
           "triggers": ["a"]}
    calls, free = 0, ""
    for seed in SEEDS:
        resp = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=120, seed=seed,
                                              temperature=1.0, tools=TOOLS, tool_choice="none",
                                              extra_body={"response_format": {"type": "structural_tag", **tag}})
        choice = resp.choices[0]
        text, pos = choice.message.content, 0
        assert choice.message.tool_calls is None
        while (start := text.find("a", pos)) >= 0:
            free += text[pos:start]
            name = next((n for n, b in begins.items() if text.startswith(b, start)), None)
            if name is None:  # only a call cut short by max_tokens may stop inside its begin
                assert choice.finish_reason == "length" and any(b.startswith(text[start:]) for b in begins.values())
                break
            try:
                arguments, end = json.JSONDecoder().raw_decode(text, start + len(begins[name]))
            except ValueError:  # (cut short inside the arguments)
                assert choice.finish_reason == "length", text
                break
            jsonschema.validate(arguments, SCHEMAS[name])
            if end == len(text):
                assert choice.finish_reason == "length", text
                break
            assert text[end] == "}", text
            calls, pos = calls + 1, end + 1
        else:
            free += text[pos:]
    assert calls >= 1 and free.strip(), (calls, free)


def test_tokenize_counts_the_tools_as_chat_renders_them(served, client):
    none = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2, temperature=0, tools=TOOLS,
                                          tool_choice="none")
    counted = httpx.post(f"{served}/tokenize", json={"messages": MESSAGES, "tools": TOOLS}, timeout=60)
    plain = httpx.post(f"{served}/tokenize", json={"messages": MESSAGES}, timeout=60)
    assert counted.status_code == plain.status_code == 200, counted.text
    assert counted.json()["count"] == none.usage.prompt_tokens > plain.json()["count"]
    refused = httpx.post(f"{served}/tokenize", json={"prompt": "hi", "tools": TOOLS}, timeout=60)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "tools", refused.text


def post(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"model": "tiny", "messages": MESSAGES, "max_tokens": 8,
                                                           **body}, timeout=120)


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"tools": TOOLS}, "tool_choice", "'required'"),
    ({"tools": TOOLS, "tool_choice": "auto"}, "tool_choice", "parser"),
    ({"tool_choice": named("add")}, "tool_choice", "needs tools"),
    ({"tool_choice": "required", "tools": []}, "tool_choice", "needs tools"),
    ({"tools": TOOLS, "tool_choice": named("mul")}, "tool_choice", "'mul'"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "'sometimes'"),
    ({"tools": TOOLS, "tool_choice": {"type": "function"}}, "tool_choice", "name"),
    ({"tools": [{"type": "function", "function": {"parameters": ADD}}], "tool_choice": "required"}, "tools",
     "tools[0].function.name"),
    ({"tools": [TOOLS[0], {"type": "retrieval"}], "tool_choice": "required"}, "tools", "tools[1]"),
    ({"tools": [TOOLS[0], TOOLS[0]], "tool_choice": named("get_weather")}, "tools", "twice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "array", "uniqueItems": True}}}}}], "tool_choice": named("f")},
     "tools", "tools[0] ('f').function.parameters: the JSON Schema keyword uniqueItems (at properties.n)"),
    ({"tools": [TOOLS[0], {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "array", "uniqueItems": True}}}}}], "tool_choice": "required"},
     "tools", "(at tools[1] ('f').function.parameters.properties.n)"),
    ({"tools": [{"type": "function", "function": {"name": n, "parameters": {
        "type": "object", "properties": {"x": {"$ref": "#/$defs/X"}}, "$defs": {"X": {"type": t}}}}}
        for n, t in (("f", "integer"), ("g", "string"))], "tool_choice": "required"}, "tools", "$defs.X differs"),
    ({"tools": TOOLS, "tool_choice": named("add"), "response_format": {"type": "json_object"}}, "response_format",
     "send only one"),
    ({"tools": TOOLS, "tool_choice": "required", "guided_regex": "a+"}, "guided_regex", "send only one"),
])
def test_bad_tool_requests_are_400s_naming_the_field(served, body, param, words):
    r = post(served, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"], error
