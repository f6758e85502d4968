"""``accelkit serve --chat-template``: a file or the template itself (vLLM's flag takes either), checked to compile as
transformers compiles chat templates — before the server starts, so a broken one is one line and exit 2 rather
than a failure of every chat request."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from accelkit.cli.serve import _chat_template
from accelkit.core.errors import UserError
from accelkit.serve.testing import save_bytelevel_model

# what transformers renders and plain jinja2 refused (found in review: the server would not start): TRL's and
# NeMo's {% generation %} tag, and a loop control
HF_ONLY = ("{% for m in messages %}{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}"
           "{% endgeneration %}{% else %}{{ m['content'] }}{% endif %}{% if loop.index > 1 %}{% break %}{% endif %}"
           "{% endfor %}")


def test_a_template_file_or_the_template_itself_is_taken_when_transformers_renders_it(tmp_path) -> None:
    file = tmp_path / "t.jinja"
    file.write_text(HF_ONLY)
    assert _chat_template(str(file)) == HF_ONLY
    assert _chat_template(HF_ONLY) == HF_ONLY
    assert _chat_template("{{ messages[0]['content'] }}\\n") == "{{ messages[0]['content'] }}\n"  # (vLLM's escapes)
    tokenizer = AutoTokenizer.from_pretrained(save_bytelevel_model(tmp_path / "m"))
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"}]
    assert tokenizer.apply_chat_template(messages, chat_template=_chat_template(HF_ONLY), tokenize=False) == "ab"


@pytest.mark.parametrize(("given", "words"), [
    ("{% for m in messages %}", "--chat-template (the template given): line 1: Unexpected end of template"),
    ("/nonexistent/t.jinja", "--chat-template /nonexistent/t.jinja is missing; give a Jinja template file, or"),
    ("/", "is a directory"),
])
def test_a_template_that_cannot_be_used_is_one_line_naming_the_flag(given: str, words: str) -> None:
    with pytest.raises(UserError) as info:
        _chat_template(given)
    assert words in str(info.value) and "\n" not in str(info.value)
