"""Runs one scheduled step on the device: lay out the tokens, forward the model, sample.

Also owns the weights, the KV cache (its number of blocks comes from a memory budget taken after the
weights are loaded: bytes on CPU, a fraction of the free device memory on CUDA — both sized by
``accelkit.core.serving_memory``, which the planner uses too), the attention backend,
the persistent input buffers and, on CUDA, the decode CUDA graphs.

A step's layout is ``[single-token rows | prompt chunks]``; its integers are written with numpy into the
pinned host buffer and reach the device in one copy (``input_buffers.py``). Decode-only steps that fit a
captured batch size replay a CUDA graph (``cuda_graphs.py``); everything else runs eagerly.

With tensor parallelism (``tensor_parallel.py``) every rank has a runner holding its shard and its heads' KV
cache; rank 0's runner prepares each step and broadcasts its packed inputs, the others run what they receive
(:meth:`ModelRunner.run_received`), and only rank 0 computes logits and samples.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch

from accelkit.core.device import usable_cores
from accelkit.core.serving_memory import SCRATCH_BLOCKS, kv_budget_bytes, kv_bytes_per_token, kv_cache_num_blocks
from accelkit.core.units import fmt_bytes
from accelkit.serve.attention import AttentionContext, StepTensors, make_attention_backend, resolve_attention_backend
from accelkit.serve.config import EngineConfig
from accelkit.serve.cuda_graphs import MAX_GRAPH_BATCH_SIZE, DecodeGraphs
from accelkit.serve.input_buffers import HostBlockTables, InputBuffers, Layout
from accelkit.serve.kv_cache import KVCache, kv_cache_class
from accelkit.serve.models.args import ModelArgs
from accelkit.serve.models.llama import load_model
from accelkit.serve.quant.config import ONLINE_METHODS, online_quantization
from accelkit.serve.quant.linear import Fp8Linear, dequant_workspace_bytes
from accelkit.serve.sampler import Sampler
from accelkit.serve.scheduler import ScheduledBatch
from accelkit.serve.sequence import Sequence
from accelkit.serve.tensor_parallel import RankComm, StepHeader, TensorParallelLeader, shard_args, shard_tensor

log = logging.getLogger("accelkit.serve")

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_PROMPT_LOGPROB_ROWS = 256  # prompt positions whose logits are held at once (256 × a 128K vocabulary: 128 MiB fp32)


def resolve_dtype(name: str, args: ModelArgs) -> torch.dtype:
    if name == "auto":
        return _DTYPES.get(args.torch_dtype or "float32", torch.float32)
    return _DTYPES[name]


@dataclass(slots=True)
class PromptRows:
    """The rows of a step whose logits give prompt logprobs: each predicts the prompt token after it."""

    rows: list[int] = field(default_factory=list)  # token rows of the step (graph rows: logits rows)
    targets: list[int] = field(default_factory=list)  # the prompt token each row predicts
    owners: list[tuple[Sequence, int]] = field(default_factory=list)  # whose they are, in order, and how many

    def add(self, seq: Sequence, first_row: int, first_pos: int, count: int) -> None:
        self.rows.extend(range(first_row, first_row + count))
        self.targets.extend(seq.token_ids[first_pos + 1 : first_pos + 1 + count])
        self.owners.append((seq, count))


@dataclass(slots=True)
class Step:
    """A prepared step: where its inputs are, how attention runs, which rows sample."""

    layout: Layout
    tensors: StepTensors
    input_ids: torch.Tensor  # (T,) device view
    positions: torch.Tensor
    logits_indices: torch.Tensor  # (N,) rows whose logits are sampled
    sample_batch_rows: list[int]  # for each of those rows, its index in the ScheduledBatch
    rows_are_prefix: bool  # the sampled rows are exactly rows 0..N-1 (no gather needed)
    graph_size: int | None  # decode-only step padded to this captured batch size
    meta: Any = None  # the backend's metadata
    prompt: PromptRows | None = None  # rows whose logits give prompt logprobs (SamplingParams.prompt_logprobs)
    prompt_logprobs: torch.Tensor | None = None  # their packed logprobs once forward ran (Sampler.read's rows)


class ModelRunner:
    kv_bytes_per_token: int  # K/V bytes of one token over all layers, scales included (serving_memory)

    def __init__(self, config: EngineConfig, args: ModelArgs, *, max_model_len: int, device: str,
                 on_step: Callable[[str], None] | None = None, tp: RankComm | None = None) -> None:
        """``device``: ``config.device`` as ``resolve_device`` resolved it (the engine does that once); ``on_step``
        is told each slow step as it starts (``accelkit serve`` shows them as progress); ``tp``: this rank's place
        in a tensor-parallel group (``args`` are the whole model's; the runner holds its rank's share)."""
        step = on_step or (lambda text: None)
        self.config = config
        self.tp = tp
        self.full_args = args
        args = shard_args(args, tp.size) if tp is not None else args
        self.args = args
        self.device = torch.device(device)
        self._usable_cores = usable_cores()  # (read once: a syscall, and _spare_core asks every guided step)
        self._select_device()  # kernels launch, and graphs capture, on the current device: make it ours
        self.dtype = resolve_dtype(config.dtype, args)
        self.attention_backend = resolve_attention_backend(
            config.attention_backend, self.device, enforce_eager=config.enforce_eager
        )
        # the MoE reference path reads on the host which experts received tokens: not capturable
        self.use_cuda_graphs = self.device.type == "cuda" and not config.enforce_eager and args.moe is None
        if self.device.type == "cuda" and not config.enforce_eager and args.moe is not None:
            log.info("%s: decode steps run eagerly (the MoE layers' per-expert loop cannot be captured in a CUDA graph)",
                     args.architecture)
        self.block_size = config.block_size
        self.max_model_len = max_model_len
        self.max_blocks_per_seq = -(-max_model_len // self.block_size)
        step(f"loading the weights onto {self.device}")
        shard = None
        if tp is not None:
            def shard(name: str, tensor: torch.Tensor) -> torch.Tensor:
                return shard_tensor(name, tensor, args=self.full_args, rank=tp.rank, size=tp.size)
        # (a checkpoint's own format named in config.quantization is served from its quantization_config: args')
        self.quantization = args.quantization or (online_quantization(config.quantization)
                                                  if config.quantization in ONLINE_METHODS else None)
        self.model = load_model(config.model, args, dtype=self.dtype, device=self.device, shard=shard,
                                quantization=self.quantization)
        if tp is not None:
            self.model.set_all_reduce(tp.all_reduce)
        # what the weights occupy as loaded: quantized codes and scales at their own size, the rest in self.dtype
        self.weight_bytes = sum(t.numel() * t.element_size() for t in (*self.model.parameters(), *self.model.buffers()))
        log.info("weights: %s (%s)", fmt_bytes(self.weight_bytes),
                 self.quantization.description if self.quantization else f"{self.dtype}".removeprefix("torch."))
        if self.quantization is not None and self.quantization.kind == "fp8":
            self._select_fp8_matmul()
        step("allocating the KV cache")
        self.model.init_rope(max_model_len, dtype=self.dtype, device=self.device)
        self.kv_cache = self._allocate_kv_cache()
        self.scratch_block = self.kv_cache.num_blocks - 1  # padding rows write here; never handed out
        self.backend = make_attention_backend(
            self.attention_backend, self.kv_cache, num_heads=args.num_heads, head_dim=args.head_dim,
            sliding_window=args.sliding_window, chosen_by_auto=config.attention_backend == "auto",
        )
        self.attention_backend = self.backend.name  # (auto's cpu may have given way to sdpa)
        if self.attention_backend == "triton":  # the Triton path: RMSNorm and SiLU·mul fused as well
            self.model.use_fused_kernels()
        limit = config.max_cuda_graph_batch_size or MAX_GRAPH_BATCH_SIZE
        self.max_graph_batch_size = min(config.max_num_seqs, limit)
        self.buffers = InputBuffers(
            max_tokens=max(config.max_num_batched_tokens, self.max_graph_batch_size),
            max_seqs=max(config.max_num_seqs, self.max_graph_batch_size),
            max_width=self.max_blocks_per_seq, device=self.device,
        )
        self.host_tables = HostBlockTables(max_rows=config.max_num_seqs, max_blocks=self.max_blocks_per_seq)
        self.sampler = Sampler(self.device, config.seed)
        self.sampler.draw_first = config.structured_outputs_draw_first
        self.graphs: DecodeGraphs | None = None
        if self.use_cuda_graphs:
            step(f"warming up and capturing CUDA graphs for decode batches up to {self.max_graph_batch_size}")
            self.enable_decode_graphs(capture=True)

    def _select_fp8_matmul(self) -> None:
        """FP8 matmuls (``torch._scaled_mm`` with row-wise scales) where they run: a GPU of compute capability 9.0+
        and bfloat16 activations; elsewhere each FP8 weight is dequantized per matmul — said once in the log."""
        why_not = None
        if self.device.type != "cuda":
            why_not = f"device {self.device} has no FP8 matmul"
        elif torch.cuda.get_device_capability(self.device) < (9, 0):
            why_not = f"{torch.cuda.get_device_name(self.device)} is below compute capability 9.0 (Hopper)"
        elif self.dtype != torch.bfloat16:
            why_not = f"dtype={self.dtype} (row-wise FP8 matmuls write bfloat16; use dtype='bfloat16')"
        layers = [m for m in self.model.modules() if isinstance(m, Fp8Linear)]
        if layers and all(m.weight_only for m in layers):  # W8A16: activations stay 16-bit (found in review: they
            why_not = "the checkpoint's activations are 16-bit (W8A16)"  # were quantized to FP8 on Hopper)
        if why_not is None:
            unfit = [m for m in layers if m.in_features % 16 or m.out_features % 16]
            for m in layers:
                if m not in unfit:
                    m.use_scaled_mm()
            log.info("FP8 matmuls (torch._scaled_mm) in %d of %d FP8 layers%s", len(layers) - len(unfit), len(layers),
                     " (the rest have a dimension not a multiple of 16: dequantized)" if unfit else "")
        else:
            log.info("FP8 weights are dequantized to %s per matmul: %s", f"{self.dtype}".removeprefix("torch."),
                     why_not)

    # ---- sizing ------------------------------------------------------------------------------------
    def _allocate_kv_cache(self) -> KVCache:
        a, cfg = self.args, self.config
        self.kv_bytes_per_token = kv_bytes_per_token(
            num_layers=a.num_layers, num_kv_heads=a.num_kv_heads, head_dim=a.head_dim,
            kv_cache_dtype=cfg.kv_cache_dtype, dtype_bytes=self.dtype.itemsize,
        )
        # on CUDA: what the weights and RoPE tables, just loaded, left free — less what dequantizing the largest
        # quantized weight for its matmul takes at once (it happens in every forward; 0 without quantization)
        free = None
        if self.device.type == "cuda":
            workspace = dequant_workspace_bytes(self.model) if self.quantization is not None else 0
            free = max(0, int(torch.cuda.mem_get_info(self.device)[0]) - workspace)
            if workspace:
                log.info("KV cache: %s kept free for dequantizing quantized weights per matmul", fmt_bytes(workspace))
        budget = kv_budget_bytes(kv_cache_memory_bytes=cfg.kv_cache_memory_bytes, device_free_bytes=free,
                                 gpu_memory_utilization=cfg.gpu_memory_utilization)
        per_token, bs = self.kv_bytes_per_token, self.block_size
        num_blocks = kv_cache_num_blocks(budget_bytes=budget, bytes_per_token=per_token, block_size=bs)
        if self.tp is not None:  # every rank's cache holds the same blocks (free GPU memory may differ per rank)
            num_blocks = self.tp.min_int(num_blocks)
        if num_blocks * bs < self.max_model_len:
            raise ValueError(
                f"kv_cache_memory_bytes={budget} holds {num_blocks * bs} tokens "
                f"({per_token} bytes each, one block kept for padding), fewer than max_model_len={self.max_model_len}; "
                "raise the KV budget or lower max_model_len"
            )
        cache = kv_cache_class(cfg.kv_cache_dtype)(
            num_layers=a.num_layers, num_blocks=num_blocks + SCRATCH_BLOCKS, block_size=bs,
            num_kv_heads=a.num_kv_heads, head_dim=a.head_dim, dtype=self.dtype, device=self.device,
        )
        log.info(
            "KV cache: %d blocks × %d tokens = %d tokens (%s, %d bytes/token, kv_cache_dtype=%s)",
            num_blocks, bs, num_blocks * bs, fmt_bytes(num_blocks * bs * per_token), per_token, cfg.kv_cache_dtype,
        )
        return cache

    @property
    def num_blocks(self) -> int:
        """Blocks the block manager may hand out (the scratch block is not one of them)."""
        return self.kv_cache.num_blocks - 1

    # ---- decode graphs -----------------------------------------------------------------------------
    def enable_decode_graphs(self, *, capture: bool) -> DecodeGraphs:
        """Route decode-only steps through batch-size buckets; ``capture=False`` runs that padded path
        eagerly (what the CPU tests use to check it)."""
        if capture and not self.backend.supports_cuda_graphs:
            raise ValueError(f"attention_backend={self.attention_backend!r} cannot be captured in a CUDA graph")
        self.graphs = DecodeGraphs(self._graph_forward, self._graph_prepare, max_batch_size=self.max_graph_batch_size,
                                   capture=capture)
        with torch.inference_mode():
            self.graphs.capture_all()
        return self.graphs

    def _graph_prepare(self, size: int) -> Any:
        """Buffers holding ``size`` padding rows (what a graph is captured on) → the backend's metadata."""
        step = self.prepare(ScheduledBatch(), pad_to=size)
        return step.meta

    def _graph_forward(self, size: int, meta: Any) -> torch.Tensor:
        views = self.buffers.device_views(self._graph_layout(size))
        hidden = self.model(views["input_ids"], views["positions"], AttentionContext(self.backend, meta))
        return self.model.compute_logits(hidden)

    def _graph_layout(self, size: int) -> Layout:
        return Layout(size, size, self.max_blocks_per_seq)

    # ---- one step ----------------------------------------------------------------------------------
    def prepare(self, batch: ScheduledBatch, *, pad_to: int | None = None) -> Step:
        """Write the step's inputs into the host buffer, copy them to the device, plan attention.

        Layout ``[single-token rows | prompt chunks]``. A decode-only step that fits a graph bucket (or
        ``pad_to``) is padded to that many rows at the bucket's fixed layout.
        """
        seqs, counts = batch.seqs, batch.num_tokens
        if sum(counts) == len(counts):  # every row computes one token (each count is >= 1): a decode step
            single, multi = list(range(len(counts))), []
        else:
            single = [i for i, n in enumerate(counts) if n == 1]
            multi = [i for i, n in enumerate(counts) if n != 1]
        if self.backend.sorts_decodes:
            single.sort(key=lambda i: seqs[i].num_computed_tokens)
        graph_size = pad_to
        if graph_size is None and self.graphs is not None and not multi:
            graph_size = self.graphs.bucket(len(seqs))
        if graph_size is not None:
            layout = self._graph_layout(graph_size)
        else:
            layout = Layout(sum(counts), len(seqs), max(len(s.block_table) for s in seqs))
        self.buffers.wait_for_copy()
        h = self.buffers.host_views(layout)
        logits_rows, sample_rows, prompt = self._write_single_rows(h, layout, seqs, single)
        prompt = self._write_chunks(h, layout, batch, multi, len(single), logits_rows, sample_rows, prompt)
        num_seqs = layout.num_seqs
        if num_seqs > len(single) + len(multi):
            self._write_padding(h, len(single), num_seqs)
        num_logits = len(logits_rows)
        h["logits_indices"][:num_logits] = logits_rows
        header = StepHeader(
            num_tokens=layout.num_tokens, num_seqs=num_seqs, width=layout.width,
            num_decodes=num_seqs if graph_size else len(single),
            max_query_len=max((counts[i] for i in multi), default=0), graph_size=graph_size,
        )
        step = self._step_from_buffers(layout, header, h, sample_rows, prompt)
        # the workers start the step only once nothing but the forward is left to fail here (a graph's own padding
        # rows, pad_to, are every rank's to prepare)
        if isinstance(self.tp, TensorParallelLeader) and pad_to is None:
            self.tp.send_step(header, self.buffers.host[: layout.size])
        step.rows_are_prefix = bool(logits_rows) and logits_rows[-1] == num_logits - 1
        step.logits_indices = step.logits_indices[:num_logits]
        return step

    def _step_from_buffers(self, layout: Layout, header: StepHeader, h: dict[str, np.ndarray], sample_rows: list[int],
                           prompt: PromptRows | None) -> Step:
        """The step whose inputs the host buffer holds: copied to the device, attention planned."""
        self.buffers.upload(layout)
        d = self.buffers.device_views(layout)
        tensors = StepTensors(
            num_tokens=layout.num_tokens, num_seqs=header.num_seqs, num_decodes=header.num_decodes,
            max_query_len=header.max_query_len,
            seq_lens_np=h["seq_lens"], query_start_np=h["query_start"], block_tables_np=h["block_tables"],
            positions=d["positions"], slot_mapping=d["slot_mapping"], seq_lens=d["seq_lens"], query_start=d["query_start"],
            block_tables=d["block_tables"],
        )
        return Step(
            layout=layout, tensors=tensors, input_ids=d["input_ids"], positions=d["positions"],
            logits_indices=d["logits_indices"], sample_batch_rows=sample_rows, rows_are_prefix=False,
            graph_size=header.graph_size, meta=self.backend.prepare(tensors), prompt=prompt,
        )

    def run_received(self, header: StepHeader) -> None:
        """A worker rank (tensor parallelism): receive rank 0's packed inputs of the step ``header`` describes and
        run its forward (the same collectives as rank 0's; no logits, no sampling)."""
        layout = Layout(header.num_tokens, header.num_seqs, header.width)
        self.buffers.wait_for_copy()
        assert self.tp is not None
        self.tp.broadcast_inputs(self.buffers.host[: layout.size])
        self.forward(self._step_from_buffers(layout, header, self.buffers.host_views(layout), [], None))

    def _write_single_rows(self, h: dict[str, np.ndarray], layout: Layout, seqs: list[Sequence], single: list[int]
                           ) -> tuple[list[int], list[int], PromptRows | None]:
        """Single-token rows: token at position num_computed_tokens, one slot each; block tables from the persistent
        host rows (only new block ids are copied), gathered in one indexing. Returns (logits rows, their batch
        rows, the prompt logprobs to compute)."""
        bs = self.block_size
        ids, positions, slots, tables = h["input_ids"], h["positions"], h["slot_mapping"], h["block_tables"]
        logits_rows: list[int] = []
        sample_rows: list[int] = []
        prompt: PromptRows | None = None
        nd = len(single)
        if nd:
            d_seqs = seqs if nd == len(seqs) and not self.backend.sorts_decodes else [seqs[i] for i in single]
            d_pos = [s.num_computed_tokens for s in d_seqs]
            ids[:nd] = [s.token_ids[p] for s, p in zip(d_seqs, d_pos, strict=True)]
            positions[:nd] = d_pos
            rows = self.host_tables.rows(d_seqs)  # first: taking a row may grow (replace) the pool
            tables[:nd] = self.host_tables.pool[rows, : layout.width]
            dpos = positions[:nd]
            h["seq_lens"][:nd] = dpos + 1
            slots[:nd] = tables[np.arange(nd), dpos // bs] * bs + dpos % bs
            if all(p + 1 == len(s.token_ids) for s, p in zip(d_seqs, d_pos, strict=True)):  # decodes: all sample
                logits_rows, sample_rows = list(range(nd)), list(single)
            else:
                for r, (i, s, p) in enumerate(zip(single, d_seqs, d_pos, strict=True)):
                    if p + 1 == s.num_tokens:  # else a one-token chunk in the middle of a prompt
                        logits_rows.append(r)
                        sample_rows.append(i)
                    elif s.prompt_logprobs is not None and len(s.prompt_logprobs) == p + 1 < s.num_prompt_tokens:
                        prompt = prompt or PromptRows()
                        prompt.add(s, r, p, 1)
        tables[nd:] = 0
        h["query_start"][: nd + 1] = np.arange(nd + 1)
        return logits_rows, sample_rows, prompt

    def _write_chunks(self, h: dict[str, np.ndarray], layout: Layout, batch: ScheduledBatch, multi: list[int],
                      nd: int, logits_rows: list[int], sample_rows: list[int], prompt: PromptRows | None
                      ) -> PromptRows | None:
        """Prompt chunks, after the ``nd`` single-token rows; their sampling rows appended to ``logits_rows`` and
        ``sample_rows``. Returns the prompt logprobs to compute."""
        bs = self.block_size
        ids, positions, slots, tables = h["input_ids"], h["positions"], h["slot_mapping"], h["block_tables"]
        seq_lens, query_start = h["seq_lens"], h["query_start"]
        t = nd
        for r, i in enumerate(multi, start=nd):
            seq, n = batch.seqs[i], batch.num_tokens[i]
            begin, end = seq.num_computed_tokens, seq.num_computed_tokens + n
            row = self.host_tables.row(seq)  # first: taking a row may grow (replace) the pool
            tables[r] = self.host_tables.pool[row, : layout.width]
            ids[t : t + n] = seq.token_ids[begin:end]
            cpos = np.arange(begin, end)
            positions[t : t + n] = cpos
            slots[t : t + n] = tables[r, cpos // bs] * bs + cpos % bs
            seq_lens[r] = end
            if seq.prompt_logprobs is not None:  # positions [first, last) predict prompt tokens not yet scored
                first, last = max(begin, len(seq.prompt_logprobs) - 1), min(end, seq.num_prompt_tokens - 1)
                if last > first:
                    prompt = prompt or PromptRows()
                    prompt.add(seq, t + first - begin, first, last - first)
            t += n
            query_start[r + 1] = t
            if end == seq.num_tokens:
                logits_rows.append(t - 1)
                sample_rows.append(i)
        return prompt

    def _write_padding(self, h: dict[str, np.ndarray], start: int, num_seqs: int) -> None:
        """Rows ``[start, num_seqs)`` of a graph bucket: token 0 at position 0 in the scratch block, attending to
        itself."""
        pad = slice(start, num_seqs)
        h["input_ids"][pad] = 0
        h["positions"][pad] = 0
        h["seq_lens"][pad] = 1
        h["slot_mapping"][pad] = self.scratch_block * self.block_size
        h["block_tables"][pad, 0] = self.scratch_block
        h["query_start"][start + 1 :] = np.arange(start + 1, num_seqs + 1)

    def forward(self, step: Step) -> torch.Tensor | None:
        """Logits of the rows that sample, (N, vocab); None when no row samples (the K/V are written)."""
        num_sampled = len(step.sample_batch_rows)
        if step.graph_size is not None:
            assert self.graphs is not None
            logits = self.graphs.run(step.graph_size, step.meta)
            if step.prompt is not None:
                step.prompt_logprobs = self._prompt_logprobs(logits, step.prompt, computed=True)
            if not num_sampled:
                return None
            return logits[:num_sampled] if step.rows_are_prefix else logits[step.logits_indices]
        hidden = self.model(step.input_ids, step.positions, AttentionContext(self.backend, step.meta))
        if step.prompt is not None:
            step.prompt_logprobs = self._prompt_logprobs(hidden, step.prompt, computed=False)
        if not num_sampled:
            return None
        hidden = hidden[:num_sampled] if step.rows_are_prefix else hidden[step.logits_indices]
        return self.model.compute_logits(hidden)

    def _prompt_logprobs(self, rows: torch.Tensor, prompt: PromptRows, *, computed: bool) -> torch.Tensor:
        """Packed logprobs of the prompt tokens ``prompt`` names (see ``Sampler.pack_logprobs``), from the step's
        hidden states, or its logits when ``computed`` (a graph computes every row's). A few hundred rows at a time,
        so a long prompt's logits are never all held at once."""
        index = torch.tensor(prompt.rows, device=rows.device)
        targets = torch.tensor(prompt.targets, device=rows.device)
        k = max(cast(int, seq.params.prompt_logprobs) for seq, _ in prompt.owners)
        parts = []
        for start in range(0, len(prompt.rows), _PROMPT_LOGPROB_ROWS):
            chunk = rows[index[start : start + _PROMPT_LOGPROB_ROWS]]
            logits = chunk if computed else self.model.compute_logits(chunk)
            parts.append(Sampler.pack_logprobs(logits.float(), targets[start : start + _PROMPT_LOGPROB_ROWS], k))
        return torch.cat(parts)

    @staticmethod
    def _store_prompt_logprobs(step: Step) -> None:
        """Append each owner's prompt logprobs and ranks (read from the device: one more sync, in steps that computed
        some)."""
        if step.prompt is None or step.prompt_logprobs is None:
            return
        values = Sampler.read_ranked(step.prompt_logprobs)
        at = 0
        for seq, count in step.prompt.owners:
            k = cast(int, seq.params.prompt_logprobs)
            logprobs, ranks = seq.prompt_logprobs, seq.prompt_logprob_ranks
            assert logprobs is not None and ranks is not None
            # each entry before its rank: a reader on another thread that copies the ranks first (RequestOutput)
            # finds the entry of every one of them
            for chosen, top, rank in values[at : at + count]:
                logprobs.append((chosen, top[:k]))
                ranks.append(rank)
            at += count

    def _spare_core(self) -> bool:
        """Whether guided masks can fill beside the forward: on an accelerator the host is free while it computes;
        on a CPU only when torch leaves a core unused — on a 2-core VM running torch on both, filling 16 masks
        beside the forward slowed the forward by as much as the fill took."""
        return self.device.type != "cpu" or torch.get_num_threads() < self._usable_cores

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch, *, overlap: Callable[[], None] | None = None) -> list[int | None]:
        """Run ``batch``; the sampled token of each sequence that finished its prompt or decoded, else None.

        ``overlap``: host work to do while the device computes — called once the step's forward and sampling
        are queued, before the sampled ids are read back (on a CPU the forward has already run by then).
        """
        self._select_device()  # the current device is per thread: the serving loop steps on its own thread
        step = self.prepare(batch)
        rows = step.sample_batch_rows
        every_row = len(rows) == len(batch.seqs) and rows == list(range(len(rows)))  # a decode step, in order
        seqs = batch.seqs if every_row else [batch.seqs[i] for i in rows]
        params = [s.params for s in seqs]
        if any(s.guide is not None for s in seqs) and self._spare_core():
            # their masks fill on a helper thread while the forward runs (one begun for a step that failed is waited
            # for by the next fill, the only other user of the matchers)
            self.sampler.start_guides(seqs, params)
        if isinstance(self.tp, TensorParallelLeader):
            try:  # the workers run this step too: a failure here leaves the ranks out of step for good
                logits = self.forward(step)
            except Exception as exc:
                raise self.tp.error(exc) from exc
            except BaseException as exc:  # (Ctrl-C too: the engine is marked stopped, the interrupt goes on)
                self.tp.error(exc, wait_s=0.0)
                raise
        else:
            logits = self.forward(step)
        if logits is None:
            if overlap is not None:
                overlap()
            self._store_prompt_logprobs(step)
            return [None] * len(batch.seqs)
        seq_ids = [s.seq_id for s in seqs]
        # penalties, logit_bias, allowed_token_ids, min_tokens, min_p or logprobs: the sampler reads the sequences;
        # else its fast path
        extras = seqs if any(s.sampling_extras for s in seqs) else None
        # logits the model computed for this step are the sampler's to overwrite; a CUDA graph's are its output buffer
        pending = self.sampler.launch(logits, params, seq_ids, extras, scratch=step.graph_size is None)
        if overlap is not None:
            overlap()
        tokens, logprobs = Sampler.read(pending)  # the step's one host sync (ids, and logprobs when asked for)
        self._store_prompt_logprobs(step)
        if logprobs is not None:  # kept on the sequence, one entry per sampled token
            for seq, (chosen, top, rank) in zip(seqs, logprobs, strict=True):
                if seq.logprobs is not None:
                    seq.logprobs.append((chosen, top[: seq.params.logprobs]))
                    seq.logprob_ranks.append(rank)
        if every_row:
            return cast("list[int | None]", tokens)
        sampled: list[int | None] = [None] * len(batch.seqs)
        for row, token in zip(rows, tokens, strict=True):
            sampled[row] = token
        return sampled

    def _select_device(self) -> None:
        """Make this engine's GPU the thread's current device (``--device cuda:1``): Triton launches, CUDA-graph
        capture and the input copy's stream all use the current device. Free when it already is."""
        if self.device.type == "cuda" and torch.cuda.current_device() != self.device.index:
            torch.cuda.set_device(self.device)

    def shutdown(self) -> None:
        """Stop the tensor-parallel workers, if any (the engine cannot step after this)."""
        if isinstance(self.tp, TensorParallelLeader):
            self.tp.shutdown()

    def release(self, seq: Sequence) -> None:
        """Forget per-request state (a seeded generator, its host block-table row) of a finished sequence."""
        self.sampler.forget(seq.seq_id)
        self.host_tables.release(seq.seq_id)
