"""Offline batch inference: ``LLM(model_dir).generate(prompts, SamplingParams(...))``."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence as Seq
from typing import Any

from accelkit.serve.config import EngineConfig
from accelkit.serve.engine import LLMEngine
from accelkit.serve.outputs import RequestOutput
from accelkit.serve.sampling import SamplingParams

Prompt = str | list[int]


class LLM:
    """An engine for offline use. Keywords are :class:`EngineConfig` fields (dtype, kv_cache_dtype,
    kv_cache_memory_bytes, block_size, max_num_seqs, max_num_batched_tokens, enable_prefix_caching, ...)."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        self.engine = LLMEngine(EngineConfig(model=str(model), **kwargs))
        self._counter = 0

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    def generate(
        self,
        prompts: Prompt | Seq[Prompt],
        sampling_params: SamplingParams | Seq[SamplingParams] | None = None,
        *,
        priority: Seq[int] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt (text or token ids), all batched together; outputs in prompt order.

        Every request is validated before any is queued, so a bad one raises ``ValueError`` (naming the field)
        and nothing runs.
        """
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        prompts = list(prompts)
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params_list = [sampling_params or SamplingParams()] * len(prompts)
        else:
            params_list = list(sampling_params)
            if len(params_list) != len(prompts):
                raise ValueError(f"sampling_params has {len(params_list)} entries for {len(prompts)} prompts")
        priorities = list(priority) if priority is not None else [0] * len(prompts)
        seqs = []
        for i, (prompt, params, prio) in enumerate(zip(prompts, params_list, priorities, strict=True)):
            try:
                seqs.append(self.engine.make_request(prompt, params, request_id=f"offline-{self._counter + i}", priority=prio))
            except ValueError as e:
                raise ValueError(f"prompts[{i}]: {e}") from None
        self._counter += len(prompts)
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
        return [final[seq.request_id] for seq in seqs]
