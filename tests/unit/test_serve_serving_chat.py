"""ServingChat without HTTP: a parsed ChatCompletionRequest in, a response dict or SSE events out, against a real
tiny engine loop (its tokenizer's chat template: "role content ... assistant")."""

import pytest

from accelkit.serve.outputs import RequestMetrics, RequestOutput
from accelkit.serve.server.errors import APIError
from accelkit.serve.server.protocol import ChatCompletionRequest
from accelkit.serve.server.serving_chat import ServingChat, chat_message
from accelkit.serve.server.tools import tool_calling
from tests.unit.serving_util import events, models, run, serving_state, settled

MESSAGES = [{"role": "user", "content": "w10 w11 w12"}]
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def serving():
    state = serving_state()
    return ServingChat(state, models(state))


def chat(serving, **fields):
    body = ChatCompletionRequest(**{"messages": MESSAGES, "max_tokens": 4, "temperature": 0, "ignore_eos": True,
                                    **fields})
    return run(serving.create_chat_completion(body))


def streamed(serving, **fields):
    async def go():
        return await events(await serving.create_chat_completion(ChatCompletionRequest(
            **{"messages": MESSAGES, "max_tokens": 4, "temperature": 0, "ignore_eos": True, "stream": True,
               **fields})))
    return run(go())


def test_a_response_is_an_assistant_message_with_usage(serving):
    data = chat(serving)
    assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-") and data["model"] == "tiny"
    (choice,) = data["choices"]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] == "length" and choice["logprobs"] is None
    # the rendered template "user w10 w11 w12 assistant" is 5 tokens
    assert data["usage"] == {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
    assert "prompt_logprobs" not in data
    assert settled(serving.state)


def test_the_stream_starts_with_the_role_and_joins_to_the_full_content(serving):
    full = chat(serving)["choices"][0]["message"]["content"]
    chunks = streamed(serving, n=2, stream_options={"include_usage": True})
    assert chunks[-1] == "[DONE]" and chunks[-2]["usage"]["completion_tokens"] == 8
    deltas = [c for c in chunks[:-2]]
    assert all(c["object"] == "chat.completion.chunk" and c["usage"] is None for c in deltas)
    for index in (0, 1):
        mine = [c["choices"][0] for c in deltas if c["choices"][0]["index"] == index]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}  # the role comes first, alone
        assert "".join(d["delta"].get("content", "") for d in mine[1:]) == full
        assert [d["finish_reason"] for d in mine] == [None] * (len(mine) - 1) + ["length"]


def test_logprobs_list_each_generated_token_with_its_top_k(serving):
    data = chat(serving, logprobs=True, top_logprobs=2, prompt_logprobs=1)
    content = data["choices"][0]["logprobs"]["content"]
    assert len(content) == 4 and all(len(entry["top_logprobs"]) == 2 for entry in content)
    assert len(data["prompt_logprobs"]) == 5 and data["prompt_logprobs"][0] is None  # the response's, for chat
    streamed_lp = [c["choices"][0]["logprobs"] for c in streamed(serving, logprobs=True, top_logprobs=1)[:-1]]
    assert sum(len(lp["content"]) for lp in streamed_lp if lp) == 4


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"top_logprobs": 2}, "top_logprobs", "needs logprobs true"),
    ({"prompt_logprobs": 1, "stream": True}, "prompt_logprobs", "not available with stream"),
    ({"logit_bias": {"05": 1, "5": 2}}, "logit_bias", "are the same token"),
    ({"max_completion_tokens": 1000}, "max_completion_tokens", "maximum context length"),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
])
def test_refusals_are_400s_naming_the_field(serving, fields, param, words):
    with pytest.raises(APIError) as err:
        chat(serving, **fields)
    assert err.value.status == 400 and err.value.param == param and words in err.value.message
    assert settled(serving.state)


def test_a_refused_prompt_names_messages(serving):
    with pytest.raises(APIError) as err:
        chat(serving, messages=[{"role": "user", "content": " ".join(["w9"] * 300)}])
    assert err.value.param == "messages" and err.value.code == "context_length_exceeded"


def _output(text: str, finish_reason: str = "stop") -> RequestOutput:
    return RequestOutput(request_id="r", prompt=None, prompt_token_ids=[1], text=text, token_ids=[5], new_text=text,
                         new_token_ids=[5], finished=True, finish_reason=finish_reason,
                         metrics=RequestMetrics(arrival_time=0.0, num_prompt_tokens=1))


def test_a_message_holds_the_text_or_the_tool_calls_it_makes():
    assert chat_message(_output("hello"), None) == {"message": {"role": "assistant", "content": "hello"},
                                                    "finish_reason": "stop", "stop_reason": None}
    required = tool_calling(TOOLS, "required", parallel_tool_calls=None)
    made = chat_message(_output('[{"name": "lookup", "parameters": {"q": 1}}]'), required)
    (call,) = made["message"]["tool_calls"]
    assert made["finish_reason"] == "tool_calls" and made["message"]["content"] is None
    assert call["function"] == {"name": "lookup", "arguments": '{"q": 1}'} and call["id"].startswith("call_")
    cut_short = chat_message(_output('[{"name": "look', "length"), required)  # no complete call: the text
    assert cut_short == {"message": {"role": "assistant", "content": '[{"name": "look'}, "finish_reason": "length",
                         "stop_reason": None}
    named = chat_message(_output('{"q": 2}'), tool_calling(TOOLS, {"type": "function", "function": {"name": "lookup"}},
                                                    parallel_tool_calls=None))
    assert named["finish_reason"] == "stop" and named["message"]["tool_calls"][0]["function"]["arguments"] == '{"q": 2}'


def test_a_named_call_is_made_only_once_the_output_holds_its_arguments():
    """A reasoning model cut off while thinking has given no answer: a named tool_choice returned a call with empty
    arguments anyway (and streamed its header as soon as the output started). Whole and streamed agree: no call."""
    from accelkit.serve.server.reasoning import REASONING_FORMATS
    from accelkit.serve.server.serving_chat import MessageDeltas

    named = tool_calling(TOOLS, {"type": "function", "function": {"name": "lookup"}}, parallel_tool_calls=None)
    thinking = "<think>still working it out"
    whole = chat_message(_output(thinking, "length"), named, REASONING_FORMATS["deepseek_r1"])
    assert "tool_calls" not in whole["message"] and whole["finish_reason"] == "length"
    assert whole["message"]["reasoning"] == "still working it out"
    stream = MessageDeltas(named, REASONING_FORMATS["deepseek_r1"], True)
    deltas = [d for piece in ("<think>still ", "working it out") for d in stream.step(piece, False)]
    deltas += stream.step("", True)
    assert deltas and not any("tool_calls" in d for d in deltas)
    answered = chat_message(_output(thinking + '</think>{"q": 2}'), named, REASONING_FORMATS["deepseek_r1"])
    assert answered["message"]["tool_calls"][0]["function"]["arguments"] == '{"q": 2}'
