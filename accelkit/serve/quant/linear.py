"""Linear layers over quantized weights, kept in their checkpoint layout (so the weights occupy what the checkpoint
does) and, where no FP8 matmul runs, dequantized per call to the activations' dtype.

- :class:`Fp8Linear`: ``weight`` (out, in) float8 e4m3 and ``weight_scale`` — one float per fused part
  (per-tensor: ``q``, ``k``, ``v`` each their own) or one per output row (per-channel). On a GPU of compute
  capability 9.0+ (Hopper, Blackwell) with bfloat16 activations, :meth:`Fp8Linear.use_scaled_mm` switches it to
  ``torch._scaled_mm``: the input quantized to e4m3 per token (dynamic) or with the checkpoint's static per-tensor
  ``input_scale``, row-wise scales on both sides, bf16 out. Elsewhere (CPU, older GPUs) the weight is dequantized
  and the input stays 16-bit — vLLM's weight-only FP8 fallback.
- :class:`Int4Linear`: compressed-tensors' ``pack-quantized`` layout — ``weight_packed`` (out, in/8) int32, eight
  4-bit codes per word, lowest nibble first, each stored +8; ``weight_scale`` (out, in/group); asymmetric:
  ``weight_zero_point`` (out/8, in/group) int32, packed along the output dim the same way. GPTQ checkpoints are
  converted to this layout at load (``load.py``). The weight is dequantized per call: ``(q − zp) · scale``.
- :class:`Fp8Experts`: a MoE layer's stacked experts in FP8, each expert dequantized when it receives tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from accelkit.serve.models.args import MoEArgs
from accelkit.serve.models.moe import Experts

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite e4m3fn value
_NIBBLE_SHIFTS = tuple(range(0, 32, 4))  # bit offset of code k in its int32 word


def _empty(shape: tuple[int, ...], dtype: torch.dtype) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)


class Fp8Linear(nn.Module):
    def __init__(self, in_features: int, partition_sizes: tuple[int, ...], *, per_channel: bool, scale_dtype: torch.dtype,
                 has_input_scale: bool, has_bias: bool, dynamic_activations: bool, weight_only: bool = False) -> None:
        """``partition_sizes``: output rows of each fused part (``q, k, v`` or ``gate, up``; one entry unfused)."""
        super().__init__()
        out = sum(partition_sizes)
        self.in_features, self.out_features, self.partition_sizes = in_features, out, partition_sizes
        self.per_channel = per_channel
        self.weight = _empty((out, in_features), FP8_DTYPE)
        self.weight_scale = _empty((out if per_channel else len(partition_sizes),), scale_dtype)
        self.input_scale = _empty((len(partition_sizes),), scale_dtype) if has_input_scale else None
        self.bias = _empty((out,), torch.float32) if has_bias else None
        self.dynamic_activations = dynamic_activations  # the FP8 matmul scales its input per token, not statically
        # W8A16: the checkpoint's activations are 16-bit, so its matmuls never quantize them (no _scaled_mm: that
        # would add FP8 activation error the checkpoint was never calibrated for)
        self.weight_only = weight_only
        self.scaled_mm = False  # torch._scaled_mm (use_scaled_mm); False: dequantize and run a 16-bit matmul
        self.row_scale: torch.Tensor | None = None  # (1, out) float32 for _scaled_mm, made by use_scaled_mm

    def channel_scale(self) -> torch.Tensor:
        """(out,) float32: each output row's weight scale (a per-tensor scale repeated over its part's rows)."""
        scale = self.weight_scale.float()
        if self.per_channel:
            return scale
        sizes = torch.tensor(self.partition_sizes, device=scale.device)
        return torch.repeat_interleave(scale, sizes)

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        """(out, in) in ``dtype``: the weight the checkpoint's codes and scales stand for."""
        return (self.weight.float() * self.channel_scale()[:, None]).to(dtype)

    def use_scaled_mm(self) -> None:
        """Run the matmul in FP8 through ``torch._scaled_mm`` (row-wise scales, which need SM90+ and bf16 output;
        the caller checks the device and dtype)."""
        self.row_scale = self.channel_scale().reshape(1, -1).contiguous()
        self.scaled_mm = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.scaled_mm:
            return self._forward_scaled_mm(x)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(x, self.dequantize(x.dtype), bias)

    def _forward_scaled_mm(self, x: torch.Tensor) -> torch.Tensor:
        assert self.row_scale is not None
        x2 = x.reshape(-1, self.in_features)  # (T, in)
        if self.input_scale is not None and not self.dynamic_activations:
            # static: one scale for the fused input (vLLM takes the parts' largest), expanded per row for row-wise
            x_scale = self.input_scale.float().max().expand(x2.shape[0], 1)
        else:  # dynamic per token: each row's amax maps to e4m3's largest value
            x_scale = (x2.abs().amax(dim=-1, keepdim=True).float() / FP8_MAX).clamp(min=1e-12)
        x_q = (x2.float() / x_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        out = torch._scaled_mm(x_q, self.weight.t(), scale_a=x_scale.contiguous(), scale_b=self.row_scale,
                               bias=bias, out_dtype=x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """(R, C) int32 words → (R, 8·C) signed codes in [−8, 7], code k of a word in bits 4k..4k+3, stored +8."""
    shifts = torch.tensor(_NIBBLE_SHIFTS, dtype=torch.int32, device=packed.device)
    codes = (packed.unsqueeze(-1) >> shifts) & 0xF  # (R, C, 8)
    return codes.reshape(packed.shape[0], -1) - 8


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`unpack_int4`: (R, 8·C) codes in [−8, 7] → (R, C) int32."""
    shifts = torch.tensor(_NIBBLE_SHIFTS, dtype=torch.int64, device=codes.device)
    nibbles = ((codes.to(torch.int64) + 8) & 0xF).reshape(codes.shape[0], -1, 8)
    words = (nibbles << shifts).sum(dim=-1)  # in [0, 2^32): wrap into int32's range
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def dequantize_int4(packed: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None, group_size: int,
                    dtype: torch.dtype) -> torch.Tensor:
    """pack-quantized ``(out, in/8)`` codes, ``(out, groups)`` scales and ``(out/8, groups)`` packed zero points (or
    None: symmetric) → the (out, in) weight in ``dtype``."""
    rows = packed.shape[0]
    codes = unpack_int4(packed).float().reshape(rows, -1, group_size)  # (out, groups, group_size)
    if zero_point is not None:
        zero = unpack_int4(zero_point.t().contiguous()).t()[:rows]  # (out, groups)
        codes = codes - zero.float().unsqueeze(-1)
    weight: torch.Tensor = (codes * scale.float().unsqueeze(-1)).flatten(1)
    return weight.to(dtype)


class Int4Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, *, group_size: int, symmetric: bool, scale_dtype: torch.dtype,
                 has_bias: bool) -> None:
        super().__init__()
        if in_features % group_size:
            raise ValueError(f"in_features={in_features} is not a multiple of the INT4 group_size={group_size}")
        self.in_features, self.out_features, self.group_size = in_features, out_features, group_size
        num_groups = in_features // group_size
        self.weight_packed = _empty((out_features, in_features // 8), torch.int32)
        self.weight_scale = _empty((out_features, num_groups), scale_dtype)
        self.weight_zero_point = None if symmetric else _empty((-(-out_features // 8), num_groups), torch.int32)
        self.bias = _empty((out_features,), torch.float32) if has_bias else None

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        """(out, in) in ``dtype``: ``(code − zero point) · scale`` of each weight's group."""
        return dequantize_int4(self.weight_packed, self.weight_scale, self.weight_zero_point, self.group_size, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(x, self.dequantize(x.dtype), bias)


def expand_scale(scale: torch.Tensor, rows: int) -> torch.Tensor:
    """(P,) per-tensor scales of P equal fused parts, or (rows,) per-channel ones → (rows,) float32."""
    scale = scale.float()
    return scale if scale.numel() == rows else scale.repeat_interleave(rows // scale.numel())


class Fp8Experts(Experts):
    """MoE experts over FP8 weights: the stacked (E, 2F, H) gate‖up and (E, H, F) down in e4m3, with per expert a
    scale per fused part (per-tensor: ``gate_up_proj_scale`` (E, 2), ``down_proj_scale`` (E, 1)) or per output row
    ((E, 2F), (E, H)). Each expert that receives tokens is dequantized for its two matmuls, on every device (the
    reference loop of ``moe.py``; no FP8 grouped GEMM yet)."""

    def __init__(self, moe: MoEArgs, hidden_size: int, *, per_channel: bool, scale_dtype: torch.dtype) -> None:
        super().__init__(moe, hidden_size)
        e, f, h = moe.num_experts, moe.intermediate_size, hidden_size
        self.gate_up_proj = _empty((e, 2 * f, h), FP8_DTYPE)
        self.down_proj = _empty((e, h, f), FP8_DTYPE)
        self.gate_up_proj_scale = _empty((e, 2 * f if per_channel else 2), scale_dtype)
        self.down_proj_scale = _empty((e, h if per_channel else 1), scale_dtype)

    def expert_weights(self, expert: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        gate_up, down = self.gate_up_proj[expert], self.down_proj[expert]
        gate_up_scale = expand_scale(self.gate_up_proj_scale[expert], gate_up.shape[0])
        down_scale = expand_scale(self.down_proj_scale[expert], down.shape[0])
        return ((gate_up.float() * gate_up_scale[:, None]).to(dtype), (down.float() * down_scale[:, None]).to(dtype))


class Int4Experts(Experts):
    """MoE experts over pack-quantized INT4 weights, stacked per expert: ``gate_up_proj_packed`` (E, 2F, H/8),
    ``gate_up_proj_scale`` (E, 2F, H/group), asymmetric ``gate_up_proj_zero_point`` (E, 2F/8, H/group), and the
    same for down; each expert that receives tokens is dequantized for its two matmuls."""

    def __init__(self, moe: MoEArgs, hidden_size: int, *, group_size: int, symmetric: bool,
                 scale_dtype: torch.dtype) -> None:
        super().__init__(moe, hidden_size)
        e, f, h = moe.num_experts, moe.intermediate_size, hidden_size
        if h % group_size or f % group_size:
            raise ValueError(f"hidden_size={h} and moe_intermediate_size={f} must be multiples of the INT4 "
                             f"group_size={group_size}")
        self.group_size = group_size
        del self.gate_up_proj, self.down_proj  # the 16-bit stacks: replaced by the packed ones
        self.gate_up_proj_packed = _empty((e, 2 * f, h // 8), torch.int32)
        self.gate_up_proj_scale = _empty((e, 2 * f, h // group_size), scale_dtype)
        self.down_proj_packed = _empty((e, h, f // 8), torch.int32)
        self.down_proj_scale = _empty((e, h, f // group_size), scale_dtype)
        self.gate_up_proj_zero_point = None if symmetric else _empty((e, 2 * f // 8, h // group_size), torch.int32)
        self.down_proj_zero_point = None if symmetric else _empty((e, h // 8, f // group_size), torch.int32)

    def expert_weights(self, expert: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        def zero(z: torch.Tensor | None) -> torch.Tensor | None:
            return None if z is None else z[expert]

        gate_up = dequantize_int4(self.gate_up_proj_packed[expert], self.gate_up_proj_scale[expert],
                                  zero(self.gate_up_proj_zero_point), self.group_size, dtype)
        down = dequantize_int4(self.down_proj_packed[expert], self.down_proj_scale[expert],
                               zero(self.down_proj_zero_point), self.group_size, dtype)
        return gate_up, down


# bytes live at the peak of dequantizing one weight element for a matmul, read off the code above: FP8 — its float32
# copy, the scaled product, the result in the compute dtype (4 + 4 + 2); INT4 — two int32 steps of the unpacking, the
# float32 codes and their scaled product, the result (4 + 4 + 4 + 2)
FP8_DEQUANT_BYTES = 10
INT4_DEQUANT_BYTES = 14


def dequant_workspace_bytes(model: nn.Module) -> int:
    """The most memory one matmul's dequantization takes at once in ``model``: its largest weight that is
    dequantized per matmul (an FP8 layer off ``_scaled_mm``, an INT4 layer, one MoE expert's two weights) times the
    bytes that are live per element meanwhile. On a GPU this is kept out of the KV cache: sizing the cache from the
    memory free after loading left nothing for it (found in review; not measured on a GPU)."""
    largest = 0
    for m in model.modules():
        if isinstance(m, Fp8Linear) and not m.scaled_mm:
            largest = max(largest, m.weight.numel() * FP8_DEQUANT_BYTES)
        elif isinstance(m, Int4Linear):
            largest = max(largest, m.out_features * m.in_features * INT4_DEQUANT_BYTES)
        elif isinstance(m, Fp8Experts):
            largest = max(largest, (m.gate_up_proj[0].numel() + m.down_proj[0].numel()) * FP8_DEQUANT_BYTES)
        elif isinstance(m, Int4Experts):
            per_expert = (m.gate_up_proj_packed[0].numel() + m.down_proj_packed[0].numel()) * 8
            largest = max(largest, per_expert * INT4_DEQUANT_BYTES)
    return largest
