"""A reasoning model's thinking, apart from its answer (``--reasoning-parser``): chat responses carry the text the
model wrote between ``<think>`` and ``</think>`` as the message's ``reasoning`` (and ``reasoning_content``, the
older name vLLM sent it under, which many clients still read), and only the rest as ``content``.

Two formats, by vLLM's parser names:

- ``deepseek_r1`` (DeepSeek-R1 and its distills, QwQ, Qwen3 "Thinking-2507" models, whose chat templates open
  ``<think>`` in the prompt): everything up to the first ``</think>`` is reasoning (a ``<think>`` the model writes
  first is dropped); an output that never closes its thinking — cut short by ``max_tokens`` — is all reasoning;
- ``qwen3`` (Qwen3's hybrid models, where ``enable_thinking: false`` in ``chat_template_kwargs`` turns thinking
  off): reasoning only when the output opens with ``<think>``; otherwise it is all content.

:class:`ReasoningSplitter` splits a text whole or as it streams, and gives the same parts either way: it holds back
only what may still be the start of a tag.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accelkit.serve.server.tool_parsers import MarkerScanner


@dataclass(frozen=True, slots=True)
class ReasoningFormat:
    name: str
    start: str = "<think>"
    end: str = "</think>"
    opened_by_start: bool = False  # reasoning only when the output opens with ``start`` (qwen3)
    # how one request's prompt leaves the thinking (:func:`thinks_first`, set per request): True, opened and not
    # closed — the output starts inside it, whichever the format; False, closed (``enable_thinking: false``) — the
    # output is all answer, as written; None, neither — the format decides
    prompt_opens: bool | None = None


#: the formats ``--reasoning-parser`` names (vLLM's parser names)
REASONING_FORMATS: dict[str, ReasoningFormat] = {
    "deepseek_r1": ReasoningFormat("deepseek_r1"),
    "qwen3": ReasoningFormat("qwen3", opened_by_start=True),
}


@dataclass(slots=True)
class ReasoningSplitter(MarkerScanner[tuple[str, str]]):
    """Splits a model's output into ``("reasoning", text)`` and ``("content", text)`` events, fed whole or in
    pieces (:meth:`feed`); the whitespace between ``</think>`` and the answer is dropped (models put a blank line
    there)."""

    fmt: ReasoningFormat
    _buffer: str = ""
    _state: str = "opening"  # opening (nothing decided yet) → reasoning → answer → content (its first text given)
    _events: list[tuple[str, str]] = field(default_factory=list)

    def _step(self, finished: bool) -> bool:
        fmt, buffer = self.fmt, self._buffer
        if self._state == "opening":  # does the output open with <think>? (spaces before it do not count)
            if fmt.prompt_opens is False:  # (the prompt closed the thinking: all answer, as written)
                self._state = "content"
                return True
            head = buffer.lstrip()
            if head.startswith(fmt.start):
                self._buffer, self._state = head[len(fmt.start):], "reasoning"
                return True
            if fmt.start.startswith(head) and not finished:
                return False
            # no <think>: inside the thinking where the prompt opened it or the format has it start there (R1);
            # else (qwen3, thinking off) all content, as written — no </think> came, so no space is dropped
            self._state = "content" if fmt.opened_by_start and not fmt.prompt_opens else "reasoning"
            return True
        if self._state == "reasoning":
            at = buffer.find(fmt.end)
            if at >= 0:
                self._emit("reasoning", buffer[:at])
                self._buffer, self._state = buffer[at + len(fmt.end):], "answer"
                return True
            self._emit("reasoning", self._take_before(fmt.end, finished))
            return False
        if self._state == "answer":  # the whitespace before the answer's first text is dropped
            self._buffer = buffer = buffer.lstrip()
            if not buffer:
                return False
            self._state = "content"
        self._emit("content", buffer)
        self._buffer = ""
        return False

    def _emit(self, kind: str, text: str) -> None:
        if text:
            self._events.append((kind, text))


def split_reasoning(fmt: ReasoningFormat, text: str) -> tuple[str | None, str]:
    """A whole output's (reasoning — None when there is none —, content)."""
    reasoning: list[str] = []
    content: list[str] = []
    for kind, part in ReasoningSplitter(fmt).feed(text, True):
        (reasoning if kind == "reasoning" else content).append(part)
    return "".join(reasoning) or None, "".join(content)


def thinks_first(fmt: ReasoningFormat, generation_prompt: str | None) -> bool | None:
    """Whether the output begins with thinking, as the chat template's generation prompt (what it adds after the
    messages) leaves it: opens ``<think>`` (DeepSeek-R1's, QwQ's, Qwen3-Thinking-2507's and Qwen3.5's templates) —
    True; closes it (Qwen3's template with ``enable_thinking: false``: ``<think>\\n\\n</think>\\n\\n``) — False;
    neither (or no generation prompt known: None) — the model opens it itself, as deepseek_r1 takes for granted
    (True), or None: qwen3's hybrid models decide for themselves (their first token is ``<think>`` or not). Tags in
    the messages — an earlier turn's thinking kept in the history — say nothing about this output."""
    text = generation_prompt or ""
    opened, closed = text.rfind(fmt.start), text.rfind(fmt.end)
    if opened != closed:  # (both -1: neither)
        return opened > closed
    return None if fmt.opened_by_start else True
