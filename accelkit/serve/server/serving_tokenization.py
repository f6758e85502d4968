"""vLLM's POST /tokenize and /detokenize: a text prompt, or messages through the chat template, to token ids —
and token ids back to text."""

from __future__ import annotations

from typing import Any

from accelkit.serve.server.errors import APIError
from accelkit.serve.server.protocol import DetokenizeRequest, TokenizeRequest
from accelkit.serve.server.serving_engine import INLINE_PROMPT_LEN, ServingBase, off_loop_unless, small_body


class ServingTokenization(ServingBase):
    async def tokenize(self, body: TokenizeRequest) -> dict[str, Any]:
        """The token ids (and, with ``return_token_strs``, their strings) of a prompt or of rendered messages —
        with tools rendered too, so that ``count`` is what that chat request's prompt_tokens would be."""
        if (body.prompt is None) == (body.messages is None):
            raise APIError(400, "give exactly one of prompt (text) or messages (a chat)", param="prompt")
        if body.tools and body.messages is None:
            raise APIError(400, "tools are rendered by the chat template: send them with messages, not a prompt",
                           param="tools")
        if body.messages is not None:
            text = await self.render_chat(body.messages, add_generation_prompt=body.add_generation_prompt,
                                          continue_final_message=body.continue_final_message,
                                          chat_template_kwargs=body.chat_template_kwargs, tools=body.tools or None,
                                          documents=body.documents, small=small_body(body))
            special = bool(body.add_special_tokens)  # a rendered template holds its BOS already
        else:
            text = body.prompt or ""
            special = body.add_special_tokens is not False
        engine = self.engine
        tokenizer = engine.tokenizer
        if tokenizer is None:
            raise APIError(400, "this model has no tokenizer", param="prompt")
        try:
            ids = await off_loop_unless(len(text) <= INLINE_PROMPT_LEN, engine.encode, text, add_special_tokens=special)
        except ValueError as exc:
            raise APIError(400, str(exc), param="prompt") from exc
        strs = await off_loop_unless(len(ids) <= INLINE_PROMPT_LEN, tokenizer.convert_ids_to_tokens, ids) \
            if body.return_token_strs else None
        return {"count": len(ids), "max_model_len": engine.max_model_len, "tokens": ids, "token_strs": strs}

    async def detokenize(self, body: DetokenizeRequest) -> dict[str, Any]:
        """Token ids to text (special tokens included, as ``tokenizer.decode`` gives them)."""
        tokenizer, vocab = self.engine.tokenizer, self.engine.model_args.vocab_size
        if tokenizer is None:
            raise APIError(400, "this model has no tokenizer", param="tokens")
        for i, t in enumerate(body.tokens):
            if not 0 <= t < vocab:
                raise APIError(400, f"tokens[{i}]={t} is not a token id; expected an int in [0, {vocab})",
                               param="tokens")
        text = await off_loop_unless(len(body.tokens) <= INLINE_PROMPT_LEN, tokenizer.decode, body.tokens)
        return {"prompt": str(text)}
