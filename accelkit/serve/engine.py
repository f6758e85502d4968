"""LLMEngine: continuous batching over a paged KV cache. ``step()`` is schedule → run → postprocess; with
``overlap_postprocess`` (the default on CUDA) a step's postprocessing runs inside the next step, while the
device computes it (its outputs come one step later).

``add_request`` and ``abort_request`` may be called from any thread at any time: they validate in the
caller's thread (a bad request raises ``ValueError`` there and touches nothing else) and leave the request
in an inbox that the next ``step()`` drains, so the scheduler itself is only ever used by one thread.

A request that fails inside a step (an exception from the model runner, the sampler or the detokenizer)
finishes alone with ``finish_reason="error"``; the others go on (``accelkit/serve/isolation.py``). ``step()``
raises only :class:`EngineDeadError`, when the engine itself can no longer compute.
"""

from __future__ import annotations

import logging
import numbers
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from accelkit.serve import preflight
from accelkit.serve.block_manager import BlockManager
from accelkit.serve.config import EngineConfig
from accelkit.serve.detokenizer import IncrementalDetokenizer, TokenDecoder
from accelkit.serve.isolation import EngineDeadError, canary_ok, describe, execute_isolating
from accelkit.serve.models.llama import LlamaArgs
from accelkit.serve.outputs import EngineStats, RequestOutput
from accelkit.serve.sampling import SamplingParams, StructuredOutputs
from accelkit.serve.scheduler import Scheduler, SchedulerConfig
from accelkit.serve.sequence import Sequence, SequenceStatus

log = logging.getLogger("accelkit.serve")


@dataclass(slots=True)
class _Request:
    seq: Sequence
    detokenizer: IncrementalDetokenizer | None
    final_only: bool = False  # no output until it finishes (LLM.generate); else one per step with a token
    text: str = ""
    num_sent_chars: int = 0  # characters of text handed out in outputs (a stop string's possible start waits)
    num_returned_tokens: int = 0  # output tokens handed out in outputs so far (new_token_ids start after them)
    num_detokenized: int = 0  # output tokens the detokenizer has seen


def _eos_token_ids(model_dir: Path, cfg: dict[str, Any], tokenizer: Any) -> frozenset[int]:
    """EOS ids as ``generate`` uses them: generation_config.json first, then config.json, then the tokenizer."""
    gen_path = model_dir / "generation_config.json"
    gen = preflight.read_json(gen_path, what="generation_config.json") if gen_path.is_file() else {}
    eos = gen.get("eos_token_id") if isinstance(gen, dict) else None
    source = gen_path
    if eos is None:
        eos, source = cfg.get("eos_token_id"), model_dir / "config.json"
    if eos is None and tokenizer is not None:
        eos, source = tokenizer.eos_token_id, model_dir
    if eos is None:
        return frozenset()
    ids = eos if isinstance(eos, list) else [eos]
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ValueError(f"eos_token_id={eos!r} in {source} is not valid; expected a token id or a list of them")
    return frozenset(ids)


def _load_tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model_dir))
    except Exception as exc:  # transformers raises OSError, ValueError, its own validation errors …
        raise ValueError(
            f"cannot load the tokenizer of {model_dir} ({describe(exc)}); the directory needs tokenizer.json or "
            "tokenizer_config.json with its vocabulary files"
        ) from None


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        from accelkit.serve.model_runner import ModelRunner  # torch: imported when an engine is built

        self.config = config
        model_dir = Path(config.model)
        hf_config = preflight.read_config(model_dir)
        try:
            self.model_args = LlamaArgs.from_config(hf_config)
        except ValueError as exc:  # names the field and what is supported
            raise ValueError(f"{model_dir / 'config.json'}: {exc}") from None
        except (KeyError, TypeError, AttributeError) as exc:  # a field missing or of the wrong type
            raise ValueError(f"{model_dir / 'config.json'}: {describe(exc)}; fix the file or re-download it") from None
        self.max_model_len = config.max_model_len or self.model_args.max_position_embeddings
        if self.max_model_len > self.model_args.max_position_embeddings:
            raise ValueError(
                f"max_model_len={self.max_model_len} exceeds the model's max_position_embeddings="
                f"{self.model_args.max_position_embeddings}"
            )
        self._preflight(model_dir, hf_config)
        self.tokenizer = _load_tokenizer(model_dir)
        self._decoder = TokenDecoder(self.tokenizer) if self.tokenizer is not None else None
        self.eos_token_ids = _eos_token_ids(model_dir, hf_config, self.tokenizer)
        self.runner = ModelRunner(config, self.model_args, max_model_len=self.max_model_len)
        self.block_manager = BlockManager(
            num_blocks=self.runner.num_blocks, block_size=config.block_size,
            enable_prefix_caching=config.enable_prefix_caching,
        )
        sched_cfg = SchedulerConfig(
            max_num_seqs=config.max_num_seqs, max_num_batched_tokens=config.max_num_batched_tokens,
            max_model_len=self.max_model_len, enable_chunked_prefill=config.enable_chunked_prefill,
            policy=config.scheduling_policy,
        )
        self.scheduler = Scheduler(sched_cfg, self.block_manager, eos_token_ids=self.eos_token_ids)
        self._requests: dict[str, _Request] = {}
        self._lock = threading.Lock()
        self._inbox: list[_Request] = []
        self._aborts: list[str] = []
        self._known_ids: set[str] = set()  # accepted and not yet finished (inbox included)
        self._prompt_tokens = self._generation_tokens = self._num_steps = self._last_step_tokens = 0
        self._finished: dict[str, int] = {"stop": 0, "length": 0, "abort": 0, "error": 0}
        overlap = config.overlap_postprocess
        self.overlap_postprocess = self.runner.device.type == "cuda" if overlap is None else overlap
        # with overlap: the sequences that got a token in the last step, postprocessed during the next one
        self._deferred: list[Sequence] | None = None
        self._deferred_outputs: list[RequestOutput] = []
        self._deferred_error: Exception | None = None
        self._deliver: Callable[[list[RequestOutput]], None] | None = None  # step()'s, while it runs
        # structured outputs: what compiles (and caches) their specs, made on first use
        self._guides_lock = threading.Lock()
        self._guide_compiler_: Any = None
        self._guide_vocab_error: str | None = None

    def _preflight(self, model_dir: Path, hf_config: dict[str, Any]) -> None:
        """Refuse, before allocating anything, a checkpoint that does not match its config or cannot fit."""
        tensors = preflight.checkpoint_tensors(model_dir)
        preflight.check_checkpoint(hf_config, tensors, model_dir)
        where, device_available = preflight.available_memory(self.config.device)
        host_available = device_available if where == "host memory" else preflight.available_memory("cpu")[1]
        dtype = self.config.dtype if self.config.dtype != "auto" else (self.model_args.torch_dtype or "float32")
        preflight.check_memory(
            model_dir, hf_config, tensors, dtype=dtype, kv_cache_dtype=self.config.kv_cache_dtype,
            kv_cache_memory_bytes=self.config.kv_cache_memory_bytes, max_model_len=self.max_model_len,
            block_size=self.config.block_size, host_available=host_available, device_available=device_available,
            where=where, max_model_len_is_default=self.config.max_model_len is None,
        )

    @classmethod
    def from_model(cls, model: str, **kwargs: Any) -> LLMEngine:
        return cls(EngineConfig(model=str(model), **kwargs))

    # ---- requests (any thread) ---------------------------------------------------------------------
    def make_request(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        *,
        request_id: str | None = None,
        priority: int = 0,
        arrival_time: float | None = None,
        add_special_tokens: bool = True,
    ) -> Sequence:
        """Validate and tokenize a request (ValueError naming the field) without queueing it.
        ``add_special_tokens=False`` for text that already has them (a rendered chat template)."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise ValueError(f"sampling_params={params!r} is not valid; expected SamplingParams")
        if isinstance(prompt, str):
            text: str | None = prompt
            token_ids = self.encode(prompt, add_special_tokens=add_special_tokens)
        elif isinstance(prompt, (list, tuple)):
            text = None
            vocab = self.model_args.vocab_size
            for i, t in enumerate(prompt):  # numpy's integers are ids too (made plain ints: they index tensors)
                if not isinstance(t, numbers.Integral) or isinstance(t, bool) or not 0 <= t < vocab:
                    raise ValueError(f"prompt_token_ids[{i}]={t!r} is not a token id; expected an int in [0, {vocab})")
            token_ids = [int(t) for t in prompt]
        else:
            raise ValueError(f"prompt={prompt!r} is not valid; expected a string or a list of token ids")
        keep = params.truncate_prompt_tokens
        if keep is not None and len(token_ids) > keep:  # vLLM's: the start goes, the end the output continues stays
            token_ids = token_ids[-keep:]
        if not token_ids:
            raise ValueError("prompt is empty; give at least one token")
        if len(token_ids) >= self.max_model_len:
            raise ValueError(
                f"prompt has {len(token_ids)} tokens; the context holds max_model_len={self.max_model_len} "
                "(prompt plus at least one output token)"
            )
        vocab = self.model_args.vocab_size
        for field, ids in (("logit_bias", params.logit_bias or ()), ("allowed_token_ids", params.allowed_token_ids or ())):
            past = next((t for t in ids if t >= vocab), None)
            if past is not None:
                raise ValueError(f"{field} has the token id {past}, which is not in the vocabulary; expected ids in "
                                 f"[0, {vocab})")
        if params.allowed_token_ids is not None and params.min_tokens:
            # within min_tokens the sampler masks EOS and stop_token_ids: with nothing else allowed, every logit
            # of the row would be -inf and the argmax token 0, allowed or not
            stops = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else self.eos_token_ids)
            if stops.issuperset(params.allowed_token_ids):
                raise ValueError(f"allowed_token_ids={list(params.allowed_token_ids)} holds only tokens that end "
                                 f"generation (EOS, stop_token_ids), which min_tokens={params.min_tokens} forbids "
                                 "before then; allow another token, or leave min_tokens out")
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise ValueError(f"priority={priority!r} is not valid; expected an integer")
        guide = self.structured_guide(params.structured_outputs) if params.structured_outputs is not None else None
        rid = request_id if request_id is not None else uuid.uuid4().hex
        seq = Sequence(
            rid, token_ids, params, prompt=text, priority=priority,
            arrival_time=time.monotonic() if arrival_time is None else arrival_time,
        )
        seq.guide = guide
        return seq

    def structured_guide(self, spec: StructuredOutputs) -> Any:
        """``spec`` compiled for this model's vocabulary (``structured.Guide``); ValueError naming what is wrong.
        The last 64 specs stay compiled (with the token masks their states computed), shared by every request
        that asks for the same one. Any thread (a schema can take a while to compile: the server calls this off
        its event loop first, so that make_request finds it compiled)."""
        return self._guide_compiler().compile(spec)

    def _guide_compiler(self) -> Any:
        """The vocabulary's byte strings and their trie, built on the first structured-output request."""
        if self._guide_vocab_error is not None:
            raise ValueError(self._guide_vocab_error)
        if self._guide_compiler_ is not None:
            return self._guide_compiler_
        from accelkit.serve.structured import GuideCompiler, TokenVocabulary  # (its regex library, when used)

        if self.tokenizer is None:
            self._guide_vocab_error = "structured_outputs needs the model's tokenizer, and this model has none"
            raise ValueError(self._guide_vocab_error)
        try:
            vocab = TokenVocabulary.from_tokenizer(self.tokenizer, self.model_args.vocab_size, self.eos_token_ids)
            vocab.level_trie  # noqa: B018  # built here (the server's worker thread), not in the engine's first step
        except ValueError as exc:
            self._guide_vocab_error = str(exc)
            raise
        with self._guides_lock:
            if self._guide_compiler_ is None:
                self._guide_compiler_ = GuideCompiler(vocab)
                self.runner.sampler.eos_token_ids = self.eos_token_ids
            return self._guide_compiler_

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; ValueError when it is not Unicode text (a lone surrogate, as JSON's
        ``"\\ud800"`` gives), which tokenizers reject with other errors."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"prompt is not valid Unicode text: {exc.reason} at character {exc.start} "
                             f"({text[exc.start:exc.end]!r}); send UTF-8 text") from None
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    def add_sequence(self, seq: Sequence, *, final_only: bool = False) -> str:
        """Queue a request made by :meth:`make_request`. By default ``step()`` returns an output for it after
        every step that gave it a token (streaming); with ``final_only`` only when it finishes (the same final
        output as streaming gives: ``new_text``/``new_token_ids`` are its last step's)."""
        with self._lock:
            if seq.request_id in self._known_ids:
                raise ValueError(f"request_id={seq.request_id!r} is already in use")
            self._known_ids.add(seq.request_id)
            detok = IncrementalDetokenizer(self._decoder, seq.token_ids) if self._decoder is not None else None
            self._inbox.append(_Request(seq, detok, final_only))
        return seq.request_id

    def add_request(
        self, prompt: str | list[int], params: SamplingParams | None = None, *, final_only: bool = False, **kwargs: Any
    ) -> str:
        """Validate and queue one request; returns its id. Keywords: request_id, priority, arrival_time,
        final_only (see :meth:`add_sequence`)."""
        return self.add_sequence(self.make_request(prompt, params, **kwargs), final_only=final_only)

    def abort_request(self, request_id: str) -> None:
        """Abort a request wherever it is; its blocks are freed at the next step (unknown ids are ignored)."""
        with self._lock:
            self._aborts.append(request_id)

    def has_unfinished_requests(self) -> bool:
        with self._lock:
            return bool(self._inbox or self._aborts) or self.scheduler.has_unfinished() or self._deferred is not None

    # ---- the loop ----------------------------------------------------------------------------------
    def step(self, deliver: Callable[[list[RequestOutput]], None] | None = None) -> list[RequestOutput]:
        """One iteration: schedule → run → postprocess. Returns an output per request that changed.

        With ``overlap_postprocess`` (on CUDA by default) the postprocessing of a step's tokens (detokenizing,
        stop strings, output objects) runs while the *next* step computes on the device, so those outputs are
        returned by the next call; a step with nothing to run returns what is still pending. ``deliver``: where
        those outputs go as soon as they exist, inside the device's window, instead of being returned (the
        serving loop's delivery to its clients; it must not raise).

        A failure is charged to the requests that caused it (see ``isolation``): they finish with
        ``finish_reason="error"`` and the step goes on for everyone else. Only a failure the engine cannot
        recover from raises (:class:`EngineDeadError`).
        """
        self._deliver = deliver
        try:
            return self._step()
        finally:
            self._deliver = None

    def _step(self) -> list[RequestOutput]:
        outputs = self._drain_inbox()
        try:
            batch = self.scheduler.schedule()
        except Exception as exc:
            return outputs + self._recover(exc)
        self._num_steps += 1
        self._last_step_tokens = batch.total_tokens
        if not batch.seqs:
            return outputs + self._run_deferred()
        now = time.monotonic()
        for seq in batch.seqs:
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = now
        # the last step's postprocessing, if any, while this one runs on the device
        execute = self.runner.execute if self._deferred is None else partial(self.runner.execute,
                                                                            overlap=self._overlap_deferred)
        # a failed step is re-run in parts without the overlap, after the postprocessing it may not have reached
        # (which can end some of its sequences: those are not re-run)
        sampled, failures = execute_isolating(execute, batch, retry=self.runner.execute, settle=self._overlap_deferred)
        outputs += self._run_deferred()  # (its outputs; it runs here if the step failed before it could)
        if failures:
            ran = sum(not seq.is_finished for seq in batch.seqs)  # (failed rows are not finished yet)
            for row, error in failures.items():
                outputs.append(self._fail(batch.seqs[row], error))
            if len(failures) == ran:
                self._check_device(next(iter(failures.values())))
        try:
            updated = self.scheduler.update(batch, sampled)
        except Exception as exc:
            return outputs + self._recover(exc)
        if self.overlap_postprocess:
            self._deferred = updated or None
            return outputs
        return outputs + self._postprocess(updated)

    def _overlap_deferred(self) -> None:
        """The runner's ``overlap`` callback: postprocess the last step's tokens now; never raises into the
        runner (an error there is not the running step's: it is kept for ``step`` to recover from)."""
        deferred, self._deferred = self._deferred, None
        if deferred is None:
            return
        try:
            outputs = self._postprocess(deferred)
        except Exception as exc:
            self._deferred_error = exc
            return
        if self._deliver is None:
            self._deferred_outputs += outputs
            return
        try:
            self._deliver(outputs)
        except Exception as exc:  # the caller's delivery failed: its outputs are lost, not the step
            log.warning("delivering %d outputs failed: %s", len(outputs), describe(exc))

    def _run_deferred(self) -> list[RequestOutput]:
        """The outputs of the last step's postprocessing (running it now if it has not run yet)."""
        self._overlap_deferred()
        outputs, self._deferred_outputs = self._deferred_outputs, []
        if self._deferred_error is not None:  # the bookkeeping raised: nobody in particular to blame
            exc, self._deferred_error = self._deferred_error, None
            outputs += self._recover(exc)
        return outputs

    def _fail(self, seq: Sequence, exc: BaseException) -> RequestOutput:
        """End one request because of ``exc`` (logged with its id); its KV blocks go back now."""
        log.error("request %s failed; the engine goes on without it: %s", seq.request_id, describe(exc), exc_info=exc)
        if not seq.is_finished:
            self.scheduler.finish(seq, "error")
        return self._finish(self._requests[seq.request_id], time.monotonic(), error=describe(exc))

    def _check_device(self, exc: BaseException) -> None:
        """Every request of a step failed: is it the requests or the device? A one-token canary decides."""
        ok = canary_ok(self.runner.execute, self.runner.release, self.block_manager)
        if ok is False:
            raise EngineDeadError(f"the device failed a one-token test step after {describe(exc)}") from exc

    def _recover(self, exc: Exception) -> list[RequestOutput]:
        """The bookkeeping itself raised, so no single request can be blamed: fail every request in flight,
        then check that every KV block came back and that the device still computes."""
        log.error("engine step failed outside the model (%s); failing every request in flight", describe(exc),
                  exc_info=exc)
        self._deferred = None  # (their requests are failed below)
        outputs = []
        try:
            for req in list(self._requests.values()):
                outputs.append(self._fail(req.seq, exc))
        except Exception as inner:
            raise EngineDeadError(f"cannot recover from {describe(exc)}: {describe(inner)}") from inner
        if self.block_manager.num_free_blocks != self.block_manager.num_blocks:
            raise EngineDeadError(
                f"{self.block_manager.num_blocks - self.block_manager.num_free_blocks} KV blocks are still held "
                f"after failing every request ({describe(exc)})"
            ) from exc
        self._check_device(exc)
        return outputs

    def _drain_inbox(self) -> list[RequestOutput]:
        with self._lock:
            inbox, self._inbox = self._inbox, []
            aborts, self._aborts = self._aborts, []
        # an abort ends its request now: the last step's tokens of that request are postprocessed first
        outputs = self._run_deferred() if aborts else []
        for req in inbox:
            self._requests[req.seq.request_id] = req
            try:
                self.scheduler.add(req.seq)
            except Exception as exc:
                outputs.append(self._fail(req.seq, exc))
        for request_id in aborts:
            seq = self.scheduler.abort(request_id)
            if seq is not None:
                outputs.append(self._finish(self._requests[request_id], time.monotonic()))
        return outputs

    def _postprocess(self, seqs: list[Sequence]) -> list[RequestOutput]:
        """Timestamps, detokenization and stop strings of the sequences that got a token; an output for each
        streaming request and each finished one. Runs for every sequence of every step: kept to a few
        attribute updates, one detokenizer call and (only where one is due) one output object."""
        now = time.monotonic()
        outputs = []
        requests = self._requests
        finished = SequenceStatus.FINISHED
        self._generation_tokens += len(seqs)
        for seq in seqs:
            req = requests[seq.request_id]
            if seq.first_token_time is None:
                seq.first_token_time = now
                self._prompt_tokens += seq.num_prompt_tokens
            seq.last_token_time = now
            new_text = ""
            if req.detokenizer is not None:
                try:
                    new_text = self._detokenize(req, seq)
                except Exception as exc:  # e.g. a tokenizer that cannot decode a sampled id: this request only
                    outputs.append(self._fail(seq, exc))
                    continue
            if seq.status is finished:
                outputs.append(self._finish(req, now, new_text))
            elif not req.final_only:
                outputs.append(self._output(req, new_text))
            else:  # no output now; as if it had been handed out, so the final one's new_* are its last step's
                req.num_returned_tokens = len(seq.token_ids) - seq.num_prompt_tokens
        return outputs

    def _detokenize(self, req: _Request, seq: Sequence) -> str:
        assert req.detokenizer is not None
        start = seq.num_prompt_tokens + req.num_detokenized
        new_ids = seq.token_ids[start:]
        req.num_detokenized += len(new_ids)
        delta = req.detokenizer.add(new_ids, final=seq.status is SequenceStatus.FINISHED)
        params = seq.params
        stops = params.stop
        if not stops:
            req.text += delta
            return self._release_text(req)
        reach = max(len(s) for s in stops) - 1  # characters before the end where a stop string could start
        # within min_tokens a stop string ends nothing (vLLM's: checked once more than min_tokens tokens exist)
        if delta and len(seq.token_ids) - seq.num_prompt_tokens > params.min_tokens:
            text = req.text + delta
            if params.include_stop_str_in_output:
                # cut after the first stop string to complete, which ends in the new text (the text before was
                # all handed out: nothing is held back in this mode)
                ends = [j + len(s) for s in stops if (j := text.find(s, max(0, len(req.text) - len(s) + 1))) >= 0]
                cut = min(ends) if ends else None
            else:
                hits = [j for j in (text.find(s, max(0, len(req.text) - reach)) for s in stops) if j >= 0]
                cut = min(hits) if hits else None
            if cut is not None:
                req.text = text[:cut]
                if not seq.is_finished:
                    self.scheduler.finish(seq, "stop")
                else:
                    seq.finish_reason = "stop"
                return self._release_text(req)
        req.text += delta
        if not seq.is_finished and not params.include_stop_str_in_output:
            # hold back what could be the start of a stop string completed by the next tokens: a stream must
            # never show text that then turns out to begin a stop string (the final text would lack it)
            return self._release_text(req, len(req.text) - reach)
        return self._release_text(req)

    @staticmethod
    def _release_text(req: _Request, end: int | None = None) -> str:
        """The text of ``req`` not handed out yet, up to ``end`` (all of it by default)."""
        start = req.num_sent_chars
        end = len(req.text) if end is None else max(start, end)
        req.num_sent_chars = end
        return req.text[start:end]

    def _output(self, req: _Request, new_text: str, error: str | None = None) -> RequestOutput:
        """A snapshot of the request (no token list is copied here: see ``RequestOutput``)."""
        seq = req.seq
        # (what a stop string holds back is left out; a whole-string slice copies nothing)
        out = RequestOutput.of(seq, text=req.text[: req.num_sent_chars], new_text=new_text,
                               num_returned_tokens=req.num_returned_tokens, error=error)
        req.num_returned_tokens = len(seq.token_ids) - seq.num_prompt_tokens
        return out

    def _finish(self, req: _Request, now: float, new_text: str = "", *, error: str | None = None) -> RequestOutput:
        seq = req.seq
        seq.finished_time = now
        del self._requests[seq.request_id]
        with self._lock:
            self._known_ids.discard(seq.request_id)
        self._finished[seq.finish_reason or "abort"] += 1
        try:
            self.runner.release(seq)
        except Exception as exc:  # per-request device state only; the request is over either way
            log.warning("releasing request %s failed: %s", seq.request_id, describe(exc))
        return self._output(req, new_text + self._release_text(req), error)  # and what a stop string held back

    # ---- observability -----------------------------------------------------------------------------
    def get_stats(self) -> EngineStats:
        c = self.scheduler.counters
        with self._lock:
            num_inbox = len(self._inbox)
        return EngineStats(
            num_running=len(self.scheduler.running), num_waiting=len(self.scheduler.waiting) + num_inbox,
            kv_cache_usage=self.block_manager.usage, num_preemptions=c.num_preemptions,
            prefix_cache_queries=c.prefix_cache_queries, prefix_cache_hits=c.prefix_cache_hits,
            prompt_tokens=self._prompt_tokens, generation_tokens=self._generation_tokens, num_steps=self._num_steps,
            last_step_num_tokens=self._last_step_tokens, num_blocks=self.block_manager.num_blocks,
            block_size=self.block_manager.block_size, requests_finished=dict(self._finished),
        )
