"""LLM.chat hands the template what vLLM's LLM.chat (and the server) hand it: a content list of text parts was printed
as its Python repr ("user: [{'type': 'text', 'text': 'hi'}]"), a tool call's JSON-text arguments were encoded a second
time by the template's tojson ('"{\\"a\\": 1}"'), and an image part was rendered as text instead of refused."""

import pytest

from accelkit.serve.llm import LLM
from accelkit.serve.sampling import SamplingParams
from accelkit.serve.testing import save_tiny_model

TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{% for c in m.tool_calls or [] %}"
            "{{ c.function.arguments | tojson }}{% endfor %}|{% endfor %}")
ONE = SamplingParams(max_tokens=1)


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    return LLM(str(save_tiny_model(tmp_path_factory.mktemp("m"))))


def test_text_parts_are_joined_and_tool_arguments_parsed(llm):
    parts = [{"role": "user", "content": [{"type": "text", "text": "a b"}, {"type": "text", "text": "c"}]},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]}]
    out = llm.chat(parts, ONE, chat_template=TEMPLATE, add_generation_prompt=False)[0]
    assert out.prompt == 'user: a b\nc|assistant: {"x": 1}|'
    plain = llm.chat([{"role": "user", "content": "a b\nc"}], ONE, chat_template=TEMPLATE)[0]
    assert out.prompt_token_ids[:len(plain.prompt_token_ids)] == plain.prompt_token_ids


@pytest.mark.parametrize(("message", "match"), [
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
     r"^messages\[1\]\[0\]\.content\[0\] is a part of type 'image_url'; this engine takes text only"),
    ({"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{x"}}]},
     r"^messages\[1\]\[0\]\.tool_calls\[0\]\.function\.arguments='\{x' is not JSON"),
])
def test_what_cannot_reach_the_template_is_refused(llm, message, match):
    with pytest.raises(ValueError, match=match):
        llm.chat([[{"role": "user", "content": "a"}], [message]], ONE, chat_template=TEMPLATE)
