"""How much of a model a weight conversion reached, said in the note of the technique that converted.

fp8 training, quantization and 2:4 sparsity convert ``nn.Linear`` layers only, but a model's matmuls also read
weights that are no Linear's: transformers 5 stores a Mixtral layer's experts as two 3-D parameters
(``MixtralExperts.gate_up_proj``, ``down_proj``: one grouped GEMM) and its router as a bare 2-D parameter,
GPT-2 its projections as ``Conv1D``, a CNN its convolutions. Counting converted Linears ("9 of 9 Linear layers")
then reads as if the whole model were int8 while 85 % of tiny-mixtral's matmul weights — its experts — stayed in
full precision; an fp8-vs-bf16 comparison on it measures mostly bf16 against bf16. :func:`coverage` puts the
converted share of the matmul weights, and what holds the rest, into the note.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: below this share of the matmul weights converted, the note says the variant is mostly not what it is named
MOSTLY = 0.5
_CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


@dataclass(frozen=True, slots=True)
class MatmulWeight:
    """One parameter a matmul or convolution reads."""

    module_fqn: str  # the module holding it, e.g. "model.layers.0.mlp.experts"
    owner: str  # that module's class, e.g. "MixtralExperts"
    name: str  # the parameter's name in it, e.g. "gate_up_proj"
    ndim: int
    numel: int
    is_linear: bool


def matmul_weights(model: torch.nn.Module) -> list[MatmulWeight]:
    """Every parameter ``model``'s matmuls and convolutions read, each once (survey it before converting).

    Counted: ``nn.Linear`` and convolution weights, and any other parameter of 2+ dims, all of size > 1, which
    its module hands to a matmul itself (grouped MoE experts, a router, GPT-2's ``Conv1D``). Not counted: 1-D
    parameters (biases, norms), an ``nn.Embedding``'s table (a lookup — a tied output head counts it as the
    head's weight), and parameters with a dimension of size 1 outside Linears and convolutions (ViT's cls
    token and position table are added to activations, not multiplied)."""
    tables = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    seen: set[int] = set()
    found: list[MatmulWeight] = []
    for fqn, module in model.named_modules():
        if isinstance(module, torch.nn.Embedding):
            continue
        dense = isinstance(module, (torch.nn.Linear, *_CONVS))
        for name, param in module.named_parameters(recurse=False):
            if id(param) in seen or param.dim() < 2:
                continue
            if not dense and (id(param) in tables or 1 in param.shape):
                continue
            seen.add(id(param))
            found.append(MatmulWeight(module_fqn=fqn, owner=type(module).__name__, name=name, ndim=param.dim(),
                                      numel=param.numel(), is_linear=isinstance(module, torch.nn.Linear)))
    return found


def weight_read_by_parent(model: torch.nn.Module) -> set[str]:
    """Names of the Linears whose parent reads their weight itself instead of calling them: ``nn.MultiheadAttention``
    passes ``out_proj.weight`` to its attention kernel (``out_proj`` is torch's ``NonDynamicallyQuantizableLinear``
    for that reason). Converting one changes nothing that runs — a Float8Linear never called — or breaks the parent:
    every torchao quantization of an ``nn.TransformerEncoder`` died in ``aten.t`` on the quantized weight."""
    return {f"{fqn}.out_proj".lstrip(".") for fqn, m in model.named_modules()
            if isinstance(m, torch.nn.MultiheadAttention) and isinstance(getattr(m, "out_proj", None), torch.nn.Linear)}


#: how a note names what :func:`weight_read_by_parent` finds
READ_BY_PARENT = "nn.MultiheadAttention's out_proj, whose weight it reads itself"


def _pct(share: float) -> str:
    # whole percent, except where rounding would say 0 % or 100 % of something that is not
    return f"{share:.1%}" if 0 < share < 0.01 or 0.99 < share < 1 else f"{share:.0%}"


def coverage(weights: list[MatmulWeight], converted: set[str], *, what: str, rest: str) -> str:
    """The note's clause on how much was converted: the share of the matmul weight parameters in the modules
    named by ``converted`` (fully qualified names), and what holds the rest — e.g. "covers 10% of the matmul
    weights (24,576 of 238,080 parameters); 90% stay fp32: 83% in 2 MixtralExperts (gate_up_proj/down_proj,
    3-D: not nn.Linear), … — this variant is mostly not int8". ``what`` names the conversion ("fp8"), ``rest`` how the others
    run ("fp32", "in high precision")."""
    total = sum(w.numel for w in weights)
    done = sum(w.numel for w in weights if w.module_fqn in converted)
    if not total:
        return f"no matmul weights found to convert to {what}"
    if done == total:
        return f"covers all the matmul weights ({total:,} parameters)"
    groups: dict[str, tuple[set[str], int]] = {}  # label → (modules, parameters)
    names: dict[str, list[str]] = {}
    for w in weights:
        if w.module_fqn in converted:
            continue
        key = "Linear" if w.is_linear else f"{w.owner} {w.ndim}-D"
        modules, numel = groups.get(key, (set(), 0))
        groups[key] = (modules | {w.module_fqn}, numel + w.numel)
        names.setdefault(key, [])
        if w.name not in names[key]:
            names[key].append(w.name)
    parts = []
    for key, (modules, numel) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        n = len(modules)
        if key == "Linear":
            parts.append(f"{_pct(numel / total)} in the {n} Linear layer{'s' * (n != 1)} kept")
        else:
            owner, ndim = key.rsplit(" ", 1)
            parts.append(f"{_pct(numel / total)} in {n} {owner} ({'/'.join(names[key])}, {ndim}: not nn.Linear)")
    share = done / total
    return (f"covers {_pct(share)} of the matmul weights ({done:,} of {total:,} parameters); {_pct(1 - share)} stay "
            f"{rest}: {', '.join(parts)}" + (f" — this variant is mostly not {what}" if share < MOSTLY else ""))
