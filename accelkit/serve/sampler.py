"""Token sampling on the device: greedy, temperature, top-k, top-p, per-request seeds — one batch."""

from __future__ import annotations

import torch

from accelkit.serve.sampling import SamplingParams


class Sampler:
    """Samples one token per row of a logits batch.

    Random rows use the exponential race ``argmax(p / E)``, ``E ~ Exp(1)`` — the same distribution as
    ``multinomial(p)`` without its host sync. Rows whose request has a ``seed`` draw their noise from their
    own generator, so a seeded request gives the same tokens whatever else shares its batches.
    """

    def __init__(self, device: torch.device, seed: int) -> None:
        self.device = device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self._seeded: dict[int, torch.Generator] = {}  # seq_id → that request's generator

    def forget(self, seq_id: int) -> None:
        self._seeded.pop(seq_id, None)

    def _generator(self, seq_id: int, seed: int) -> torch.Generator:
        gen = self._seeded.get(seq_id)
        if gen is None:
            gen = self._seeded[seq_id] = torch.Generator(device=self.device)
            gen.manual_seed(seed)
        return gen

    @torch.inference_mode()
    def __call__(self, logits: torch.Tensor, params: list[SamplingParams], seq_ids: list[int]) -> list[int]:
        """``logits``: (N, V) → N token ids (one host sync)."""
        if all(p.is_greedy for p in params):
            return logits.argmax(dim=-1).tolist()
        logits = logits.float()
        dev = logits.device
        temps = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params], device=dev)
        scaled = logits / temps[:, None]
        if any(p.top_k is not None for p in params):
            vocab = logits.shape[-1]
            ks = torch.tensor([min(p.top_k or vocab, vocab) for p in params], device=dev)
            top = scaled.topk(int(ks.max()), dim=-1).values  # (N, kmax), descending
            kth = top.gather(1, (ks - 1)[:, None])
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        if any(p.top_p < 1.0 for p in params):
            top_ps = torch.tensor([p.top_p for p in params], device=dev)
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
        greedy = torch.tensor([p.is_greedy for p in params], device=dev)
        return torch.where(greedy, logits.argmax(dim=-1), sampled).tolist()
