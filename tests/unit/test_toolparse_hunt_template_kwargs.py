"""``chat_template_kwargs`` that set ``tools`` (or ``documents``): the 400 says where they go — the request's own
field — where it named only add_generation_prompt and continue_final_message as fields of their own (found in a
hunt)."""

from __future__ import annotations

import pytest
from transformers import PreTrainedTokenizerFast

from accelkit.serve.chat_template import ChatTemplateError, chat_template_arguments, render_conversation


@pytest.mark.parametrize("key", ["tools", "documents"])
def test_tools_in_chat_template_kwargs_are_refused_naming_the_field_they_belong_in(key: str) -> None:
    with pytest.raises(ChatTemplateError) as raised:  # (refused before any tokenizer is used)
        render_conversation(None, [{"role": "user", "content": "hi"}], chat_template=None, add_generation_prompt=True,
                            continue_final_message=False, variables={key: []},
                            reserved=chat_template_arguments(PreTrainedTokenizerFast))
    assert raised.value.param == "chat_template_kwargs"
    message = str(raised.value)
    assert message.startswith(f"chat_template_kwargs cannot set {key}: ")
    assert f"{key}," in message and "send them there" in message
