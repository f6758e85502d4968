"""Every recipe that can run on this CPU, applied to tiny real models; every refusal where it cannot."""

import copy

import pytest
import torch

from accelkit.core import Recipe, UserError
from accelkit.models import get_preset
from accelkit.models.build import build_model
from accelkit.recipes import RecipeRefused, apply, refusal
from accelkit.recipes.gates import GateConfig, check, output_tensor
from accelkit.recipes.memory import saved_activation_bytes

TOKENS = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def llama():
    return build_model(get_preset("tiny-llama"), seed=0)


def _logits(model, x=TOKENS):
    with torch.no_grad():
        return output_tensor(model(x))


@pytest.mark.parametrize(
    ("recipe", "backend", "note"),
    [
        (Recipe(precision="bf16"), "auto", "autocast bf16"),
        (Recipe(precision="fp16"), "auto", "autocast fp16"),
        (Recipe(quantization="int8-dynamic"), "auto", "torch.ao quantize_dynamic"),
        (Recipe(quantization="int8-dynamic"), "torchao", "Int8DynamicActivationInt8WeightConfig"),
        (Recipe(quantization="int8-weight"), "auto", "Int8WeightOnlyConfig"),
        (Recipe(quantization="int4-weight"), "auto", "IntxWeightOnlyConfig"),
    ],
)
def test_inference_recipes_run_and_pass_a_loose_gate(llama, recipe, backend, note):
    ref = _logits(llama)
    notes: list[str] = []
    model = apply(copy.deepcopy(llama), recipe, quant_backend=backend, notes=notes)
    assert any(note in n for n in notes), notes
    out = _logits(model)
    result = check(ref, out, logits=True, config=GateConfig(max_drop=0.5, criterion="cosine"))
    assert result.passed and result.drift.cosine > 0.95, result
    assert result.drift.max_abs_error > 0  # it really changed the numerics
    if recipe.quantization:  # every linear layer now holds quantized weights
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        dynamic = [m for m in model.modules() if type(m).__module__.startswith("torch.ao.nn.quantized")]
        assert dynamic if note == "torch.ao quantize_dynamic" else linears
        assert all(type(m.weight) is not torch.nn.Parameter for m in linears)


def test_compile_matches_eager(llama):
    model = apply(copy.deepcopy(llama), Recipe(compile="default"))
    torch.testing.assert_close(_logits(model), _logits(llama), rtol=1e-4, atol=1e-4)


def test_cnn_fold_bn_and_channels_last_keep_outputs():
    resnet = build_model(get_preset("tiny-resnet"), seed=0).eval()
    with torch.no_grad():  # give BatchNorm non-trivial statistics
        for m in resnet.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 64, 64)
    notes: list[str] = []
    fast = apply(copy.deepcopy(resnet), Recipe(fold_bn=True, channels_last=True), notes=notes)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in fast.modules())
    assert notes[0].startswith("folded") and "channels_last" in notes[1]
    with torch.no_grad():
        torch.testing.assert_close(fast(x.contiguous(memory_format=torch.channels_last)).logits, resnet(x).logits,
                                   rtol=1e-4, atol=1e-4)


def _backward_flops(model, x):
    from torch.utils.flop_counter import FlopCounterMode

    out = model(x, labels=x, use_cache=False)
    with FlopCounterMode(display=False) as counter:
        out.loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("policy", ["full", "selective"])
def test_checkpointing_same_gradients_and_what_it_recomputes(policy):
    base = build_model(get_preset("tiny-llama"), seed=0).train()
    x = torch.randint(0, 512, (4, 64), generator=torch.Generator().manual_seed(1))
    ref_bytes, ref_out = saved_activation_bytes(lambda: base(x, labels=x, use_cache=False), exclude=base)
    ref_out.loss.backward()
    notes: list[str] = []
    ckpt = apply(copy.deepcopy(base), Recipe(recompute=policy), notes=notes)
    # the cache flag is changed on the user's model and not restored: the note says so and what to do
    assert ckpt.config.use_cache is False and base.config.use_cache is True
    assert any("use_cache set to False on the model itself, and left so" in n and "set it back" in n for n in notes)
    ckpt.zero_grad()
    bytes_, out = saved_activation_bytes(lambda: ckpt(x, labels=x), exclude=ckpt)
    out.loss.backward()
    for p, q in zip(base.parameters(), ckpt.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    plain_flops = _backward_flops(base, x)
    if policy == "full":  # keeps only block inputs, and re-runs every forward matmul in backward
        assert bytes_ < ref_bytes * 0.5, (bytes_, ref_bytes)
        assert _backward_flops(ckpt, x) > plain_flops * 1.15  # the LM head (not checkpointed) is much of it here
    else:  # keeps the matmul outputs (in its own cache, out of the hooks' sight): no matmul is re-run
        assert _backward_flops(ckpt, x) == pytest.approx(plain_flops, rel=0.01)


@pytest.mark.slow
def test_budget_recompute_with_compile_trains():
    model = apply(build_model(get_preset("tiny-llama"), seed=0).train(), Recipe(recompute="budget", compile="default"))
    out = model(TOKENS, labels=TOKENS, use_cache=False)
    out.loss.backward()
    assert torch.isfinite(out.loss)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_budget_recompute_wrapper_reaches_the_model_attributes(llama, precision):
    """compile + recompute='budget' returned a wrapper without attribute pass-through: model.config raised
    AttributeError where the plain compiled model (and every other wrapper) reached the model's."""
    model = apply(copy.deepcopy(llama).train(), Recipe(precision=precision, compile="default", recompute="budget"))
    assert type(model).__name__ == "_BudgetedModule"  # the wrapper under test, not compile's OptimizedModule
    assert model.config.vocab_size == llama.config.vocab_size
    assert model.get_input_embeddings().weight.shape == llama.get_input_embeddings().weight.shape
    with pytest.raises(AttributeError, match="no_such_attribute"):
        _ = model.no_such_attribute


def test_fp8_refused_on_cpu_without_emulate_and_trains_with_it():
    reason = refusal(Recipe(precision="fp8"), "cpu", training=True)
    assert "FP8 tensor cores" in reason and "emulate=True" in reason
    model = build_model(get_preset("tiny-llama"), seed=0).train()
    with pytest.raises(RecipeRefused, match="SM89"):
        apply(model, Recipe(precision="fp8"))
    assert not any("Float8" in type(m).__name__ for m in model.modules())  # the refusal changed nothing
    model = apply(model, Recipe(precision="fp8"), emulate=True)
    assert any("Float8" in type(m).__name__ for m in model.modules())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.randint(0, 512, (8, 32), generator=torch.Generator().manual_seed(2))
    losses = []
    for _ in range(20):
        loss = model(data, labels=data, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.8, losses


def test_checkpointing_never_takes_an_fp8_weight_cast_for_the_blocks():
    """fp8 training puts each Float8Linear's bf16 weight cast in a parametrization (a ModuleList of one module
    under ``parametrizations``); with no repeated blocks, recompute='full' checkpointed that cast ("full
    checkpointing of 1 blocks in 0.parametrizations.weight") instead of refusing as it does without fp8."""
    from accelkit.recipes.checkpointing import CheckpointedBlock

    plain = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32)).train()
    with pytest.raises(RecipeRefused, match="no repeated blocks"):
        apply(plain, Recipe(precision="fp8", recompute="full"), emulate=True)
    notes: list[str] = []
    model = apply(build_model(get_preset("tiny-llama"), seed=0).train(), Recipe(precision="fp8", recompute="full"),
                  emulate=True, notes=notes)
    wrapped = [n for n, m in model.named_modules() if isinstance(m, CheckpointedBlock)]
    assert wrapped and all(n.startswith("inner.model.layers.") and n.count(".") == 3 for n in wrapped), wrapped
    assert "full checkpointing of 2 blocks (2 in model.layers)" in notes, notes


class _Expert(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, 2 * width), torch.nn.Linear(2 * width, width)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class _MoELayer(torch.nn.Module):
    """A mixture-of-experts layer that keeps its experts in a ModuleList (as many hand-written MoE models do)."""

    def __init__(self, width: int, num_experts: int):
        super().__init__()
        self.router = torch.nn.Linear(width, num_experts)
        self.experts = torch.nn.ModuleList(_Expert(width) for _ in range(num_experts))

    def forward(self, x):
        weights = self.router(x).softmax(-1)  # (B, T, E): dense mixture, fine for a test
        return x + sum(weights[..., i:i + 1] * expert(x) for i, expert in enumerate(self.experts))


class _MoEModel(torch.nn.Module):
    def __init__(self, width: int = 16, num_layers: int = 3, num_experts: int = 8):
        super().__init__()
        self.layers = torch.nn.ModuleList(_MoELayer(width, num_experts) for _ in range(num_layers))
        self.heads = torch.nn.ModuleList(torch.nn.Linear(width, 2) for _ in range(2))  # two small task heads

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return sum(head(x) for head in self.heads)


def test_checkpointing_takes_the_layers_not_one_layers_experts_nor_small_heads():
    """The longest same-type ModuleList was taken for the blocks: the 8 experts of layer 0, so one layer's experts
    were checkpointed and the other layers not at all. Now the outermost lists holding a real share of the
    parameters: the 3 layers, not the experts inside them, nor the two small heads."""
    from accelkit.recipes.checkpointing import CheckpointedBlock

    torch.manual_seed(0)
    model, notes = _MoEModel().train(), []
    x = torch.randn(2, 5, 16)
    expected = model(x)
    model = apply(model, Recipe(recompute="full"), notes=notes)
    wrapped = sorted(n for n, m in model.named_modules() if isinstance(m, CheckpointedBlock))
    assert wrapped == ["layers.0", "layers.1", "layers.2"], wrapped
    assert "full checkpointing of 3 blocks (3 in layers)" in notes, notes
    out = model(x)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    assert all(p.grad is not None for p in model.layers.parameters())


def test_checkpointing_covers_both_the_encoder_and_the_decoder():
    """An encoder-decoder model has two lists of blocks; only the encoder's (the first found) was checkpointed."""
    from transformers import T5Config, T5ForConditionalGeneration

    from accelkit.recipes.checkpointing import CheckpointedBlock

    config = T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=2, num_decoder_layers=3, num_heads=4,
                      decoder_start_token_id=0, pad_token_id=0)
    model, notes = T5ForConditionalGeneration(config).train(), []
    model = apply(model, Recipe(recompute="full"), notes=notes)
    wrapped = sorted(n for n, m in model.named_modules() if isinstance(m, CheckpointedBlock))
    assert wrapped == ["decoder.block.0", "decoder.block.1", "decoder.block.2", "encoder.block.0",
                       "encoder.block.1"], wrapped
    assert "full checkpointing of 5 blocks (2 in encoder.block, 3 in decoder.block)" in notes, notes
    ids = torch.randint(1, 64, (2, 6), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()


@pytest.mark.parametrize(
    ("recipe", "kwargs", "needle"),
    [
        (Recipe(precision="tf32"), {}, "Ampere"),
        (Recipe(quantization="fp8-weight"), {}, "SM89"),
        (Recipe(quantization="fp8-dynamic"), {}, "SM89"),
        (Recipe(sparsity="2:4", precision="bf16"), {}, "SM80"),
        (Recipe(compile="reduce-overhead"), {}, "CUDA graphs"),
        (Recipe(warm_allocator=True), {}, "CUDA caching allocator"),
        (Recipe(recompute="budget"), {"training": True}, "compile='default'"),
        (Recipe(quantization="int8-dynamic"), {"training": True}, "post-training"),
        (Recipe(precision="fp8"), {}, "fp8-dynamic"),
        (Recipe(recompute="full"), {}, "inference saves no activations"),
        (Recipe(dp=2), {}, "accelkit.distributed"),
        (Recipe(fold_bn=True), {"training": True}, "for inference"),
        (Recipe(quantization="int8-dynamic", precision="bf16"), {}, "precision='fp32'"),
    ],
)
def test_refusals_say_what_to_change(recipe, kwargs, needle):
    reason = refusal(recipe, "cpu", **kwargs)
    assert reason is not None and needle in reason, reason


def test_sparsity_is_refused_for_training_even_where_the_kernels_exist():
    """2:4 sparsity stores its weights as frozen Parameters; in training nothing refused it, so on an SM80+ GPU
    every sparsified layer silently stopped learning. It is inference-only now, on any device."""
    from accelkit.recipes.apply import _first_refusal, techniques
    from accelkit.recipes.base import ApplyContext, DeviceInfo

    recipe = Recipe(sparsity="2:4", precision="bf16")
    h100 = DeviceInfo(type="cuda", name="NVIDIA H100", capability=(9, 0))
    assert _first_refusal(recipe, ApplyContext(device=h100), techniques()) is None  # inference: the kernels run
    reason = _first_refusal(recipe, ApplyContext(device=h100, training=True), techniques())
    assert reason is not None and "inference-only" in reason and "sparsity" in reason, reason
    assert "inference-only" in str(refusal(recipe, "cpu", training=True))
    # a model whose Linears the sparse kernels cannot take is refused before anything is pruned
    from accelkit.recipes.sparsity import SemiStructuredSparsity

    narrow = torch.nn.Sequential(torch.nn.Linear(64, 20), torch.nn.Linear(20, 64))
    reason = SemiStructuredSparsity().model_refusal(narrow, recipe, ApplyContext(device=h100))
    assert reason is not None and "found no Linear with both dims multiples of 64" in reason, reason


def test_tf32_recipe_in_training_says_its_wrapper_covers_the_forward_only():
    """The tf32 wrapper sets the flags around forward; backward ran with the caller's. A training note says what to
    enter around backward and the optimizer step (the bench's training step does)."""
    from accelkit.recipes.base import ApplyContext, DeviceInfo
    from accelkit.recipes.precision import MixedPrecision

    h100 = DeviceInfo(type="cuda", name="NVIDIA H100", capability=(9, 0))
    for training in (False, True):
        ctx = ApplyContext(device=h100, training=training)
        MixedPrecision().apply(torch.nn.Linear(4, 4), Recipe(precision="tf32"), ctx)
        assert ctx.notes[0].startswith("tf32 matmuls in forward")
        assert ("tf32_enabled(True)" in ctx.notes[0]) is training, ctx.notes


def test_refusal_is_a_user_error_and_leaves_model_untouched(llama):
    model = copy.deepcopy(llama)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(UserError):
        apply(model, Recipe(quantization="int8-weight", compile="reduce-overhead"))
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_structural_refusals():
    with pytest.raises(RecipeRefused, match="no repeated blocks"):
        apply(torch.nn.Linear(4, 4).train(), Recipe(recompute="full"))
    with pytest.raises(RecipeRefused, match="has none"):
        apply(build_model(get_preset("tiny-bert")), Recipe(channels_last=True))


def _global_state():
    import torch._functorch.config as fc
    import torch._inductor.config as ic

    return (
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.get_default_dtype(),
        torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"), fc.activation_memory_budget,
        tuple(sorted((k, repr(v)) for k, v in ic.get_config_copy().items())), torch.backends.quantized.engine,
        torch.get_float32_matmul_precision(),
    )


def test_apply_restores_global_state(llama):
    before = _global_state()
    for recipe in (Recipe(precision="bf16"), Recipe(quantization="int8-dynamic"), Recipe(quantization="int8-weight"),
                   Recipe(quantization="int8-dynamic", compile="default"), Recipe(quantization="int4-weight")):
        _logits(apply(copy.deepcopy(llama), recipe))
    assert _global_state() == before


def test_int4_on_cuda_uses_tinygemm_layout_on_bf16_and_refuses_other_precisions():
    """torchao >= 0.14's default int4 layout ('plain') needs the separate mslk package (ImportError on a GPU image
    without it); the CUDA path packs bf16 weights in tinygemm's layout, so other precisions are refused up front."""
    from accelkit.recipes.base import ApplyContext, DeviceInfo
    from accelkit.recipes.quantize import INT4_GROUP_GPU, Quantization, int4_gpu_config

    config = int4_gpu_config()
    assert config.group_size == INT4_GROUP_GPU and config.int4_packing_format == "tile_packed_to_4d"
    h200 = ApplyContext(device=DeviceInfo(type="cuda", name="NVIDIA H200", capability=(9, 0)))
    quant = Quantization()
    reason = quant.refusal(Recipe(quantization="int4-weight"), h200)
    assert reason is not None and "precision='bf16'" in reason
    assert quant.refusal(Recipe(precision="bf16", quantization="int4-weight"), h200) is None


def test_int4_on_a_cpu_counts_the_layers_it_converted_and_refuses_when_none():
    """int4 on a CPU converts only Linears whose in_features divide by its group of 32; a model of width 20 kept
    every layer in fp32 and the note still said "int4-weight quantization". The note now counts, and a recipe
    that converted nothing is refused."""
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).eval()
    notes: list[str] = []
    model = apply(model, Recipe(quantization="int4-weight"), device="cpu", training=False, notes=notes)
    assert type(model[0].weight) is torch.nn.Parameter and type(model[2].weight) is not torch.nn.Parameter
    assert "of 1 of 2 Linear layers; 1 kept in full precision (in_features not a multiple of 32" in notes[-1]

    narrow = torch.nn.Sequential(torch.nn.Linear(20, 10)).eval()
    with pytest.raises(RecipeRefused, match=r"converted none of the 1 Linear layers: in_features must be a multiple "
                                            r"of 32.*widths here: 20"):
        apply(narrow, Recipe(quantization="int4-weight"), device="cpu", training=False)


def _snapshot(model):
    return [(name, type(m)) for name, m in model.named_modules()], {
        k: (v.dtype, v.clone()) for k, v in model.state_dict().items()}


def _assert_untouched(model, before):
    modules, state = _snapshot(model)
    assert modules == before[0]
    assert state.keys() == before[1].keys()
    for k, (dtype, value) in state.items():
        assert dtype == before[1][k][0] and torch.equal(value, before[1][k][1]), k


class _ConvBnHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.head = torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.Linear(8, 10)

    def forward(self, x):
        return self.head(self.bn(self.conv(x)).mean((2, 3)))


@pytest.mark.parametrize(
    ("make", "recipe", "kwargs", "needle"),
    [  # a refusal that came from a later step, after an earlier one had changed the model in place:
        # fp8 inference cast the model to bf16, then found no Linear whose in_features divide by 16
        (lambda: torch.nn.Sequential(torch.nn.Linear(20, 20), torch.nn.ReLU(), torch.nn.Linear(20, 20)).eval(),
         Recipe(quantization="fp8-weight", precision="bf16"), {"emulate": True}, "converted none of the 2"),
        # Conv-BN folded, then int4 found no Linear whose in_features divide by its group of 32
        (lambda: _ConvBnHead().eval(), Recipe(fold_bn=True, quantization="int4-weight"), {}, "multiple of 32"),
        # Linears swapped for Float8Linear, then checkpointing found no repeated blocks
        (lambda: torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32)).train(),
         Recipe(precision="fp8", recompute="full"), {"emulate": True}, "no repeated blocks"),
        # Conv-BN folded, then int8 through torch.ao found no Linear at all
        (lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)).eval(),
         Recipe(fold_bn=True, quantization="int8-dynamic"), {}, "has none"),
    ],
)
def test_a_refusal_from_a_later_step_leaves_the_model_as_it_was(make, recipe, kwargs, needle):
    """apply promised that a refusal leaves the model untouched, but the model-dependent refusals were raised while
    applying, after earlier steps had cast, folded or swapped in place. They are all checked before any step."""
    model = make()
    before = _snapshot(model)
    with pytest.raises(RecipeRefused, match=needle):
        apply(model, recipe, **kwargs)
    _assert_untouched(model, before)
