"""Runs one scheduled step on the device: lay out the tokens, forward the model, sample.

Also owns the weights and the KV cache, whose number of blocks comes from a memory budget taken after
the weights are loaded (bytes on CPU; a fraction of the free device memory on CUDA).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from accelkit.core.units import GiB, fmt_bytes
from accelkit.serve.attention import AttentionMetadata, DecodeGroup, PrefillChunk
from accelkit.serve.config import EngineConfig
from accelkit.serve.kv_cache import KVCache, kv_cache_class
from accelkit.serve.models.llama import LlamaArgs, load_model, rope_cache
from accelkit.serve.sampler import Sampler
from accelkit.serve.scheduler import ScheduledBatch
from accelkit.serve.sequence import Sequence

log = logging.getLogger("accelkit.serve")

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_CPU_DEFAULT_KV_BYTES = 1 * GiB
_MAX_PADDING = 1.25  # a decode group is cut when padding would exceed 25% of its real context


def _padded(table: list[int], length: int) -> list[int]:
    """The first ``length`` block ids, padded with block 0 (masked out, never attended)."""
    return table[:length] + [0] * (length - len(table))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name!r} but torch sees no CUDA device; use device='cpu'")
    return device


def resolve_dtype(name: str, args: LlamaArgs) -> torch.dtype:
    if name == "auto":
        return _DTYPES.get(args.torch_dtype or "float32", torch.float32)
    return _DTYPES[name]


@dataclass(slots=True)
class StepInputs:
    input_ids: torch.Tensor  # (T,)
    positions: torch.Tensor  # (T,)
    meta: AttentionMetadata
    logits_indices: torch.Tensor  # (N,) rows of the step whose logits are sampled
    sample_batch_rows: list[int]  # for each of those rows, its index in the ScheduledBatch


class ModelRunner:
    def __init__(self, config: EngineConfig, args: LlamaArgs, *, max_model_len: int) -> None:
        self.config = config
        self.args = args
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, args)
        self.block_size = config.block_size
        self.max_model_len = max_model_len
        self.model = load_model(config.model, args, dtype=self.dtype, device=self.device)
        cos, sin = rope_cache(args, max_model_len)
        self.cos, self.sin = cos.to(self.device, self.dtype), sin.to(self.device, self.dtype)
        self.kv_cache = self._allocate_kv_cache()
        self.sampler = Sampler(self.device, config.seed)

    # ---- sizing ------------------------------------------------------------------------------------
    def kv_bytes_per_token(self) -> int:
        a = self.args
        return kv_cache_class(self.config.kv_cache_dtype).bytes_per_token(
            num_layers=a.num_layers, num_kv_heads=a.num_kv_heads, head_dim=a.head_dim, dtype=self.dtype
        )

    def kv_budget_bytes(self) -> int:
        if self.config.kv_cache_memory_bytes is not None:
            return self.config.kv_cache_memory_bytes
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            return int(free * self.config.gpu_memory_utilization)
        return _CPU_DEFAULT_KV_BYTES

    def _allocate_kv_cache(self) -> KVCache:
        per_token = self.kv_bytes_per_token()
        budget = self.kv_budget_bytes()
        num_blocks = budget // (per_token * self.block_size)
        if num_blocks * self.block_size < self.max_model_len:
            raise ValueError(
                f"kv_cache_memory_bytes={budget} holds {num_blocks * self.block_size} tokens "
                f"({per_token} bytes each), fewer than max_model_len={self.max_model_len}; "
                "raise the KV budget or lower max_model_len"
            )
        a = self.args
        cache = kv_cache_class(self.config.kv_cache_dtype)(
            num_layers=a.num_layers, num_blocks=num_blocks, block_size=self.block_size,
            num_kv_heads=a.num_kv_heads, head_dim=a.head_dim, dtype=self.dtype, device=self.device,
        )
        log.info(
            "KV cache: %d blocks × %d tokens = %d tokens (%s, %d bytes/token, kv_cache_dtype=%s)",
            num_blocks, self.block_size, num_blocks * self.block_size, fmt_bytes(num_blocks * self.block_size * per_token),
            per_token, self.config.kv_cache_dtype,
        )
        return cache

    @property
    def num_blocks(self) -> int:
        return self.kv_cache.num_blocks

    # ---- one step ----------------------------------------------------------------------------------
    def prepare(self, batch: ScheduledBatch) -> StepInputs:
        """Token layout ``[decodes by context length | prefill chunks]`` and the attention metadata."""
        bs = self.block_size
        window = self.args.sliding_window
        decodes = sorted(
            (i for i, s in enumerate(batch.seqs) if batch.num_tokens[i] == 1 and s.num_computed_tokens > 0),
            key=lambda i: batch.seqs[i].num_computed_tokens,
        )
        decode_set = set(decodes)
        prefills = [i for i in range(len(batch.seqs)) if i not in decode_set]
        input_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        logits_rows: list[int] = []
        sample_rows: list[int] = []
        meta = AttentionMetadata(slot_mapping=torch.empty(0))

        # decodes: one token each, grouped so that each group's padded context stays close to its real one
        groups: list[list[int]] = []
        for i in decodes:
            ctx = batch.seqs[i].num_computed_tokens + 1
            if groups:
                group = groups[-1]
                real = sum(batch.seqs[j].num_computed_tokens + 1 for j in group) + ctx
                if (len(group) + 1) * ctx <= _MAX_PADDING * real or len(group) < 4:
                    group.append(i)
                    continue
            groups.append([i])
        for group in groups:
            start = len(input_ids)
            ctx_lens = []
            for i in group:
                seq = batch.seqs[i]
                pos = seq.num_computed_tokens
                input_ids.append(seq.token_ids[pos])
                positions.append(pos)
                slots.append(seq.block_table[pos // bs] * bs + pos % bs)
                if pos + 1 == seq.num_tokens:  # else a one-token prefill chunk in the middle of a prompt
                    logits_rows.append(len(input_ids) - 1)
                    sample_rows.append(i)
                ctx_lens.append(pos + 1)
            nb = -(-max(ctx_lens) // bs)
            tables = [_padded(batch.seqs[i].block_table, nb) for i in group]
            lens = torch.tensor(ctx_lens)[:, None]
            key_pos = torch.arange(nb * bs)[None, :]
            mask = key_pos < lens
            if window is not None:
                mask &= key_pos > lens - 1 - window
            meta.decode_groups.append(
                DecodeGroup(start, len(input_ids), torch.tensor(tables, device=self.device),
                            mask[:, None, None, :].to(self.device))
            )

        for i in prefills:
            seq, n = batch.seqs[i], batch.num_tokens[i]
            begin, end = seq.num_computed_tokens, seq.num_computed_tokens + n
            start = len(input_ids)
            input_ids.extend(seq.token_ids[begin:end])
            positions.extend(range(begin, end))
            table = seq.block_table
            slots.extend(table[p // bs] * bs + p % bs for p in range(begin, end))
            if end == seq.num_tokens:
                logits_rows.append(len(input_ids) - 1)
                sample_rows.append(i)
            block_ids = mask = None
            if begin > 0 or (window is not None and n > window):
                q_pos = torch.arange(begin, end)[:, None]
                k_pos = torch.arange(end)[None, :]
                mask = k_pos <= q_pos
                if window is not None:
                    mask &= k_pos > q_pos - window
                mask = mask.to(self.device)
            if begin > 0:
                block_ids = torch.tensor(table[: -(-end // bs)], device=self.device)
            meta.prefills.append(PrefillChunk(start, len(input_ids), begin, block_ids, mask))

        meta.slot_mapping = torch.tensor(slots, device=self.device)
        return StepInputs(
            input_ids=torch.tensor(input_ids, device=self.device),
            positions=torch.tensor(positions, device=self.device),
            meta=meta,
            logits_indices=torch.tensor(logits_rows, device=self.device),
            sample_batch_rows=sample_rows,
        )

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> list[int | None]:
        """Run ``batch``; the sampled token of each sequence that finished its prompt or decoded, else None."""
        inputs = self.prepare(batch)
        cos = self.cos[inputs.positions].unsqueeze(1)  # (T, 1, D)
        sin = self.sin[inputs.positions].unsqueeze(1)
        hidden = self.model(inputs.input_ids, cos, sin, self.kv_cache, inputs.meta)
        sampled: list[int | None] = [None] * len(batch.seqs)
        if inputs.sample_batch_rows:
            logits = self.model.compute_logits(hidden[inputs.logits_indices])
            tokens = self.sample(logits, [batch.seqs[i] for i in inputs.sample_batch_rows])
            for row, token in zip(inputs.sample_batch_rows, tokens, strict=True):
                sampled[row] = token
        return sampled

    def sample(self, logits: torch.Tensor, seqs: list[Sequence]) -> list[int]:
        return self.sampler(logits, [s.params for s in seqs], [s.seq_id for s in seqs])

    def release(self, seq: Sequence) -> None:
        """Forget per-request device state (a seeded generator) of a finished sequence."""
        self.sampler.forget(seq.seq_id)
