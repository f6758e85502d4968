"""Sparse MoE MLP: a router picks ``k`` of ``E`` SiLU-gated experts per token; the output is their weighted sum
(plus, for Qwen2-MoE, a sigmoid-gated shared expert every token uses).

Routing is transformers' (``MixtralTopKRouter`` / ``Qwen3MoeTopKRouter``): softmax over all ``E`` router logits
in float32, top-k, then — Mixtral always, Qwen by ``norm_topk_prob`` — the ``k`` probabilities renormalised to
sum to 1. Expert weights are stacked, ``(E, 2F, H)`` gate‖up and ``(E, H, F)`` down, the layout a grouped GEMM
reads. This is the reference path: one loop over the experts that received tokens, each a gather → two
matmuls → a weighted scatter-add, in expert order as transformers adds them. Its loop length is read from the
device (a host sync), so a model with these layers is not captured in CUDA graphs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from accelkit.serve.models.args import ModelArgs, MoEArgs
from accelkit.serve.models.mlp import MLP


class Experts(nn.Module):
    def __init__(self, moe: MoEArgs, hidden_size: int) -> None:
        super().__init__()
        e, f, h = moe.num_experts, moe.intermediate_size, hidden_size
        self.intermediate_size = f
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * f, h))  # (E, 2F, H): expert e's gate rows, then up
        self.down_proj = nn.Parameter(torch.empty(e, h, f))  # (E, H, F)

    def expert_weights(self, expert: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Expert ``expert``'s (2F, H) gate‖up and (H, F) down weights (a quantized subclass dequantizes them)."""
        return self.gate_up_proj[expert], self.down_proj[expert]

    def forward(self, x: torch.Tensor, top_ids: torch.Tensor, top_weights: torch.Tensor) -> torch.Tensor:
        """``x``: (T, H); ``top_ids, top_weights``: (T, k) → (T, H) = Σ_k weight · expert(x)."""
        out = torch.zeros_like(x)
        if x.shape[0] == 0:
            return out
        for expert in torch.unique(top_ids).tolist():  # host sync: the experts that received tokens, ascending
            token_rows, slot = torch.where(top_ids == expert)  # (n,) tokens routed to it, which of their k slots
            gate_up_proj, down_proj = self.expert_weights(expert, x.dtype)
            gate, up = torch.split(F.linear(x[token_rows], gate_up_proj), self.intermediate_size, dim=-1)
            y = F.linear(F.silu(gate) * up, down_proj)  # (n, H)
            out.index_add_(0, token_rows, (y * top_weights[token_rows, slot, None]).to(out.dtype))
        return out


class SparseMoE(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        assert args.moe is not None
        moe = args.moe
        self.top_k, self.norm_topk_prob = moe.num_experts_per_tok, moe.norm_topk_prob
        # transformers' Mixtral router keeps the top-k weights in float32 (the weighted expert outputs are cast back
        # when added up); the Qwen routers cast them to the model dtype first
        self.is_weight_fp32 = args.architecture == "MixtralForCausalLM"
        self.gate = nn.Linear(args.hidden_size, moe.num_experts, bias=False)  # the router
        self.experts = Experts(moe, args.hidden_size)
        self.shared_expert: nn.Module | None = None
        self.shared_expert_gate: nn.Linear | None = None
        if moe.shared_expert_intermediate_size is not None:
            self.shared_expert = MLP(args, intermediate_size=moe.shared_expert_intermediate_size)
            self.shared_expert_gate = nn.Linear(args.hidden_size, 1, bias=False)
        self.router_logits: list[torch.Tensor] | None = None  # set to a list to record each step's (T, E) logits

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x``: (T, H) → router logits (T, E), top-k weights (T, k), expert ids (T, k)."""
        logits = self.gate(x)
        probs = F.softmax(logits, dim=-1, dtype=torch.float32)
        top_weights, top_ids = probs.topk(self.top_k, dim=-1)
        if self.norm_topk_prob:
            top_weights = top_weights / top_weights.sum(dim=-1, keepdim=True)
        return logits, top_weights if self.is_weight_fp32 else top_weights.to(x.dtype), top_ids

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits, top_weights, top_ids = self.route(x)
        if self.router_logits is not None:
            self.router_logits.append(logits.detach().clone())
        out: torch.Tensor = self.experts(x, top_ids, top_weights)
        if self.shared_expert is not None and self.shared_expert_gate is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out
