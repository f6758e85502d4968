"""A generation request's body → the engine's :class:`SamplingParams`, after the checks that need the server.

The body's own validation (types, ranges pydantic can check) is ``protocol.py``'s; what is checked here needs
the served model or the server: token ids against the vocabulary, choices against the admission capacity. Each
refusal is an :class:`APIError` 400 naming the field, in the order a client reads its request: n and best_of,
the logprobs fields, logit_bias, allowed_token_ids, truncate_prompt_tokens, then what it all adds up to.
"""

from __future__ import annotations

import math

from accelkit.core.json_ints import int_literal_too_long
from accelkit.serve.sampling import MAX_LOGPROBS, SamplingParams, StructuredOutputs, derived_seed
from accelkit.serve.server.errors import APIError
from accelkit.serve.server.protocol import ChatCompletionRequest, CompletionRequest

GenerationRequest = CompletionRequest | ChatCompletionRequest


def leading_field(exc: ValueError) -> str:
    """The field a validation message starts with: 'top_k=0 is …', 'logit_bias[5]=…', 'prompt is empty …'."""
    return str(exc).split("=")[0].split("[")[0].split()[0]


def _number(name: str, value: int | float) -> float:
    """A JSON number as a float; an integer too large for one is the client's mistake, not a 500."""
    try:
        number = float(value)
    except OverflowError:
        raise APIError(400, f"{name}={value} is too large; expected a finite number", param=name) from None
    if not math.isfinite(number):
        raise APIError(400, f"{name}={value!r} is not finite; expected a finite number", param=name)
    return number


def check_choices(body: GenerationRequest, num_prompts: int, *, vocab_size: int, capacity: int) -> None:
    """n, best_of, the logprobs fields and the token-id fields: in range, and what they ask for fits the server
    (``capacity``: the engine requests it admits at once; each choice of each prompt is one)."""
    if body.n < 1:
        raise APIError(400, f"n={body.n} must be at least 1", param="n")
    best_of = body.best_of  # (completions' and, as vLLM v0's, chat's: it was an ignored unknown field there)
    if best_of is not None:
        if best_of < body.n:
            raise APIError(400, f"best_of={best_of} must be at least n={body.n}", param="best_of")
        if body.stream and best_of > body.n:
            raise APIError(400, "best_of > n cannot be streamed (the best choices are known only at the end); "
                           "send stream false or best_of equal to n", param="best_of")
    _check_logprobs(body)
    _check_token_ids(body, vocab_size)
    k = body.truncate_prompt_tokens
    if k is not None and k < 1:  # vLLM's -1 ("keep max_model_len tokens") too: a prompt too long has its own 400
        raise APIError(400, f"truncate_prompt_tokens={k} is out of range; expected k >= 1 (the last k prompt "
                       "tokens run), or null for the whole prompt", param="truncate_prompt_tokens")
    total = num_prompts * body.num_generated
    if total > capacity:  # each choice is an engine request
        if body.num_generated == 1:
            raise APIError(400, f"prompt holds {num_prompts} prompts; this server runs at most {capacity} at once",
                           param="prompt")
        raise APIError(400, f"the request asks for {total} completions ({num_prompts} prompt(s) × "
                       f"{'best_of' if best_of else 'n'}={body.num_generated}); this server runs at most "
                       f"{capacity} at once", param="best_of" if best_of else "n")


def _check_logprobs(body: GenerationRequest) -> None:
    logprobs_field = "top_logprobs" if isinstance(body, ChatCompletionRequest) else "logprobs"
    k = body.top_logprobs if isinstance(body, ChatCompletionRequest) else body.logprobs
    if k is not None and not 0 <= k <= MAX_LOGPROBS:
        raise APIError(400, f"{logprobs_field}={k} is out of range; expected 0 to {MAX_LOGPROBS}", param=logprobs_field)
    if isinstance(body, ChatCompletionRequest) and k is not None and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs true", param="top_logprobs")
    k = body.prompt_logprobs
    if k is not None and not 0 <= k <= MAX_LOGPROBS:  # vLLM's -1 (the whole vocabulary) too
        raise APIError(400, f"prompt_logprobs={k} is out of range; expected 0 to {MAX_LOGPROBS} (the most likely "
                       "tokens listed beside each prompt token)", param="prompt_logprobs")
    if k is not None and body.stream:  # vLLM's rule: its stream chunks have no field for them
        raise APIError(400, "prompt_logprobs is not available with stream true (as in vLLM); send stream false, "
                       "or omit prompt_logprobs", param="prompt_logprobs")


def _check_token_ids(body: GenerationRequest, vocab: int) -> None:
    if body.logit_bias:
        seen: dict[int, str] = {}
        for key in body.logit_bias:
            # ASCII digits only: int() also takes '5_0', ' 5', '+5' and other scripts' digits
            if not (key.isascii() and key.isdigit() and not int_literal_too_long(key) and int(key) < vocab):
                raise APIError(400, f"logit_bias key {key[:40]!r} is not a token id; keys are token ids in "
                               f"[0, {vocab}) as strings, e.g. {{\"5\": -100}}", param="logit_bias")
            if int(key) in seen:  # '5' and '05': one token, two biases
                raise APIError(400, f"logit_bias keys {seen[int(key)]!r} and {key!r} are the same token; give "
                               "each token once", param="logit_bias")
            seen[int(key)] = key
    for i, t in enumerate(body.stop_token_ids or ()):
        if not 0 <= t < vocab:
            raise APIError(400, f"stop_token_ids[{i}]={t} is not a token id; expected ids in [0, {vocab})",
                           param="stop_token_ids")
    if body.allowed_token_ids is not None:
        if not body.allowed_token_ids:
            raise APIError(400, "allowed_token_ids is empty; give at least one token id, or omit it to allow any",
                           param="allowed_token_ids")
        for i, t in enumerate(body.allowed_token_ids):
            if not 0 <= t < vocab:
                raise APIError(400, f"allowed_token_ids[{i}]={t} is not a token id; expected ids in [0, {vocab})",
                               param="allowed_token_ids")


def sampling_params(body: GenerationRequest, *, max_tokens: int, choice: int, logprobs: int | None,
                    prompt_logprobs: int | None, structured: StructuredOutputs | None,
                    structured_after: tuple[int, int | None] | None = None) -> SamplingParams:
    """The engine's parameters for choice ``choice`` of the request (its seed derived from the request's)."""
    temperature, top_p = _number("temperature", body.temperature), _number("top_p", body.top_p)
    try:
        return SamplingParams(
            temperature=temperature, top_p=top_p, top_k=body.top_k_limit, max_tokens=max_tokens,
            stop=body.stop_list(), stop_token_ids=tuple(body.stop_token_ids or ()),
            seed=derived_seed(body.seed, choice), ignore_eos=body.ignore_eos,
            presence_penalty=_number("presence_penalty", body.presence_penalty),
            frequency_penalty=_number("frequency_penalty", body.frequency_penalty),
            repetition_penalty=_number("repetition_penalty", body.repetition_penalty),
            min_p=_number("min_p", body.min_p), min_tokens=body.min_tokens,
            logit_bias={int(k): _number("logit_bias", v) for k, v in body.logit_bias.items()}
            if body.logit_bias else None,
            logprobs=logprobs, prompt_logprobs=prompt_logprobs,
            allowed_token_ids=None if body.allowed_token_ids is None else tuple(body.allowed_token_ids),
            bad_words=tuple(body.bad_words or ()),
            include_stop_str_in_output=body.include_stop_str_in_output, skip_special_tokens=body.skip_special_tokens,
            truncate_prompt_tokens=body.truncate_prompt_tokens, structured_outputs=structured,
            structured_outputs_after_token_id=structured_after[0] if structured_after else None,
            structured_outputs_deferred_by_token_id=structured_after[1] if structured_after else None,
            cache_salt=body.cache_salt,
        )
    except ValueError as exc:
        field = leading_field(exc)
        if field == "logprobs" and isinstance(body, ChatCompletionRequest):
            field = "top_logprobs"
        hint = "; 0 or -1 means no limit" if field == "top_k" else ""
        raise APIError(400, f"{exc}{hint}", param=field) from exc
