"""``--reasoning-parser``, through the real server and the official openai client: a random tiny Llama whose
byte-level tokenizer has ``<think>`` and ``</think>`` as ordinary added tokens (as Qwen3's and DeepSeek-R1's are),
``logit_bias`` making ``</think>`` frequent. The same request through /v1/completions (the same prompt tokens and
seed, no parser) gives the raw text: the chat message must be exactly its split."""

import json

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from accelkit.serve.testing import save_bytelevel_model
from tests.integration.serve_server_util import running_server
from tests.integration.test_serve_tool_calls import MESSAGES, TEMPLATE, TOOLS, check_call

SEEDS = range(4)
# the test template, its generation prompt closing the thinking with enable_thinking false, as Qwen3's does
THINK_TEMPLATE = TEMPLATE.replace("assistant:{% endif %}", "assistant:{% if enable_thinking is defined and not "
                                  "enable_thinking %}<think></think>{% endif %}{% endif %}")
assert THINK_TEMPLATE != TEMPLATE


@pytest.fixture(scope="module", params=["deepseek_r1", "qwen3"])
def served(request, tmp_path_factory):
    """(URL, logit_bias that makes </think> frequent and <think> come at times, the parser's name)."""
    model_dir = save_bytelevel_model(tmp_path_factory.mktemp("think") / "m", seed=5,
                                     added_tokens=("<think>", "</think>", "<tool_call>", "</tool_call>"))
    ids = AutoTokenizer.from_pretrained(model_dir).convert_tokens_to_ids(["<think>", "</think>"])
    bias = {str(ids[0]): 4, str(ids[1]): 5}
    server = {"chat_template": THINK_TEMPLATE, "reasoning_parser": request.param, "tool_call_parser": "hermes"}
    with running_server(str(model_dir), max_model_len=512, server=server) as (url, _):
        yield url, bias, request.param


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=f"{served[0]}/v1", api_key="unused", timeout=120, max_retries=0)


def raw_text(served, seed: int, max_tokens: int, messages=MESSAGES, **fields) -> str:
    """The chat request's output as plain text: its prompt's tokens (``messages``, rendered with the request's other
    chat ``fields``) through /v1/completions, same seed."""
    url, bias, _ = served
    prompt = httpx.post(f"{url}/tokenize", json={"messages": messages, **fields}, timeout=60).json()["tokens"]
    r = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": max_tokens,
                                                  "seed": seed, "temperature": 1.0, "logit_bias": bias}, timeout=60)
    return r.json()["choices"][0]["text"]


def expected(parser: str, raw: str) -> tuple[str | None, str | None]:
    """(reasoning, content) as the parser's rule says, written out plainly."""
    head = raw.lstrip()
    if head.startswith("<think>"):
        raw = head[len("<think>"):]
    elif parser == "qwen3":  # (thinking off: the answer as written, its leading spaces too)
        return None, raw or None
    reasoning, _, content = raw.partition("</think>")
    return reasoning or None, content.lstrip() or None


def test_the_thinking_is_the_reasoning_and_the_rest_the_content(client, served):
    kinds = set()
    for seed in SEEDS:
        raw = raw_text(served, seed, 24)
        message = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=24, seed=seed,
                                                 temperature=1.0, logit_bias=served[1]).choices[0].message
        reasoning = message.model_extra["reasoning"]
        assert (reasoning, message.content) == expected(served[2], raw), raw
        assert message.model_extra["reasoning_content"] == reasoning
        kinds.add((reasoning is not None, message.content is not None))
    assert len(kinds) >= 2, kinds  # (the seeds give different splits: the test sees more than one case)


def test_streamed_reasoning_and_content_join_to_the_non_streamed_ones(client, served):
    for seed in SEEDS:
        kwargs = dict(model="tiny", messages=MESSAGES, max_tokens=24, seed=seed, temperature=1.0,
                      logit_bias=served[1])
        whole = client.chat.completions.create(**kwargs).choices[0].message
        reasoning, content, older = "", "", ""
        for chunk in client.chat.completions.create(stream=True, **kwargs):
            for choice in chunk.choices:
                extra = choice.delta.model_extra or {}
                reasoning += extra.get("reasoning") or ""
                older += extra.get("reasoning_content") or ""
                content += choice.delta.content or ""
        assert (reasoning or None, content or None) == (whole.model_extra["reasoning"], whole.content)
        assert older == reasoning


def test_include_reasoning_false_leaves_it_out(client, served):
    kwargs = dict(model="tiny", messages=MESSAGES, max_tokens=24, seed=1, temperature=1.0, logit_bias=served[1])
    with_it = client.chat.completions.create(**kwargs).choices[0].message
    without = client.chat.completions.create(extra_body={"include_reasoning": False}, **kwargs).choices[0].message
    assert without.content == with_it.content and "reasoning" not in (without.model_extra or {})


UNIT = {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}}, "required": ["unit"],
        "additionalProperties": False}


def test_a_structured_output_starts_after_the_thinking_where_the_model_thinks_first(client, served):
    """deepseek_r1 takes it that the model thinks first (the prompt here neither opens nor closes <think>): the
    thinking is free, the answer after </think> follows the schema, as vLLM does it. Under qwen3 a hybrid model
    decides: its first token may be <think> (biased here) or what the schema allows — it thinks, then answers in
    the schema, or answers at once, all answer. (EOS is biased away: a model that stops while it thinks has given
    no answer, in vLLM too; at the end of the answer EOS is all the schema allows.)"""
    no_early_eos = {**served[1], "2": -100}
    thought = 0
    for seed in SEEDS:
        choice = client.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=200, seed=seed, temperature=1.0, logit_bias=no_early_eos,
            response_format={"type": "json_schema", "json_schema": {"name": "u", "schema": UNIT}}).choices[0]
        assert choice.finish_reason == "stop", choice
        assert json.loads(choice.message.content) in ({"unit": "c"}, {"unit": "f"}), choice
        reasoning = (choice.message.model_extra or {}).get("reasoning")
        # (free text: the random model's, nothing like the schema's document)
        assert reasoning is None or not reasoning.lstrip().startswith('{"unit"'), choice
        thought += reasoning is not None
    assert thought >= 1, "no output thought first"
    if served[2] == "qwen3":  # with <think> biased away, the hybrid model answers at once: all answer
        think = next(iter(served[1]))  # (the bias's first key: <think>'s id)
        for seed in SEEDS[:3]:
            choice = client.chat.completions.create(
                model="tiny", messages=MESSAGES, max_tokens=200, seed=seed, temperature=1.0,
                logit_bias={**no_early_eos, think: -100},
                response_format={"type": "json_schema", "json_schema": {"name": "u", "schema": UNIT}}).choices[0]
            assert json.loads(choice.message.content) in ({"unit": "c"}, {"unit": "f"}), choice
            assert (choice.message.model_extra or {}).get("reasoning") is None, choice  # (null: it might have)
    forced = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=200, seed=0, tools=TOOLS,
                                            logit_bias=served[1],
                                            tool_choice={"type": "function", "function": {"name": "add"}})
    assert forced.choices[0].message.tool_calls, forced
    check_call(forced.choices[0].message.tool_calls[0], "add")


def test_a_prompt_that_closed_the_thinking_gets_its_structured_output_from_the_first_token(client, served):
    """Qwen3's template with enable_thinking false ends the generation prompt with an empty <think></think>: the
    model does not think, and the mask starts at once — for either parser — and the whole output is the answer,
    as written (it was parsed as reasoning by deepseek_r1, and stripped of its leading spaces by qwen3)."""
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    choice = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=200, seed=0, temperature=1.0, logit_bias=served[1],
        response_format={"type": "json_schema", "json_schema": {"name": "u", "schema": UNIT}},
        extra_body=off).choices[0]
    assert choice.finish_reason == "stop" and json.loads(choice.message.content) in ({"unit": "c"}, {"unit": "f"})
    assert "reasoning" not in (choice.message.model_extra or {}), choice
    for seed in SEEDS:
        free = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=24, seed=seed,
                                              temperature=1.0, logit_bias=served[1], extra_body=off).choices[0]
        raw = raw_text(served, seed, 24, **off)
        assert free.message.content == raw and free.message.model_extra.get("reasoning") is None, (free, raw)


def test_thinking_kept_in_the_history_does_not_decide_this_turns(client, served):
    """An earlier assistant turn's <think>…</think>, kept in the messages, is not this output's: with deepseek_r1
    the output still starts inside its thinking; with qwen3 the model still decides."""
    history = [*MESSAGES, {"role": "assistant", "content": "<think>a</think>b"}, {"role": "user", "content": "c"}]
    for seed in SEEDS:
        choice = client.chat.completions.create(model="tiny", messages=history, max_tokens=24, seed=seed,
                                                temperature=1.0, logit_bias=served[1]).choices[0]
        raw = raw_text(served, seed, 24, history)
        extra = choice.message.model_extra or {}
        assert (extra.get("reasoning"), choice.message.content) == expected(served[2], raw), (choice, raw)


def test_a_continued_message_that_opened_the_thinking_goes_on_thinking(client, served):
    """continue_final_message on an assistant message that opens <think> and does not close it: the output goes on
    inside the thinking, for qwen3 too (it was read as the model's own choice, and its whole output — </think>
    included — came back as content)."""
    history = [*MESSAGES, {"role": "assistant", "content": "<think>let me see"}]
    flags = {"continue_final_message": True, "add_generation_prompt": False}
    for seed in range(2):
        choice = client.chat.completions.create(model="tiny", messages=history, max_tokens=24, seed=seed,
                                                temperature=1.0, logit_bias=served[1], extra_body=flags).choices[0]
        raw = raw_text(served, seed, 24, history, **flags)
        extra = choice.message.model_extra or {}
        assert (extra.get("reasoning"), choice.message.content) == expected(served[2], "<think>" + raw), (choice, raw)


def test_calls_are_read_from_the_answer_and_streamed_as_they_are_returned(client, served):
    """With --tool-call-parser too: the reasoning is split off first, the calls are read from the answer; streamed,
    the reasoning, content and calls join to the non-streamed message."""
    call_id = httpx.post(f"{served[0]}/tokenize", json={"prompt": "<tool_call>", "add_special_tokens": False},
                         timeout=60).json()["tokens"]
    assert len(call_id) == 1
    bias = {**served[1], str(call_id[0]): 3}
    made = 0
    for seed in SEEDS:
        kwargs = dict(model="tiny", messages=MESSAGES, max_tokens=96, seed=seed, temperature=1.0, logit_bias=bias,
                      tools=TOOLS)
        whole = client.chat.completions.create(**kwargs).choices[0].message
        reasoning, content, calls = "", "", {}
        for chunk in client.chat.completions.create(stream=True, **kwargs):
            for choice in chunk.choices:
                reasoning += (choice.delta.model_extra or {}).get("reasoning") or ""
                content += choice.delta.content or ""
                for delta in choice.delta.tool_calls or ():
                    if delta.id is not None:
                        calls[delta.index] = [delta.function.name, ""]
                    calls[delta.index][1] += delta.function.arguments or ""
        assert (reasoning or None, content or None) == (whole.model_extra["reasoning"], whole.content)
        assert [tuple(c) for c in calls.values()] == [(c.function.name, c.function.arguments)
                                                     for c in whole.tool_calls or ()]
        for call in whole.tool_calls or ():
            check_call(call)
        made += len(whole.tool_calls or ())
    assert made >= 1
