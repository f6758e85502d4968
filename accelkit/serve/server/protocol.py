"""The OpenAI request bodies the server accepts (a faithful subset), validated by pydantic.

Fields OpenAI defines but the engine does not implement are accepted only at their neutral values
(``n=1``, no ``logprobs``, zero penalties …); anything else is a 400 that says so, never a silent
change of meaning. Unknown extra fields are ignored, as OpenAI's own server does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

Number = StrictInt | StrictFloat


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: StrictBool = False


class _Sampling(BaseModel):
    """Fields shared by both endpoints."""

    model_config = ConfigDict(extra="ignore")
    model: StrictStr
    max_tokens: StrictInt | None = None
    temperature: Number = 1.0
    top_p: Number = 1.0
    top_k: StrictInt | None = Field(None, description="accelkit/vLLM extension: keep the k most likely tokens.")
    stop: StrictStr | list[StrictStr] | None = None
    seed: StrictInt | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    ignore_eos: StrictBool = Field(False, description="vLLM extension: keep generating after EOS (load tests).")
    n: StrictInt = 1
    presence_penalty: Number = 0.0
    frequency_penalty: Number = 0.0
    user: StrictStr | None = None

    def unsupported(self) -> tuple[str, str] | None:
        """(field, message) for a feature asked for that the engine does not implement."""
        if self.n != 1:
            return "n", f"n={self.n} is not supported; accelkit returns one choice per prompt (n=1)"
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) != 0:
                return name, f"{name} is not supported by accelkit's sampler; leave it at 0"
        if self.stream_options is not None and not self.stream:
            return "stream_options", "stream_options is only allowed when stream is true"
        return None

    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


Prompt = StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]


class CompletionRequest(_Sampling):
    """POST /v1/completions."""

    prompt: Prompt
    echo: StrictBool = False
    logprobs: StrictInt | None = None
    best_of: StrictInt | None = None
    suffix: StrictStr | None = None

    def prompts(self) -> list[str | list[int]]:
        """One entry per choice: text or token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            return []
        texts = [x for x in p if isinstance(x, str)]
        if len(texts) == len(p):
            return list(texts)
        ids = [x for x in p if isinstance(x, int)]
        if len(ids) == len(p):
            return [ids]
        return [list(x) for x in p if isinstance(x, list)]  # pydantic admits only list[list[int]] here

    def unsupported(self) -> tuple[str, str] | None:
        for name, neutral in (("echo", False), ("logprobs", None), ("suffix", None)):
            if getattr(self, name) != neutral:
                return name, f"{name} is not supported by accelkit serve"
        if self.best_of not in (None, 1):
            return "best_of", "best_of > 1 is not supported; accelkit returns one choice per prompt"
        return _Sampling.unsupported(self)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: StrictStr


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: StrictStr | list[TextPart] | None = None
    name: StrictStr | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: StrictInt | None = None
    logprobs: StrictBool = False
    tools: list[Any] | None = None

    def unsupported(self) -> tuple[str, str] | None:
        if self.logprobs:
            return "logprobs", "logprobs is not supported by accelkit serve"
        if self.tools:
            return "tools", "tool calling is not supported by accelkit serve"
        return _Sampling.unsupported(self)

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
