"""The arithmetic the closed-form counts are built from: parameters and model FLOPs of one layer, counted as
``torch.utils.flop_counter.FlopCounterMode`` counts them — 2 per multiply-add of a matmul or convolution and of the
two attention products (QKᵀ, PV); biases, norms, activations and softmax are not model FLOPs. So a count here equals
the bench's FlopCounterMode count of the same module at the same shapes (the tests check every preset).

FLOPs are kept by kind — Linear layers, convolutions, the attention core — because they run on different kernels at
different efficiencies, and FP8 recipes convert the Linear layers only (``linear_params`` are their weights)."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class Count:
    """Parameters of a module and the model FLOPs of one call of it on one image (or one prompt)."""

    params: int = 0
    linear_params: int = 0  # weights of nn.Linear layers (what torchao's fp8 conversion reaches), no biases
    linear_flops: int = 0
    conv_flops: int = 0
    attention_flops: int = 0

    @property
    def flops(self) -> int:
        return self.linear_flops + self.conv_flops + self.attention_flops

    def __add__(self, other: Count) -> Count:
        return Count(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __mul__(self, times: int) -> Count:
        """``times`` identical modules (blocks), each called once."""
        return Count(*(getattr(self, f.name) * times for f in fields(self)))

    def calls(self, times: int) -> Count:
        """The same module called ``times`` times: FLOPs scale, parameters do not."""
        return Count(self.params, self.linear_params, self.linear_flops * times, self.conv_flops * times,
                     self.attention_flops * times)


def total(counts: list[Count]) -> Count:
    return sum(counts, Count())


def linear(tokens: int, d_in: int, d_out: int, *, bias: bool = True) -> Count:
    """nn.Linear(d_in, d_out) over ``tokens`` rows: 2·tokens·d_in·d_out."""
    return Count(params=d_in * d_out + (d_out if bias else 0), linear_params=d_in * d_out,
                 linear_flops=2 * tokens * d_in * d_out)


def conv(pixels_out: int, c_in: int, c_out: int, kernel: int, *, bias: bool = True) -> Count:
    """nn.Conv2d with a square ``kernel`` writing ``pixels_out`` output positions: 2·pixels·c_out·c_in·k²."""
    return Count(params=c_in * c_out * kernel * kernel + (c_out if bias else 0),
                 conv_flops=2 * pixels_out * c_out * c_in * kernel**2)


def attention(queries: int, keys: int, dim: int) -> Count:
    """The attention core, QKᵀ and PV, over all heads (``dim`` = heads × head dim): 4·queries·keys·dim — a causal
    mask does not lower it (FlopCounterMode counts the full product, as the kernels compute it)."""
    return Count(attention_flops=4 * queries * keys * dim)


def norm(dim: int, *, affine: bool = True, bias: bool = True) -> Count:
    """LayerNorm / GroupNorm / RMSNorm parameters (no model FLOPs)."""
    return Count(params=(dim if affine else 0) + (dim if affine and bias else 0))
