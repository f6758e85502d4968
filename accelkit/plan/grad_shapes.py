"""The gradient tensors of a model, as a data-parallel communication hook sees them — pure Python.

torch's PowerSGD hook decides per gradient tensor whether to compress it: it views each tensor as a matrix
``tensor.view(shape[0], -1)`` (n rows, m = numel / n columns) and compresses it only when
``(n + m)·r · min_compression_rate < n·m`` (``_should_compress``); a 1-D tensor is an n×1 matrix and never
passes. So the bytes it sends depend on the shapes, not only on the parameter count. The shapes below are
those of the modules ``accelkit.models.build`` builds (Hugging Face classes), one family at a time;
``tests/unit/test_plan_grad_comm.py`` checks them against the real modules of every tiny preset.

A :class:`Grad` is one tensor: ``rows`` × ``cols`` as the hook views it, ``copies`` of it, and which
view dimension tensor parallelism splits (``split``: 0 = rows, 1 = columns, None = replicated). Under
tensor parallelism a rank holds ``rows/tp`` or ``cols/tp`` of a split tensor.
"""

from __future__ import annotations

from typing import NamedTuple

from accelkit.core import ModelSpec


class Grad(NamedTuple):
    rows: int
    cols: int  # 1 for a vector
    copies: int = 1
    split: int | None = None  # tensor parallelism: 0 splits rows, 1 splits columns, None = replicated

    @property
    def numel(self) -> int:
        return self.rows * self.cols * self.copies


class ModelGrads(NamedTuple):
    """One block's tensors and the tensors outside the blocks (before: embeddings; after: norm, head …)."""

    layer: list[Grad]
    before: list[Grad]
    after: list[Grad]

    def all(self, num_layers: int) -> list[Grad]:
        return self.before + [g._replace(copies=g.copies * num_layers) for g in self.layer] + self.after


def _vec(n: int, copies: int = 1, split: int | None = None) -> Grad:
    return Grad(n, 1, copies, split)


def _norm(m: ModelSpec, copies: int = 1) -> list[Grad]:
    return [_vec(m.hidden_size, copies * (1 if m.norm == "rmsnorm" else 2))]


def _linear(out: int, inp: int, *, split: int | None, bias: bool) -> list[Grad]:
    """nn.Linear: weight [out, in]; column-parallel splits ``out`` (view rows), row-parallel ``in`` (columns);
    a column-parallel bias is split with its rows, a row-parallel one is replicated."""
    grads = [Grad(out, inp, 1, split)]
    if bias:
        grads.append(_vec(out, split=0 if split == 0 else None))
    return grads


def _decoder(m: ModelSpec) -> ModelGrads:
    """Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen3-MoE (the Llama module layout of transformers)."""
    h, q, kv, f = m.hidden_size, m.num_heads * m.head_size, m.kv_heads * m.head_size, m.ffn_hidden_size
    # Qwen2: q/k/v biases; Llama's attention_bias: q/k/v and o (out_bias); Llama's mlp_bias: gate/up/down
    qkv_bias, out_bias, mlp_bias = (m.qkv_bias or m.linear_bias, m.out_bias or m.linear_bias,
                                    m.mlp_bias or m.linear_bias)
    layer = (_linear(q, h, split=0, bias=qkv_bias) + _linear(kv, h, split=0, bias=qkv_bias)
             + _linear(kv, h, split=0, bias=qkv_bias) + _linear(h, q, split=1, bias=out_bias))
    if m.qk_norm:  # Qwen3: q_norm and k_norm, [head_dim] each, replicated across tensor-parallel ranks
        layer.append(_vec(m.head_size, 2))
    if m.num_experts is None:
        layer += _linear(f, h, split=0, bias=mlp_bias) * (2 if m.gated_mlp else 1)
        layer += _linear(h, f, split=1, bias=mlp_bias)
    else:
        # router [E, h]; the experts as two 3-D tensors [E, 2f, h] and [E, h, f] (transformers 5 fuses them): the hook
        # views them as E rows, so with E ≤ a few dozen they are never compressed
        e = m.num_experts
        layer += [Grad(e, h), Grad(e, (2 if m.gated_mlp else 1) * f * h), Grad(e, h * f)]
    layer += _norm(m, 2)
    before = [Grad(m.vocab_size, h, 1, 0)]
    after = _norm(m) + ([] if m.tied_embeddings else [Grad(m.vocab_size, h, 1, 0)])
    return ModelGrads(layer, before, after)


def _gpt2(m: ModelSpec) -> ModelGrads:
    """GPT-2: Conv1D weights are [in, out] (column-parallel splits the view's columns), fused QKV, tied head."""
    h, f = m.hidden_size, m.ffn_hidden_size
    layer = [*_norm(m), Grad(h, 3 * h, 1, 1), _vec(3 * h, split=0), Grad(h, h, 1, 0), _vec(h), *_norm(m),
             Grad(h, f, 1, 1), _vec(f, split=0), Grad(f, h, 1, 0), _vec(h)]
    before = [Grad(m.vocab_size, h, 1, 0), Grad(m.max_seq_len, h)]
    return ModelGrads(layer, before, _norm(m))


def _encoder(m: ModelSpec) -> ModelGrads:
    """BERT and ViT: separate q, k, v, o with biases, LayerNorms, a two-matrix MLP, an optional pooler."""
    h, f = m.hidden_size, m.ffn_hidden_size
    layer = (_linear(h, h, split=0, bias=True) * 3 + _linear(h, h, split=1, bias=True)
             + _linear(f, h, split=0, bias=True) + _linear(h, f, split=1, bias=True) + _norm(m, 2))
    pooler = _linear(h, h, split=None, bias=True) if m.pooler else []
    if m.family == "vit":
        p = m.patch_size or 1
        before = [Grad(1, h), Grad(1, (m.num_patches + 1) * h), Grad(h, m.num_channels * p * p), _vec(h)]
        return ModelGrads(layer, before, _norm(m) + pooler)
    before = [Grad(m.vocab_size, h, 1, 0), Grad(m.max_seq_len, h)]
    if m.type_vocab_size:
        before.append(Grad(m.type_vocab_size, h))
    return ModelGrads(layer, before + _norm(m), pooler)


def _resnet(m: ModelSpec) -> ModelGrads:
    """ResNet (transformers' ResNetModel): 7×7 stem, bottleneck blocks with a projection shortcut first in each
    stage, BatchNorm weight and bias after every convolution, the classifier. Conv weights [out, in, k, k] are
    viewed as out × in·k·k."""
    grads = [Grad(m.stem_width, m.num_channels * 49), _vec(m.stem_width, 2)]
    in_ch = m.stem_width
    for depth, out in zip(m.stage_depths, m.stage_widths, strict=True):
        mid = out // 4
        for block in range(depth):
            grads += [Grad(mid, in_ch), _vec(mid, 2), Grad(mid, mid * 9), _vec(mid, 2), Grad(out, mid), _vec(out, 2)]
            if block == 0:
                grads += [Grad(out, in_ch), _vec(out, 2)]
            in_ch = out
    if m.num_labels is not None:
        grads += [Grad(m.num_labels, in_ch), _vec(m.num_labels)]
    return ModelGrads([], grads, [])


def model_grads(m: ModelSpec) -> ModelGrads:
    """The gradient tensors of ``m`` as built by accelkit (see the module docstring)."""
    if m.family == "resnet":
        return _resnet(m)
    if m.family == "gpt2":
        return _gpt2(m)
    if m.family in ("bert", "vit"):
        return _encoder(m)
    return _decoder(m)
