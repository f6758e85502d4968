"""The planner's arithmetic against what torch really does on CPU (issue 3 acceptance):

* FLOPs within 2% of ``torch.utils.flop_counter.FlopCounterMode`` for a tiny Llama and a tiny BERT,
  forward and forward+backward;
* activation bytes within 10% of what autograd saves for backward (``saved_tensors_hooks``, each storage
  counted once, parameters excluded) for a tiny Llama in fp32 and bf16, without and with full recompute, and within
  1% / 3% for a tiny Qwen3 / Qwen3-MoE (their per-head q/k RMSNorms);
* within 1% for two tiny GPT-2s (HF's ``gelu_new`` formula, the fused q/k/v projection), without dropout
  (flash path) in fp32 and bf16, and with dropout on the CPU math path once the CPU's own mask size is added.
"""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from accelkit.models import get_preset
from accelkit.models.build import build_model
from accelkit.models.presets import tiny_gpt
from accelkit.plan import flops as F
from accelkit.plan.memory import head_activation_bytes, layer_activation_bytes

BATCH, SEQ = 2, 96


def _count_flops(model, inputs, backward):
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(inputs)
        if backward:
            (out.logits if hasattr(out, "logits") else out.last_hidden_state).float().pow(2).mean().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-bert"])
@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "fwd+bwd"])
def test_flops_match_flop_counter(name, backward):
    spec = get_preset(name)
    model = build_model(spec).train()
    # FlopCounterMode has no formula for the CPU flash-attention kernel that SDPA picks here, so it would
    # see no attention FLOPs at all; eager attention runs the same QKᵀ and A·V as bmm, which it counts.
    model.set_attn_implementation("eager")
    ids = torch.randint(0, spec.vocab_size, (BATCH, SEQ))
    measured = _count_flops(model, ids, backward)
    predicted = (F.training_flops if backward else F.forward_flops)(spec, batch=BATCH, seq=SEQ)
    assert predicted == pytest.approx(measured, rel=0.02), (name, predicted, measured)


def _saved_bytes(model, ids):
    """Bytes autograd keeps for backward: one count per storage, parameters excluded."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen.setdefault(storage.data_ptr(), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(ids, labels=ids)
    out.loss.backward()  # the graph really was usable
    return sum(seen.values())


#: how close each model's prediction must be. Qwen3's per-head q/k RMSNorms were once not counted (0.78-0.81 of the
#: measured bytes for tiny-qwen3, 0.86-0.89 for tiny-qwen3-moe: found in review); counted, the dense Qwen3 is exact and
#: the MoE leaves out only the int64 routing indices and top-k weights (~84 B a token, as for Mixtral below)
ACTIVATION_REL = {"tiny-llama": 0.10, "tiny-qwen3": 0.01, "tiny-qwen3-moe": 0.03}


@pytest.mark.parametrize("name", list(ACTIVATION_REL))
@pytest.mark.parametrize("dtype,e", [(torch.float32, 4), (torch.bfloat16, 2)], ids=["fp32", "bf16"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_activation_bytes_match_saved_tensors(name, dtype, e, recompute):
    spec = get_preset(name)
    model = build_model(spec, dtype=dtype).train()
    if recompute == "full":  # reentrant checkpointing saves each block's input where the hook sees it
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    ids = torch.randint(0, spec.vocab_size, (BATCH, SEQ))
    measured = _saved_bytes(model, ids)
    tokens = BATCH * SEQ
    per_layer = layer_activation_bytes(spec, tokens=tokens, seq=SEQ, e=e, recompute=recompute, kernels="eager",
                                       attention="flash")
    ends = head_activation_bytes(spec, tokens=tokens, seq=SEQ, e=e, kernels="eager")
    if recompute == "full":  # RoPE tables are not checkpoint inputs (passed as keyword arguments)
        ends["first"] -= 2 * SEQ * spec.head_size * e
    predicted = spec.num_layers * per_layer + ends["first"] + ends["last"]
    assert predicted == pytest.approx(measured, rel=ACTIVATION_REL[name]), (predicted, measured)


@pytest.mark.parametrize("dtype,e", [(torch.float32, 4), (torch.bfloat16, 2)], ids=["fp32", "bf16"])
def test_mixtral_activation_bytes_match_saved_tensors(dtype, e):
    # HF's MixtralExperts loop keeps, per routed copy of a token, the gathered expert input and the expert output it
    # scales by the routing weight: 2·k·h more than a dense SwiGLU layer. The planner once left them out (0.88 of the
    # measured bytes here). What it still leaves out are the int64 routing indices and top-k weights (~84 B a token,
    # 1.6% at h = 64, 0.3% at Mixtral 8x7B's h = 4096).
    spec = get_preset("tiny-mixtral")
    model = build_model(spec, dtype=dtype).train()
    measured = _saved_bytes(model, torch.randint(0, spec.vocab_size, (BATCH, SEQ)))
    tokens = BATCH * SEQ
    per_layer = layer_activation_bytes(spec, tokens=tokens, seq=SEQ, e=e, kernels="eager", attention="flash")
    ends = head_activation_bytes(spec, tokens=tokens, seq=SEQ, e=e, kernels="eager")
    assert spec.num_layers * per_layer + ends["first"] + ends["last"] == pytest.approx(measured, rel=0.03)


def _gpt2_predicted(spec, *, e, dropout):
    tokens = BATCH * SEQ
    kw = dict(tokens=tokens, seq=SEQ, e=e, kernels="eager")
    # dropout > 0: SDPA leaves the CPU flash kernel (it has no dropout) for the math path, s² scores and all
    per_layer = layer_activation_bytes(spec, recompute="none", attention="math" if dropout else "flash",
                                       dropout=dropout, **kw)
    ends = head_activation_bytes(spec, dropout=dropout, **kw)
    return spec.num_layers * per_layer + ends["first"] + ends["last"]


@pytest.mark.parametrize("spec", [tiny_gpt(), tiny_gpt().replace(name="gpt2-h128", hidden_size=128, num_heads=2,
                                                                   ffn_hidden_size=512)], ids=lambda s: s.name)
@pytest.mark.parametrize("dtype,e", [(torch.float32, 4), (torch.bfloat16, 2)], ids=["fp32", "bf16"])
def test_gpt2_activation_bytes_match_saved_tensors_without_dropout(spec, dtype, e):
    # the planner once kept 2 ffn-sized tensors for gelu_new (HF keeps 5 with fc2's input) and 3h for q/k/v where
    # HF's flash path keeps the whole c_attn output plus the cache's k, v copies: 0.36 of the measured bytes
    model = build_model(spec, dtype=dtype).train()
    for module in model.modules():  # GPT2Attention passes its dropout's p to SDPA, so p = 0 keeps the flash path
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    measured = _saved_bytes(model, torch.randint(0, spec.vocab_size, (BATCH, SEQ)))
    # bf16 on a CPU: LayerNorm keeps mean/rstd in bf16 (CUDA: fp32, as the planner counts), +0.2%
    assert _gpt2_predicted(spec, e=e, dropout=False) == pytest.approx(measured, rel=0.01)


@pytest.mark.parametrize("spec", [tiny_gpt()], ids=lambda s: s.name)
def test_gpt2_activation_bytes_match_saved_tensors_with_dropout_on_cpu(spec):
    # fp32 only: in bf16 the CPU math path upcasts q, k, v and the s² terms to fp32, which no GPU kernel does
    e = 4
    model = build_model(spec).train()  # HF defaults: embedding, attention and residual dropout 0.1
    measured = _saved_bytes(model, torch.randint(0, spec.vocab_size, (BATCH, SEQ)))
    predicted = _gpt2_predicted(spec, e=e, dropout=True)
    # the planner counts CUDA's 1-byte native_dropout masks; a CPU's torch.dropout keeps them in the activation
    # dtype: per layer the attention-probability mask (a·s) and two residual masks (2h), plus the embedding's (h)
    cpu_masks = (e - 1) * BATCH * SEQ * (spec.num_layers * (spec.num_heads * SEQ + 2 * spec.hidden_size)
                                         + spec.hidden_size)
    assert predicted + cpu_masks == pytest.approx(measured, rel=0.01)


def test_cnn_trace_per_layer_table_adds_up():
    from accelkit.plan.cnn import trace_cnn

    spec = get_preset("tiny-resnet")
    traced = trace_cnn(spec)
    model = build_model(spec)
    x = torch.randn(1, 3, spec.image_size, spec.image_size)
    counter = FlopCounterMode(display=False)
    with counter:
        model(x)
    assert traced["forward_flops"] == counter.get_total_flops()
    assert sum(r["forward_flops"] for r in traced["layers"]) == traced["forward_flops"]
    assert traced["saved_bytes"] > 0 and all(r["output_bytes"] > 0 for r in traced["layers"])
