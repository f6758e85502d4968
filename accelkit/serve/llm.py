"""Offline batch inference as vLLM's ``LLM`` offers it: ``LLM(model_dir).generate(prompts, SamplingParams(...))`` and
``LLM(model_dir).chat(messages)``; each output's ``outputs[0].text`` as in vLLM."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import numbers
import os
from collections.abc import Iterable, Mapping
from collections.abc import Sequence as Seq
from typing import Any, TypedDict

from accelkit.core.errors import closest
from accelkit.serve.chat_template import ChatTemplateError, chat_template_arguments, render_conversation
from accelkit.serve.config import EngineConfig
from accelkit.serve.engine import LLMEngine
from accelkit.serve.outputs import CompletionOutput, RequestOutput
from accelkit.serve.sampling import SamplingParams, derived_seed


class TextPrompt(TypedDict):
    """vLLM's text prompt dict: ``{"prompt": "..."}``."""

    prompt: str


class TokensPrompt(TypedDict):
    """vLLM's token-id prompt dict: ``{"prompt_token_ids": [...]}``."""

    prompt_token_ids: list[int]


Prompt = str | list[int] | TextPrompt | TokensPrompt
_PROMPT_FORMS = "{'prompt': text} or {'prompt_token_ids': [token ids]}"


def _is_token_ids(prompts: object) -> bool:
    """One prompt of token ids (a list or tuple of integers, numpy's too, or a 1-D integer array), not a list of
    prompts."""
    if isinstance(prompts, (list, tuple)):
        return bool(prompts) and isinstance(prompts[0], numbers.Integral)
    shape, dtype = getattr(prompts, "shape", None), getattr(prompts, "dtype", None)  # numpy (or torch) without importing it
    return shape is not None and len(shape) == 1 and getattr(dtype, "kind", None) in ("i", "u")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _unpack(prompt: object) -> object:
    """vLLM's prompt dicts (TextPrompt, TokensPrompt) → the text or token ids inside; other prompts unchanged.
    Without this a dict would be read as its keys (``list(prompts)``) and generate for the text of a key."""
    if not isinstance(prompt, Mapping):
        return prompt.tolist() if _is_token_ids(prompt) and not isinstance(prompt, (list, tuple)) else prompt  # type: ignore[attr-defined]
    unknown = [k for k in prompt if k not in ("prompt", "prompt_token_ids")]
    if unknown:
        raise ValueError(f"prompt dict has {', '.join(map(repr, unknown))}, which the engine does not take; "
                         f"expected {_PROMPT_FORMS}")
    if len(prompt) != 1:
        raise ValueError(f"prompt dict has {'both' if prompt else 'neither'} 'prompt' and 'prompt_token_ids'; "
                         f"expected {_PROMPT_FORMS}")
    if "prompt" in prompt:
        text = prompt["prompt"]
        if not isinstance(text, str):
            raise ValueError(f"prompt={text!r} is not valid; expected a string in {{'prompt': text}}")
        return text
    ids = prompt["prompt_token_ids"]
    if not isinstance(ids, (list, tuple)):
        raise ValueError(f"prompt_token_ids={ids!r} is not valid; expected a list of token ids")
    return ids


def _choice_params(params: SamplingParams, choice: int) -> SamplingParams:
    """Choice ``choice`` of an ``n > 1`` request as one engine request: n=1, its seed ``seed + choice`` (vLLM's, wrapped
    into the range a generator takes), so the choices differ and the request stays reproducible."""
    return params.replace(n=1, seed=derived_seed(params.seed, choice))


class _Choices(RequestOutput):
    """One prompt's ``n`` choices as vLLM returns them: one RequestOutput whose ``outputs`` holds n
    CompletionOutputs (index 0..n-1); its own text, token ids, finish reason and metrics are choice 0's."""

    __slots__ = ("_choices",)
    _choices: list[RequestOutput]

    @classmethod
    def merge(cls, request_id: str, choices: list[RequestOutput]) -> _Choices:
        out = cls.__new__(cls)
        for name in RequestOutput.__slots__:
            setattr(out, name, getattr(choices[0], name))
        out.request_id, out._choices = request_id, choices
        return out

    @property
    def outputs(self) -> list[CompletionOutput]:
        return [dataclasses.replace(c.outputs[0], index=i) for i, c in enumerate(self._choices)]


def _params_list(sampling_params: SamplingParams | Seq[SamplingParams] | None, num_prompts: int) -> list[SamplingParams]:
    """One SamplingParams per prompt (one given, or none: the same for every prompt); ValueError naming what is not
    one — a dict was iterated as its keys ("prompts[0]: sampling_params='max_tokens' is not valid") and a str as its
    letters ("sampling_params has 6 entries for 1 prompts")."""
    if sampling_params is None or isinstance(sampling_params, SamplingParams):
        return [sampling_params or SamplingParams()] * num_prompts
    if isinstance(sampling_params, (str, bytes, Mapping)) or not isinstance(sampling_params, Iterable):
        raise ValueError(f"sampling_params={_short(sampling_params)} is not valid; expected a SamplingParams "
                         "(e.g. SamplingParams(max_tokens=16)), or a list of them, one per prompt")
    params_list = list(sampling_params)
    bad = next((i for i, p in enumerate(params_list) if not isinstance(p, SamplingParams)), None)
    if bad is not None:
        raise ValueError(f"sampling_params[{bad}]={_short(params_list[bad])} is not valid; expected a "
                         "SamplingParams (e.g. SamplingParams(max_tokens=16))")
    if len(params_list) != num_prompts:
        raise ValueError(f"sampling_params has {len(params_list)} entries for {num_prompts} prompts; give one "
                         "SamplingParams for all of them, or a list of one per prompt")
    return params_list


def _no_lora(lora_request: object) -> None:
    """vLLM's ``lora_request``: None is taken (scripts pass it); an adapter is refused rather than not applied."""
    if lora_request is not None:
        raise ValueError(f"lora_request={_short(lora_request)}: LoRA adapters are not supported; merge the adapter "
                         "into the model's weights and serve that directory, or leave lora_request out")


def _check_message(where: str, message: Mapping[str, Any]) -> None:
    """ValueError naming a message without a role, or without content (an assistant's tool calls may stand in for
    it, as OpenAI's): a template renders the missing key as nothing, and the model answers a conversation that was
    not the one sent."""
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise ValueError(f"{where}={_short(dict(message))} has no role; give 'role' ('system', 'user', 'assistant', "
                         "...) and 'content'")
    if message.get("content") is None and not (role == "assistant" and message.get("tool_calls")):
        raise ValueError(f"{where}={_short(dict(message))} has no content; give 'content' (text, or a list of parts; "
                         "\"\" for an empty message)")


def _for_template(where: str, message: Mapping[str, Any]) -> dict[str, Any]:
    """The message as the chat template sees it, as vLLM's ``LLM.chat`` (and the server) hand it over: a ``content``
    list of text parts as their texts joined by newlines (the template printed the list's Python repr), and each tool
    call's ``function.arguments`` — OpenAI's JSON text — as the object it holds (templates write it with ``tojson``,
    which encoded the text a second time). A part that is not text, or arguments that are not JSON: ValueError."""
    out = dict(message)
    content = out.get("content")
    if isinstance(content, (list, tuple)):
        texts = []
        for k, part in enumerate(content):
            if isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                kind = f"a part of type {part.get('type')!r}" if isinstance(part, Mapping) else _short(part)
                raise ValueError(f"{where}.content[{k}] is {kind}; this engine takes text only: a string, or parts "
                                 "{'type': 'text', 'text': ...}")
        out["content"] = "\n".join(texts)
    calls = out.get("tool_calls")
    if isinstance(calls, (list, tuple)):
        out["tool_calls"] = [_call_for_template(f"{where}.tool_calls[{k}]", c) for k, c in enumerate(calls)] or None
        if out["tool_calls"] is None:  # [] is no calls: the template's plain assistant turn
            del out["tool_calls"]
    return out


def _call_for_template(where: str, call: Any) -> Any:
    """A tool call with its ``function.arguments`` JSON text read into what it holds ("" as {}); else as given."""
    function: Any = call.get("function") if isinstance(call, Mapping) else None
    arguments = function.get("arguments") if isinstance(function, Mapping) else None
    if not isinstance(arguments, str) or function is None:  # (an object already, or none: as given)
        return call
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError as e:
        raise ValueError(f"{where}.function.arguments={_short(arguments)} is not JSON ({e}); give the JSON text the "
                         "call came with, or the arguments as a dict") from None
    return {**call, "function": {**function, "arguments": parsed}}


class LLM:
    """An engine for offline use. Keywords are :class:`EngineConfig` fields (dtype, kv_cache_dtype,
    kv_cache_memory_bytes, block_size, max_num_seqs, max_num_batched_tokens, enable_prefix_caching,
    tensor_parallel_size, ...). With ``tensor_parallel_size > 1``, :meth:`shutdown` (or ``with LLM(...) as llm:``)
    stops the worker processes; they also end with this process."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        if not isinstance(model, (str, os.PathLike)):  # None read as the directory 'None'
            raise ValueError(f"model={_short(model)} is not valid; give the path of a Hugging Face-format model "
                             "directory (config.json, *.safetensors, tokenizer files)")
        known = [f.name for f in dataclasses.fields(EngineConfig) if f.name != "model"]
        for key in kwargs:  # a bare TypeError "EngineConfig.__init__() got an unexpected keyword argument"
            if key not in known:
                near = closest(key, known)
                hint = f"did you mean {near!r}? " if near else ""
                raise ValueError(f"LLM() has no option {key!r}; {hint}the options are EngineConfig's fields: "
                                 f"{', '.join(known)}")
        self.engine = LLMEngine(EngineConfig(model=os.fspath(model), **kwargs))
        self._counter = 0
        self._shut_down = False

    def shutdown(self) -> None:
        """Stop the engine's worker processes (tensor parallelism); the LLM cannot generate after this (generate and
        chat raise RuntimeError). Safe to repeat."""
        self._shut_down = True
        self.engine.shutdown()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def get_tokenizer(self) -> Any:
        """The tokenizer (vLLM's ``LLM.get_tokenizer()``)."""
        return self.engine.tokenizer

    def generate(
        self,
        prompts: Prompt | Seq[Prompt],
        sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
        *,
        use_tqdm: bool = True,
        lora_request: Any = None,
        priority: int | Seq[int] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt, all batched together; outputs in prompt order. A prompt is text, token ids,
        or vLLM's ``{"prompt": text}`` / ``{"prompt_token_ids": ids}``; one alone or a list of them.
        ``priority``: one integer for all prompts or one per prompt (lower runs first), with
        ``scheduling_policy="priority"`` only. ``use_tqdm`` is taken for vLLM's signature; no progress bar is shown.
        ``lora_request``: vLLM's, None only (no LoRA adapters are served).

        Every request is validated before any is queued, so a bad one raises ``ValueError`` (naming the field)
        and nothing runs.
        """
        del use_tqdm
        _no_lora(lora_request)
        one = isinstance(prompts, (str, Mapping)) or _is_token_ids(prompts)
        if not one and (not isinstance(prompts, Iterable) or isinstance(prompts, bytes)):
            raise ValueError(f"prompts={_short(prompts)} is not a prompt; expected text, token ids, {_PROMPT_FORMS}, "
                             "or a list of those")
        prompt_list: list[object] = [_unpack(p) for p in ([prompts] if one else list(prompts))]
        return self._run(prompt_list, sampling_params, priority, add_special_tokens=True)

    def chat(
        self,
        messages: Seq[Mapping[str, Any]] | Seq[Seq[Mapping[str, Any]]],
        sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
        *,
        use_tqdm: bool = True,
        lora_request: Any = None,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: list[Any] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> list[RequestOutput]:
        """vLLM's ``LLM.chat``: one conversation (a list of ``{"role", "content"}`` messages) or a list of them, each
        rendered with the model's chat template (or ``chat_template``) and generated for as ``generate`` does; the
        rendered text is each output's ``prompt``. A template that refuses the messages raises ``ValueError``."""
        del use_tqdm
        _no_lora(lora_request)
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
            raise ValueError(f"messages={_short(messages)} is not a conversation; expected a list of "
                             "{'role': ..., 'content': ...} messages, or a list of such lists")
        items: list[Any] = list(messages)
        single = bool(items) and isinstance(items[0], Mapping)
        conversations: list[Any] = [items] if single else items
        if self.engine.tokenizer is None:
            raise ValueError("this model has no tokenizer, so no chat template; use generate() with token ids")
        reserved = chat_template_arguments(self.engine.tokenizer)
        rendered: list[object] = []
        for i, conversation in enumerate(conversations):
            where = "messages" if single else f"messages[{i}]"
            if isinstance(conversation, (str, bytes, Mapping)) or not isinstance(conversation, Iterable):
                raise ValueError(f"{where}={_short(conversation)} is not a conversation; expected a list of "
                                 "{'role': ..., 'content': ...} messages")
            bad = [m for m in conversation if not isinstance(m, Mapping)]
            if bad:
                raise ValueError(f"{where} holds {_short(bad[0])}, which is not a message; expected "
                                 "{'role': ..., 'content': ...}")
            for j, m in enumerate(conversation):
                _check_message(f"{where}[{j}]", m)
            try:
                rendered.append(render_conversation(
                    self.engine.tokenizer, [_for_template(f"{where}[{j}]", m) for j, m in enumerate(conversation)],
                    chat_template=chat_template, add_generation_prompt=add_generation_prompt, continue_final_message=continue_final_message,
                    variables=dict(chat_template_kwargs or {}), reserved=reserved, tools=tools,
                ))
            except ChatTemplateError as e:
                raise ValueError(f"{where}: {e}") from None
        # a rendered template holds its special tokens (BOS) already
        return self._run(rendered, sampling_params, None, add_special_tokens=False)

    def _run(self, prompt_list: list[object], sampling_params: SamplingParams | Seq[SamplingParams] | None,
             priority: int | Seq[int] | None, *, add_special_tokens: bool) -> list[RequestOutput]:
        """Validate every request, queue them all, and step until each has finished; outputs in prompt order (a
        prompt's ``n`` choices in one output)."""
        if self._shut_down:  # (one process would still generate; tensor-parallel workers are gone)
            raise RuntimeError("this LLM was shut down (LLM.shutdown() or the end of its `with` block); make a new "
                               "LLM(...) to generate")
        params_list = _params_list(sampling_params, len(prompt_list))
        priorities = self._priorities(priority, len(prompt_list))
        seqs, ids = [], []  # ids: per prompt, its request id and its choices' (one each unless n > 1)
        for i, (prompt, params, prio) in enumerate(zip(prompt_list, params_list, priorities, strict=True)):
            rid = f"offline-{self._counter + i}"
            choice_ids = [rid] if params.n == 1 else [f"{rid}-{j}" for j in range(params.n)]
            ids.append((rid, choice_ids))
            try:
                for j, choice_id in enumerate(choice_ids):
                    seqs.append(self.engine.make_request(
                        prompt, params if params.n == 1 else _choice_params(params, j),  # type: ignore[arg-type]
                        request_id=choice_id, priority=prio, add_special_tokens=add_special_tokens,
                    ))
            except ValueError as e:
                raise ValueError(f"prompts[{i}]: {e}") from None
        self._counter += len(prompt_list)
        for seq in seqs:  # only the final outputs are wanted: the engine builds no per-step ones
            self.engine.add_sequence(seq, final_only=True)
        final: dict[str, RequestOutput] = {}
        try:
            while len(final) < len(seqs):
                for out in self.engine.step():
                    if out.finished:  # (outputs of requests added to the engine by others stream past)
                        final[out.request_id] = out
        except BaseException:
            for seq in seqs:  # leave the engine clean for the next call
                if seq.request_id not in final:
                    self.engine.abort_request(seq.request_id)
            with contextlib.suppress(Exception):  # the original error is the one worth raising
                self.engine.step()
            raise
        return [final[choice_ids[0]] if len(choice_ids) == 1 else _Choices.merge(rid, [final[c] for c in choice_ids])
                for rid, choice_ids in ids]

    def _priorities(self, priority: int | Seq[int] | None, num_prompts: int) -> list[int]:
        """One priority per prompt (one integer: the same for every prompt); any but 0 needs the priority policy, as
        the server (400) and vLLM refuse it otherwise: under FCFS it would be accepted and not honoured."""
        if priority is None:
            return [0] * num_prompts
        if isinstance(priority, numbers.Integral) and not isinstance(priority, bool):
            priority = [int(priority)] * num_prompts
        if isinstance(priority, (str, bytes, Mapping)) or not isinstance(priority, Iterable):
            raise ValueError(f"priority={priority!r} is not valid; expected an integer, or a list of integers, one per "
                             "prompt")
        priority = list(priority)
        if len(priority) != num_prompts:
            raise ValueError(f"priority has {len(priority)} entries for {num_prompts} prompts; give one per prompt")
        policy = self.engine.config.scheduling_policy
        if policy != "priority" and any(p != 0 for p in priority):
            raise ValueError(f"priority={priority!r} needs scheduling_policy='priority' (this LLM's is {policy!r}); "
                             "build the LLM with scheduling_policy='priority' or leave priority out")
        # numpy's integers too (make_request names anything else)
        return [int(p) if isinstance(p, numbers.Integral) and not isinstance(p, bool) else p for p in priority]
