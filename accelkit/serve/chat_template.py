"""A conversation rendered with the model's chat template: one place for the server's chat endpoints and the
offline ``LLM.chat`` (the server turns a refusal into a 400 naming the field; ``LLM.chat`` raises it)."""

from __future__ import annotations

import inspect
from typing import Any


class ChatTemplateError(ValueError):
    """The template could not be applied; ``param`` names the request field at fault."""

    def __init__(self, message: str, *, param: str) -> None:
        super().__init__(message)
        self.param = param


def render_conversation(tokenizer: Any, conversation: list[dict[str, Any]], *, chat_template: str | None,
                        add_generation_prompt: bool, continue_final_message: bool, variables: dict[str, Any],
                        reserved: frozenset[str], tools: list[Any] | None = None,
                        documents: list[Any] | None = None) -> str:
    """The chat template rendered to text (a ChatTemplateError naming what is wrong: a variable that would replace one
    of ``apply_chat_template``'s own arguments, or whatever the template refused). ``tools``: the request's, as sent
    (OpenAI's tool objects, which ``apply_chat_template`` takes as they are); ``documents``: retrieved documents for
    a RAG template (``apply_chat_template``'s, each a dict such as ``{"title": …, "text": …}``)."""
    clash = sorted(reserved & variables.keys())
    if clash:
        raise ChatTemplateError(f"chat_template_kwargs cannot set {', '.join(clash)}: the caller sets "
                                f"{'it' if len(clash) == 1 else 'them'} (tools, documents, add_generation_prompt and "
                                "continue_final_message are fields of their own: send them there)",
                                param="chat_template_kwargs")
    try:
        return str(tokenizer.apply_chat_template(
            conversation, add_generation_prompt=add_generation_prompt, continue_final_message=continue_final_message,
            tokenize=False, chat_template=chat_template, **({"tools": tools} if tools else {}),
            **({"documents": documents} if documents else {}), **variables,
        ))
    except Exception as exc:  # no tokenizer or template, or the template rejects these messages or variables
        raise ChatTemplateError(f"cannot apply the chat template: {type(exc).__name__}: {exc}",
                                param="messages") from exc


def chat_template_arguments(tokenizer: Any) -> frozenset[str]:
    """The names ``apply_chat_template`` takes itself (and ``messages``, the template's own variable): a
    ``chat_template_kwargs`` key among them would replace what the caller passes, so it is refused (vLLM refuses
    ``chat_template`` and ``tokenize``)."""
    method = getattr(tokenizer, "apply_chat_template", None)
    names = {"messages", "conversation", "chat_template", "tokenize", "add_generation_prompt", "continue_final_message"}
    if method is not None:
        names |= {p.name for p in inspect.signature(method).parameters.values()
                  if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return frozenset(names)
