"""From a request to the token ids the engine runs: the chat template, tokenization, and the context's limits.

Everything here runs in a worker thread when its input is large (tokenizing and templating can take milliseconds),
on the event loop when it is small (``serving_engine.off_loop_unless``).
"""

from __future__ import annotations

from typing import Any

from accelkit.serve.chat_template import ChatTemplateError, render_conversation
from accelkit.serve.engine import LLMEngine
from accelkit.serve.sampling import SamplingParams
from accelkit.serve.server.errors import APIError, prompt_too_long

# A text prompt longer than PROBE_CHARS_PER_TOKEN × max_model_len characters is first tokenized on its first
# that-many characters only: when those alone exceed the context (with slack for the word cut at the end), the
# prompt is refused without tokenizing megabytes that could never run.
PROBE_CHARS_PER_TOKEN = 16
PROBE_SLACK_TOKENS = 64


class ContextLengthExceeded(ValueError):
    """A prompt that leaves no room for even one output token."""


def prompt_token_ids(engine: LLMEngine, prompt: str | list[int], *, add_special_tokens: bool = True,
                     truncate_prompt_tokens: int | None = None) -> tuple[list[int], bool]:
    """Tokenize and validate one prompt (ValueError naming the problem; ContextLengthExceeded when it does not fit):
    its token ids, and whether ``truncate_prompt_tokens`` (k >= 1: keep the last k) cut it.
    A rendered chat template already holds its special tokens (BOS): it is tokenized with
    ``add_special_tokens=False``, as ``apply_chat_template(tokenize=True)`` does."""
    limit = engine.max_model_len
    probe = PROBE_CHARS_PER_TOKEN * limit
    if isinstance(prompt, str):
        if engine.tokenizer is None:
            raise ValueError("this model has no tokenizer; send the prompt as token ids")
        # (truncated, any length may fit: the whole text is tokenized, as long as the body limit lets it be)
        if len(prompt) > probe and truncate_prompt_tokens is None:
            num_head = len(engine.encode(prompt[:probe], add_special_tokens=add_special_tokens))
            if num_head > limit + PROBE_SLACK_TOKENS:
                raise ContextLengthExceeded(
                    f"This model's maximum context length is {limit} tokens and your prompt has more than "
                    f"{num_head - PROBE_SLACK_TOKENS} (its first {probe} characters alone make {num_head}); "
                    f"shorten the prompt to at most {limit - 1} tokens"
                )
        ids: list[int] = engine.encode(prompt, add_special_tokens=add_special_tokens)
    else:
        ids = prompt
    truncated = False
    if truncate_prompt_tokens is not None and len(ids) > truncate_prompt_tokens:
        ids, truncated = ids[-truncate_prompt_tokens:], True
    if len(ids) >= limit:
        raise ContextLengthExceeded(prompt_too_long(len(ids), limit))
    return engine.make_request(ids, SamplingParams(max_tokens=1)).token_ids, truncated


def output_budget(*, max_model_len: int, num_prompt_tokens: int, requested: int | None, field: str,
                  default: int | None) -> int:
    """The max_tokens a request runs with, or an APIError: ``requested`` when given, else ``default``, else the rest
    of the context. Like OpenAI and vLLM, a limit past the context is refused, never cut to fit — that includes
    the completions default of 16, and the message says it was the default."""
    room = max_model_len - num_prompt_tokens
    max_tokens = requested if requested is not None else default if default is not None else room
    if max_tokens < 1:
        raise APIError(400, f"{field}={max_tokens} must be at least 1", param=field)
    if max_tokens > room:
        what = (f"'{field}' is too large: {max_tokens}" if requested is not None else
                f"'{field}' was not given and defaults to {max_tokens} for completions, which is too large here")
        raise APIError(400, f"{what}. This model's maximum context length is {max_model_len} tokens and your request "
                       f"has {num_prompt_tokens} input tokens ({max_tokens} > {max_model_len} - {num_prompt_tokens}); "
                       f"send {field} of at most {room}, or shorten the prompt",
                       param=field, code="context_length_exceeded")
    return max_tokens


def render_chat_template(tokenizer: Any, conversation: list[dict[str, str]], *, chat_template: str | None,
                         add_generation_prompt: bool, continue_final_message: bool, variables: dict[str, Any],
                         reserved: frozenset[str], tools: list[Any] | None = None,
                         documents: list[Any] | None = None) -> str:
    """``chat_template.render_conversation`` with its refusals as 400s naming the field."""
    try:
        return render_conversation(tokenizer, conversation, chat_template=chat_template,
                                   add_generation_prompt=add_generation_prompt,
                                   continue_final_message=continue_final_message, variables=variables,
                                   reserved=reserved, tools=tools, documents=documents)
    except ChatTemplateError as exc:
        raise APIError(400, str(exc), param=exc.param) from exc
