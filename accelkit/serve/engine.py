"""LLMEngine: continuous batching over a paged KV cache. ``step()`` is schedule → run → postprocess → collect;
with ``overlap_postprocess`` (the default on CUDA) a step's postprocessing runs inside the next step, while the
device computes it (its outputs come one step later). Postprocessing — detokenizing, stop strings, output
objects — is the :class:`OutputProcessor`'s (``output_processor.py``); the engine core schedules, runs and
keeps requests apart when one fails.

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
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from accelkit.hardware.device import resolve_device
from accelkit.serve import preflight
from accelkit.serve.block_manager import BlockManager
from accelkit.serve.config import EngineConfig
from accelkit.serve.detokenizer import TokenDecoder
from accelkit.serve.isolation import EngineDeadError, canary_ok, describe, execute_isolating
from accelkit.serve.model_runner import ModelRunner
from accelkit.serve.output_processor import OutputProcessor, RequestState
from accelkit.serve.outputs import EngineStats, RequestOutput
from accelkit.serve.quant.config import ONLINE_METHODS, quantization_name_problem
from accelkit.serve.sampling import SamplingParams, StructuredOutputs
from accelkit.serve.scheduler import ScheduledBatch, Scheduler, SchedulerConfig
from accelkit.serve.sequence import Sequence
from accelkit.serve.structured import CompiledGrammar, GrammarCompiler, StructuredBackend
from accelkit.serve.structured_backends import make_backend
from accelkit.serve.tensor_parallel import (
    TensorParallelLeader,
    check_tensor_parallel_ranks,
    check_tensor_parallel_size,
)
from accelkit.serve.tensor_parallel_worker import worker_main

log = logging.getLogger("accelkit.serve")


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


# a tokenizer's own files: with none of them the directory has no tokenizer; with any, a failure is in them (or in
# what transformers reads beside them, config.json included) and its message says more than a list of file names
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt",
                    "merges.txt", "spiece.model")


def _load_tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model_dir))
    except Exception as exc:  # transformers raises OSError, ValueError, its own validation errors …
        # (found in review: "needs tokenizer.json" was said of a directory holding one, when config.json failed)
        missing = not any((model_dir / name).is_file() for name in _TOKENIZER_FILES)
        hint = ("; the directory needs tokenizer.json or tokenizer_config.json with its vocabulary files" if missing
                else "")
        raise ValueError(f"cannot load the tokenizer of {model_dir} ({describe(exc)}){hint}") from None


class LLMEngine:
    def __init__(self, config: EngineConfig, *, on_step: Callable[[str], None] | None = None) -> None:
        """``on_step``: told each slow step once the model directory has passed its checks (the weights load, the KV
        cache allocation, CUDA graph capture); ``accelkit serve`` shows them as progress."""
        self.config = config
        model_dir = Path(config.model)
        checked = preflight.check_model_dir(model_dir, config.max_model_len)
        hf_config, self.model_args, self.max_model_len = checked.config, checked.args, checked.max_model_len
        check_tensor_parallel_size(config.tensor_parallel_size, self.model_args)
        if config.quantization is not None:  # fp8 of a 16-bit checkpoint, or the name of the checkpoint's own format
            problem = quantization_name_problem(config.quantization, self.model_args.quantization,
                                                str(model_dir / "config.json"), flag="quantization")
            if problem:
                raise ValueError(problem)
        online = config.quantization if config.quantization in ONLINE_METHODS else None
        quantized = self.model_args.quantization.description if self.model_args.quantization else online
        if quantized and config.tensor_parallel_size > 1:  # the ranks' shards are cut from 16-bit tensors only
            raise ValueError(f"tensor_parallel_size={config.tensor_parallel_size} with quantized weights ({quantized}) "
                             "is not supported yet; serve it with tensor_parallel_size=1")
        device = self._preflight(model_dir, hf_config, checked.tensors)
        check_tensor_parallel_ranks(config.tensor_parallel_size, device)
        if config.cpu_threads is not None and device == "cpu":  # (this thread's OpenMP team: the one that steps)
            torch.set_num_threads(config.cpu_threads)
        #: on a CPU, torch's intra-op threads for the steps (read back on the thread that steps); None on a GPU
        self.cpu_threads = torch.get_num_threads() if device == "cpu" else None
        self.tokenizer = _load_tokenizer(model_dir)
        self.eos_token_ids = _eos_token_ids(model_dir, hf_config, self.tokenizer)
        tp = None
        if config.tensor_parallel_size > 1:
            if on_step is not None:
                on_step(f"starting {config.tensor_parallel_size - 1} tensor-parallel worker process(es)")
            tp = TensorParallelLeader(config, device=device, max_model_len=self.max_model_len, worker=worker_main)
        try:
            self.runner = ModelRunner(config, self.model_args, max_model_len=self.max_model_len, device=device,
                                      on_step=on_step, tp=tp)
        except BaseException as exc:
            if tp is None:
                raise
            # a bad setting fails on every rank alike (rank 0 says it); anything else: most likely a worker died
            failure = exc if isinstance(exc, (ValueError, KeyboardInterrupt)) else tp.error(exc)
            tp.shutdown()
            if failure is exc:
                raise
            raise failure from exc
        self.tensor_parallel = tp  # rank 0's side of the group (None on one rank)
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
        self.output_processor = OutputProcessor(
            TokenDecoder(self.tokenizer) if self.tokenizer is not None else None,
            finish_sequence=self.scheduler.finish, release=self._release,
        )
        self._lock = threading.Lock()
        self._inbox: list[RequestState] = []
        self._aborts: list[str] = []
        self._known_ids: set[str] = set()  # accepted and not yet finished (inbox included)
        self._num_steps = self._last_step_tokens = 0
        # steps that ran something: their wall time, the last one's, and the engine thread's CPU time in them
        self._step_seconds = self._step_cpu_seconds = self._last_step_seconds = 0.0
        overlap = config.overlap_postprocess
        self.overlap_postprocess = self.runner.device.type == "cuda" if overlap is None else overlap
        # with overlap: the sequences that got a token in the last step, postprocessed during the next one
        self._deferred: list[Sequence] | None = None
        self._deferred_outputs: list[RequestOutput] = []
        self._deferred_error: Exception | None = None
        self._deliver: Callable[[list[RequestOutput]], None] | None = None  # step()'s, while it runs
        # structured outputs: compiles (and caches) their specs on its own threads; its backend made on first use
        self.structured_compiler = GrammarCompiler(self._make_structured_backend)

    def _preflight(self, model_dir: Path, hf_config: dict[str, Any], tensors: dict[str, preflight.TensorInfo]) -> str:
        """Refuse, before allocating anything, a checkpoint that does not match its config or cannot fit; the device
        ``config.device`` resolves to (resolved here, once)."""
        device = resolve_device(self.config.device)
        where, device_available = preflight.available_memory(device)
        host_available = device_available if where == "host memory" else preflight.available_memory("cpu")[1]
        dtype = self.config.dtype if self.config.dtype != "auto" else (self.model_args.torch_dtype or "float32")
        preflight.check_memory(
            model_dir, hf_config, tensors, dtype=dtype, kv_cache_dtype=self.config.kv_cache_dtype,
            kv_cache_memory_bytes=self.config.kv_cache_memory_bytes, max_model_len=self.max_model_len,
            block_size=self.config.block_size, host_available=host_available, device_available=device_available,
            where=where, max_model_len_is_default=self.config.max_model_len is None,
            tensor_parallel_size=self.config.tensor_parallel_size,
            online_fp8=self.config.quantization == "fp8",
        )
        return device

    def shutdown(self) -> None:
        """Stop the tensor-parallel worker processes, if any (the engine cannot step after this; safe to repeat).
        Without it they end with this process."""
        self.runner.shutdown()

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
        text = prompt if isinstance(prompt, str) else None
        token_ids = self._prompt_token_ids(prompt, params, add_special_tokens=add_special_tokens)
        self._check_params(params)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise ValueError(f"priority={priority!r} is not valid; expected an integer")
        guide = None
        if params.structured_outputs is not None:
            guide = self.structured_compiler.guide(self.structured_compiler.compile(params.structured_outputs))
        rid = request_id if request_id is not None else uuid.uuid4().hex
        seq = Sequence(
            rid, token_ids, params, prompt=text, priority=priority,
            arrival_time=time.monotonic() if arrival_time is None else arrival_time,
        )
        if params.bad_words:
            seq.bad_words_ids = self.bad_words_ids(params.bad_words)
        deferred_by = params.structured_outputs_deferred_by_token_id
        if params.structured_outputs_after_token_id is not None and deferred_by is None:  # (asleep until it: Sequence)
            seq.sleeping_guide, seq.wake_token = guide, params.structured_outputs_after_token_id
        else:
            seq.guide = guide
            if deferred_by is not None and guide is not None:  # (the first token may be it: then the guide sleeps)
                guide.opener = seq.defer_token = deferred_by
        return seq

    def bad_words_ids(self, words: Iterable[str]) -> tuple[tuple[int, ...], ...]:
        """vLLM's tokenization of ``bad_words``: each word (its leading spaces dropped) alone, and after a space where
        that gives as many tokens, the first one different (the word as it comes mid-text); empty ones dropped."""
        if self.tokenizer is None:
            raise ValueError("bad_words needs the model's tokenizer, and this model has none")
        out: list[tuple[int, ...]] = []
        for word in words:
            alone = tuple(self.encode(word.lstrip(), add_special_tokens=False))
            spaced = tuple(self.encode(" " + word.lstrip(), add_special_tokens=False))
            if alone:
                out.append(alone)
            if spaced and (not alone or (spaced[0] != alone[0] and len(spaced) == len(alone))):
                out.append(spaced)
        return tuple(out)

    def _prompt_token_ids(self, prompt: str | list[int], params: SamplingParams, *, add_special_tokens: bool
                          ) -> list[int]:
        """The ids the request runs (tokenized, validated, truncated to ``truncate_prompt_tokens``); ValueError
        naming the field when they cannot."""
        if isinstance(prompt, str):
            token_ids = self.encode(prompt, add_special_tokens=add_special_tokens)
        elif isinstance(prompt, (list, tuple)):
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
        return token_ids

    def _check_params(self, params: SamplingParams) -> None:
        """What ``params`` asks of this model: token ids in its vocabulary, and something min_tokens can sample."""
        vocab = self.model_args.vocab_size
        after, deferred_by = params.structured_outputs_after_token_id, params.structured_outputs_deferred_by_token_id
        # (a stop id past the vocabulary can never be sampled: it would never end anything — another model's ids)
        for field, ids in (("logit_bias", params.logit_bias or ()), ("allowed_token_ids", params.allowed_token_ids or ()),
                           ("stop_token_ids", params.stop_token_ids),
                           ("structured_outputs_after_token_id", () if after is None else (after,)),
                           ("structured_outputs_deferred_by_token_id", () if deferred_by is None else (deferred_by,))):
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

    def structured_guide(self, spec: StructuredOutputs) -> CompiledGrammar:
        """``spec`` compiled for this model's vocabulary; ValueError naming what is wrong or the limit it passed.
        Compiled on the compiler's own threads within its time limit, cached, shared by every request that sends
        the same spec (the server awaits :meth:`GrammarCompiler.compile_async` first, so that make_request finds it
        compiled)."""
        return self.structured_compiler.compile(spec)

    def _make_structured_backend(self) -> StructuredBackend:
        """The structured-output backend over this model's tokenizer (on a compile thread, once)."""
        if self.tokenizer is None:
            raise ValueError("structured_outputs needs the model's tokenizer, and this model has none")

        return make_backend(self.config.structured_outputs_backend, self.tokenizer, self.model_args.vocab_size,
                            self.eos_token_ids)

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
            self._inbox.append(self.output_processor.new_request(seq, final_only=final_only))
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
        """One iteration: schedule → run → postprocess → collect. Returns an output per request that changed.

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
        start, cpu = time.perf_counter(), time.thread_time()
        try:
            return self._step()
        finally:
            self._deliver = None
            if self._last_step_tokens:  # (a step that ran nothing is no iteration: see get_stats)
                self._last_step_seconds = time.perf_counter() - start
                self._step_seconds += self._last_step_seconds
                self._step_cpu_seconds += time.thread_time() - cpu

    def _step(self) -> list[RequestOutput]:
        outputs = self._drain_inbox()  # new requests in, aborted ones out
        batch = self._schedule(outputs)
        if batch is None:  # nothing to run: only the last step's tokens, if any, to postprocess
            return outputs + self._run_deferred()
        updated = self._run(batch, outputs)  # the device step (with overlap, the last step's postprocessing inside it)
        return outputs + self._postprocess(updated)  # now, or (overlap) inside the next step

    def _schedule(self, outputs: list[RequestOutput]) -> ScheduledBatch | None:
        """The next batch, None when there is nothing to run (or scheduling raised: every request failed, their
        outputs added to ``outputs``)."""
        self._last_step_tokens = 0  # until a batch runs: a step that runs nothing has no tokens (and no iteration)
        try:
            batch = self.scheduler.schedule()
        except Exception as exc:
            outputs += self._recover(exc)
            return None
        self._num_steps += 1
        if not batch.seqs:
            return None
        self._last_step_tokens = batch.total_tokens
        now = time.monotonic()
        for seq in batch.seqs:
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = now
        return batch

    def _run(self, batch: ScheduledBatch, outputs: list[RequestOutput]) -> list[Sequence]:
        """Run ``batch`` on the device and account for its tokens: the sequences that got one. The outputs of the
        last step's postprocessing, and of requests that failed, are added to ``outputs``."""
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
                outputs.append(self.output_processor.fail(batch.seqs[row], error))
            if len(failures) == ran:
                self._check_device(next(iter(failures.values())))
        try:
            return self.scheduler.update(batch, sampled)
        except Exception as exc:
            outputs += self._recover(exc)
            return []

    def _postprocess(self, updated: list[Sequence]) -> list[RequestOutput]:
        """The outputs of the sequences that got a token — or, with overlap, none yet: they are postprocessed
        inside the next step."""
        if self.overlap_postprocess:
            self._deferred = updated or None
            return []
        return self.output_processor.process(updated)

    def _overlap_deferred(self) -> None:
        """The runner's ``overlap`` callback: postprocess the last step's tokens now; never raises into the
        runner (an error there is not the running step's: it is kept for ``step`` to recover from)."""
        deferred, self._deferred = self._deferred, None
        if deferred is None:
            return
        try:
            outputs = self.output_processor.process(deferred)
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

    def _release(self, seq: Sequence) -> None:
        """A request ended (the output processor's ``release``): its id can be used again, its device state goes."""
        with self._lock:
            self._known_ids.discard(seq.request_id)
        try:
            self.runner.release(seq)
        except Exception as exc:  # per-request device state only; the request is over either way
            log.warning("releasing request %s failed: %s", seq.request_id, describe(exc))

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
            for req in list(self.output_processor.requests.values()):
                outputs.append(self.output_processor.fail(req.seq, exc))
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
        processor = self.output_processor
        for req in inbox:
            processor.add(req)
            try:
                self.scheduler.add(req.seq)
            except Exception as exc:
                outputs.append(processor.fail(req.seq, exc))
        for request_id in aborts:
            seq = self.scheduler.abort(request_id)
            if seq is not None:
                outputs.append(processor.finish(processor.requests[request_id], time.monotonic()))
        return outputs

    # ---- observability -----------------------------------------------------------------------------
    def get_stats(self) -> EngineStats:
        c, processor, sampler = self.scheduler.counters, self.output_processor, self.runner.sampler
        with self._lock:
            num_inbox = len(self._inbox)
        return EngineStats(
            num_running=len(self.scheduler.running), num_waiting=len(self.scheduler.waiting) + num_inbox,
            kv_cache_usage=self.block_manager.usage, num_preemptions=c.num_preemptions,
            prefix_cache_queries=c.prefix_cache_queries, prefix_cache_hits=c.prefix_cache_hits,
            prompt_tokens=processor.num_prompt_tokens, generation_tokens=processor.num_generation_tokens,
            num_steps=self._num_steps, last_step_num_tokens=self._last_step_tokens,
            num_blocks=self.block_manager.num_blocks, block_size=self.block_manager.block_size,
            requests_finished=dict(processor.num_finished),
            first_draws_allowed=sampler.first_draws_allowed, first_draws_refused=sampler.first_draws_refused,
            step_seconds=self._step_seconds, step_cpu_seconds=self._step_cpu_seconds,
            mask_wait_seconds=sampler.mask_wait_seconds,
            last_step_seconds=self._last_step_seconds,
        )
