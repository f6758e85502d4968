"""Token sampling on the device: greedy, temperature, top-k, top-p, per-request seeds — one batch, one sync."""

from __future__ import annotations

import numpy as np
import torch

from accelkit.serve.sampling import SamplingParams

_PARAM_ROWS = 4  # temperature, top_k, top_p, is_greedy
_FLOAT32_MAX = float(np.finfo(np.float32).max)


class Sampler:
    """Samples one token per row of a logits batch.

    Random rows use the exponential race ``argmax(p / E)``, ``E ~ Exp(1)`` — the same distribution as
    ``multinomial(p)`` without its host sync. Rows whose request has a ``seed`` draw their noise from their
    own generator, so a seeded request gives the same tokens whatever else shares its batches.

    The per-row settings reach the device in one copy from a pinned buffer (a tensor built from a Python
    list would be a synchronous copy each); the only host sync of a step is reading the sampled ids back.
    """

    def __init__(self, device: torch.device, seed: int) -> None:
        self.device = device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self._seeded: dict[int, torch.Generator] = {}  # seq_id → that request's generator
        self._pinned = device.type == "cuda"
        self._host = torch.empty(0)

    def forget(self, seq_id: int) -> None:
        self._seeded.pop(seq_id, None)

    def _generator(self, seq_id: int, seed: int) -> torch.Generator:
        gen = self._seeded.get(seq_id)
        if gen is None:
            gen = self._seeded[seq_id] = torch.Generator(device=self.device)
            gen.manual_seed(seed)
        return gen

    def _upload(self, params: list[SamplingParams], vocab: int) -> torch.Tensor:
        """(4, N) float32 on the device: temperature (1 for greedy rows), top_k, top_p, is_greedy."""
        n = len(params)
        if self._host.numel() < _PARAM_ROWS * n:  # grown rarely; the previous step's sync finished any copy from it
            self._host = torch.empty(_PARAM_ROWS * max(n, 64), dtype=torch.float32, pin_memory=self._pinned)
        # a contiguous (4, n) view of the flat buffer: a strided slice would be staged through an unpinned copy,
        # which makes the non-blocking copy synchronous
        host = self._host[: _PARAM_ROWS * n].view(_PARAM_ROWS, n)
        rows = host.numpy()
        # (a finite temperature past float32's range is uniform sampling either way: clamp it, no overflow warning)
        rows[0] = [min(p.temperature, _FLOAT32_MAX) if p.temperature > 0 else 1.0 for p in params]
        rows[1] = [min(p.top_k or vocab, vocab) for p in params]
        rows[2] = [p.top_p for p in params]
        rows[3] = np.fromiter((p.is_greedy for p in params), dtype=np.float32, count=n)
        return host.to(self.device, non_blocking=True) if self._pinned else host

    def __call__(self, logits: torch.Tensor, params: list[SamplingParams], seq_ids: list[int]) -> list[int]:
        """``logits``: (N, V) → N token ids (one host sync)."""
        tokens: list[int] = self.launch(logits, params, seq_ids).tolist()
        return tokens

    @torch.inference_mode()
    def launch(self, logits: torch.Tensor, params: list[SamplingParams], seq_ids: list[int]) -> torch.Tensor:
        """``logits``: (N, V) → (N,) int64 token ids on the device, without waiting for them (no host sync:
        the caller reads them when it has nothing else to do)."""
        if all(p.is_greedy for p in params):
            return logits.argmax(dim=-1)
        logits = logits.float()
        vocab = logits.shape[-1]
        settings = self._upload(params, vocab)
        temps, ks, top_ps, greedy = settings[0], settings[1].long(), settings[2], settings[3] > 0
        scaled = logits / temps[:, None]
        if any(p.top_k is not None for p in params):
            kmax = max(min(p.top_k or vocab, vocab) for p in params)  # from the host: no sync
            top = scaled.topk(kmax, dim=-1).values  # (N, kmax), descending
            kth = top.gather(1, (ks - 1)[:, None])
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        if any(p.top_p < 1.0 for p in params):
            sorted_logits, order = scaled.sort(dim=-1, descending=True)
            cum = sorted_logits.softmax(-1).cumsum(-1)
            drop = (cum - sorted_logits.softmax(-1)) > top_ps[:, None]  # mass before this token already enough
            scaled = scaled.scatter(1, order, sorted_logits.masked_fill(drop, float("-inf")))
        probs = scaled.softmax(dim=-1)
        noise = torch.empty_like(probs).exponential_(generator=self.generator)
        for i, (p, seq_id) in enumerate(zip(params, seq_ids, strict=True)):
            if p.seed is not None and not p.is_greedy:
                noise[i].exponential_(generator=self._generator(seq_id, p.seed))
        sampled = (probs / noise).argmax(dim=-1)
        return torch.where(greedy, logits.argmax(dim=-1), sampled)
