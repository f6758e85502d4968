"""The SiLU-gated MLP, gate and up fused into one matmul: every dense layer's, and the shared expert of
Qwen2-MoE's sparse layers (``moe.py``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from accelkit.serve.models.args import ModelArgs


class MLP(nn.Module):
    def __init__(self, args: ModelArgs, *, intermediate_size: int | None = None) -> None:
        """``intermediate_size``: a width other than the config's dense one (Qwen2-MoE's shared expert)."""
        super().__init__()
        f = self.intermediate_size = intermediate_size or args.intermediate_size
        self.gate_up_proj = nn.Linear(args.hidden_size, 2 * f, bias=args.mlp_bias)
        self.down_proj = nn.Linear(f, args.hidden_size, bias=args.mlp_bias)
        self.fused = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        if self.fused:
            # only with the fused kernels on: kernels/fused.py imports triton (absent from CPU-only installs)
            from accelkit.serve.kernels.fused import silu_mul

            act = silu_mul(gate_up)
        else:
            gate, up = gate_up.split(self.intermediate_size, dim=-1)
            act = F.silu(gate) * up
        out: torch.Tensor = self.down_proj(act)
        return out
