"""Quantized checkpoints (issue 31, criterion 2): tiny random Qwen3 models quantized and saved by compressed-tensors'
own compressors (FP8 per-tensor static, FP8 per-channel dynamic, INT4 W4A16 symmetric and asymmetric), and the
ModelOpt FP8 and GPTQ INT4 layouts written from the same codes as those libraries' documentation lays them out;
online ``quantization="fp8"``; FP8 MoE experts (a tiny Qwen3-MoE, online and as a per-expert FP8 checkpoint).

The reference is transformers' own compressed-tensors loader with ``dequantize=True``: the 16-bit model the codes
stand for, run in float32. Tolerance: |Δlogit| ≤ 0.02 over logits of magnitude ~1 — transformers dequantizes in
the checkpoint's bfloat16 (8 significant bits), the engine in float32, and that rounding is the whole difference
(measured max 0.0021-0.0027 on this test's models). The engine's weights (loaded in the checkpoint dtype) occupy within 2% of the checkpoint's
tensor bytes. Unsupported schemes are refused naming the field, exit status 2 through the CLI.
"""

import json
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.preflight import checkpoint_tensors
from accelkit.serve.quant.config import parse_quantization_config
from accelkit.serve.quant.linear import Fp8Linear, Int4Linear, pack_int4, unpack_int4
from accelkit.serve.testing import build_tokenizer, hf_model, random_prompts, save_model_dir
from tests.conftest import main_in_process

ct = pytest.importorskip("compressed_tensors")
from compressed_tensors.compressors import ModelCompressor  # noqa: E402
from compressed_tensors.quantization import (  # noqa: E402
    QuantizationConfig,
    QuantizationStrategy,
    apply_quantization_config,
    preset_name_to_scheme,
)
from compressed_tensors.quantization.lifecycle.forward import fake_quantize  # noqa: E402
from compressed_tensors.quantization.utils import calculate_qparams  # noqa: E402

PROMPT = random_prompts(1, min_len=24, max_len=24, seed=5)[0]
ATOL = 0.02
# every Linear's in_features a multiple of 128 (INT4 groups): hidden 128, 4 heads × 32, MLP 256
SHAPE = {"hidden_size": 128, "intermediate_size": 256, "head_dim": 32}


def _base_model():
    model = hf_model("tiny-qwen3", seed=7, **SHAPE).to(torch.bfloat16)  # checkpoints ship 16-bit: bf16 as most do
    return model


def _calibrate(model, scheme_name):
    """What llm-compressor's observers do, with compressed-tensors' own qparams: min/max of each weight per tensor,
    channel or group; static input scales from the activations of one calibration prompt."""
    input_amax = {}
    hooks = [m.register_forward_pre_hook(lambda m, a, n=n: input_amax.__setitem__(n, a[0].abs().amax()))
             for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        model(torch.tensor([PROMPT]))
    for h in hooks:
        h.remove()
    config = QuantizationConfig(config_groups={"group_0": preset_name_to_scheme(scheme_name, ["Linear"])},
                                ignore=["lm_head"])
    apply_quantization_config(model, config)
    for name, module in model.named_modules():
        scheme = getattr(module, "quantization_scheme", None)
        if scheme is None:
            continue
        w, args = module.weight.data, scheme.weights
        if args.strategy == QuantizationStrategy.TENSOR:
            lo, hi = w.amin(), w.amax()
        elif args.strategy == QuantizationStrategy.CHANNEL:
            lo, hi = w.amin(1, keepdim=True), w.amax(1, keepdim=True)
        else:
            groups = w.unflatten(-1, (-1, args.group_size))
            lo, hi = groups.amin(-1), groups.amax(-1)
        scale, zero = calculate_qparams(lo, hi, args)
        module.weight_scale.data.copy_(scale.reshape(module.weight_scale.shape))
        if hasattr(module, "weight_zero_point"):
            module.weight_zero_point.data.copy_(zero.reshape(module.weight_zero_point.shape))
        if hasattr(module, "input_scale"):
            module.input_scale.data.fill_(float(input_amax[name]) / 448.0)


def _save_compressed(scheme_name, path):
    """compressed-tensors' save path: ModelCompressor.compress_model, save_pretrained, update_config."""
    model = _base_model()
    _calibrate(model, scheme_name)
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    model.save_pretrained(path)
    compressor.update_config(str(path))
    build_tokenizer(model.config.vocab_size).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = _save_compressed(name, tmp_path_factory.mktemp(name.lower()) / "m")
        return cache[name]

    return get


def _dequantized_reference(model_dir):
    """transformers' compressed-tensors loader, dequantizing to the checkpoint dtype, then run in float32."""
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    model = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=CompressedTensorsConfig(dequantize=True))
    assert not any(n.endswith(("weight_packed", "weight_scale")) for n, _ in model.named_parameters())
    with torch.inference_mode():
        return model.float()(torch.tensor([PROMPT])).logits[0]  # (T, vocab)


def _engine_logits(llm):
    """Every prompt position's logits as the engine computes them (prompt logprobs ask for all of them)."""
    model, seen = llm.engine.runner.model, []
    original = model.compute_logits

    def record(hidden):
        out = original(hidden)
        seen.append(out.float().clone())
        return out

    model.compute_logits = record
    try:
        llm.generate([PROMPT], SamplingParams.greedy(1, prompt_logprobs=0))
    finally:
        del model.compute_logits
    return torch.cat(seen)  # positions 0..T-2 (prompt logprobs), then T-1 (the sampled row)


def _llm(model_dir, **kwargs):
    return LLM(str(model_dir), kv_cache_memory_bytes=4 * 2**20, max_model_len=128, **kwargs)


def _checkpoint_bytes(model_dir):
    return sum(t.num_bytes for t in checkpoint_tensors(model_dir).values())


@pytest.mark.parametrize(("scheme", "layer"), [
    ("FP8", Fp8Linear),  # per-tensor weight scales, static per-tensor input scales
    ("FP8_DYNAMIC", Fp8Linear),  # per-channel weight scales, dynamic per-token activations
    ("W4A16", Int4Linear),  # INT4, groups of 128, symmetric
    ("W4A16_ASYM", Int4Linear),  # INT4, groups of 128, a zero point per group
])
def test_compressed_tensors_checkpoint_matches_the_dequantized_model(scheme, layer, checkpoints):
    model_dir = checkpoints(scheme)
    quant = json.loads((model_dir / "config.json").read_text())["quantization_config"]
    assert quant["quant_method"] == "compressed-tensors"
    llm = _llm(model_dir, dtype="float32")
    swapped = [m for m in llm.engine.runner.model.modules() if isinstance(m, layer)]
    assert len(swapped) == 2 * 4  # qkv, o, gate‖up, down in each of 2 layers
    got, want = _engine_logits(llm), _dequantized_reference(model_dir)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    # and the quantization mattered: the original bf16 model is further away than the tolerance
    with torch.inference_mode():
        original = _base_model().float()(torch.tensor([PROMPT])).logits[0]
    assert (original - want).abs().max() > ATOL


@pytest.mark.parametrize("scheme", ["FP8", "FP8_DYNAMIC", "W4A16", "W4A16_ASYM"])
def test_weight_memory_is_the_checkpoints_bytes(scheme, checkpoints):
    model_dir = checkpoints(scheme)
    llm = _llm(model_dir)  # dtype auto: the checkpoint's bfloat16 for what is not quantized
    want = _checkpoint_bytes(model_dir)
    assert abs(llm.engine.runner.weight_bytes - want) <= 0.02 * want
    # against the same model dequantized to 16 bits, well outside 2%
    assert llm.engine.runner.weight_bytes < 0.9 * sum(p.numel() * 2 for p in _base_model().parameters())


def _modelopt_from(ct_dir, out_dir):
    """ModelOpt's unified HF export for quant_algo FP8 (its docs and vLLM's modelopt loader): float8_e4m3fn
    ``weight``, float32 0-d ``weight_scale`` and ``input_scale`` per Linear, the scheme in hf_quant_config.json."""
    shutil.copytree(ct_dir, out_dir)
    tensors = load_file(str(out_dir / "model.safetensors"))
    out = {n: (t.float().reshape(()) if n.endswith(("weight_scale", "input_scale")) else t) for n, t in tensors.items()}
    save_file(out, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((out_dir / "config.json").read_text())
    del config["quantization_config"]
    (out_dir / "config.json").write_text(json.dumps(config))
    (out_dir / "hf_quant_config.json").write_text(json.dumps({
        "producer": {"name": "modelopt", "version": "0.29.0"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]},
    }))
    return out_dir


def test_modelopt_fp8_checkpoint_matches_the_dequantized_model(checkpoints, tmp_path):
    ct_dir = checkpoints("FP8")
    model_dir = _modelopt_from(ct_dir, tmp_path / "modelopt")
    llm = _llm(model_dir, dtype="float32")
    assert llm.engine.model_args.quantization.method == "modelopt"
    torch.testing.assert_close(_engine_logits(llm), _dequantized_reference(ct_dir), atol=ATOL, rtol=0)
    llm16 = _llm(model_dir)
    assert abs(llm16.engine.runner.weight_bytes - _checkpoint_bytes(model_dir)) <= 0.02 * _checkpoint_bytes(model_dir)


def _gptq_from(ct_dir, out_dir, *, symmetric):
    """AutoGPTQ's v1 layout of the same codes: ``qweight`` (in/8, out) int32 packed along the input dim, ``qzeros``
    (groups, out/8) packed along the output dim holding zero − 1, ``scales`` (groups, out) float16, ``g_idx``; unsigned
    4-bit codes (compressed-tensors' signed code + 8)."""
    shutil.copytree(ct_dir, out_dir)
    tensors = load_file(str(out_dir / "model.safetensors"))
    out = {}
    for name, t in tensors.items():
        if not name.endswith(".weight_packed"):
            if not name.endswith((".weight_scale", ".weight_zero_point", ".weight_shape")):
                out[name] = t
            continue
        p = name.removesuffix(".weight_packed")
        codes = unpack_int4(t)  # (out, in) signed
        cols = codes.shape[1]
        scale = tensors[p + ".weight_scale"]  # (out, groups)
        zero = (unpack_int4(tensors[p + ".weight_zero_point"].t().contiguous()).t() if not symmetric
                else torch.zeros_like(scale, dtype=torch.int64))  # (out, groups) signed
        out[p + ".qweight"] = pack_int4(codes).t().contiguous()  # (in/8, out): code i of column o in word i//8
        out[p + ".qzeros"] = pack_int4((zero.t() - 1).contiguous())  # unsigned zero − 1, i.e. signed zero + 8 − 1
        out[p + ".scales"] = scale.t().to(torch.float16).contiguous()
        out[p + ".g_idx"] = (torch.arange(cols) // 128).to(torch.int32)
    save_file(out, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((out_dir / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
                                     "sym": symmetric, "checkpoint_format": "gptq", "damp_percent": 0.01,
                                     "static_groups": False, "true_sequential": True}
    (out_dir / "config.json").write_text(json.dumps(config))
    return out_dir


@pytest.mark.parametrize("scheme", ["W4A16", "W4A16_ASYM"])
def test_gptq_checkpoint_matches_the_dequantized_model(scheme, checkpoints, tmp_path):
    ct_dir = checkpoints(scheme)
    model_dir = _gptq_from(ct_dir, tmp_path / "gptq", symmetric=scheme == "W4A16")
    llm = _llm(model_dir, dtype="float32")
    assert llm.engine.model_args.quantization.method == "gptq"
    # scales went through float16 here (GPTQ stores them so): the same tolerance covers it
    torch.testing.assert_close(_engine_logits(llm), _dequantized_reference(ct_dir), atol=ATOL, rtol=0)
    # memory: the checkpoint's bytes less what the engine does not keep — g_idx equal to input // 128 (desc_act
    # false), and a symmetric checkpoint's constant qzeros
    files = checkpoint_tensors(model_dir)
    redundant = sum(t.num_bytes for n, t in files.items()
                    if n.endswith(".g_idx") or (scheme == "W4A16" and n.endswith(".qzeros")))
    want = _checkpoint_bytes(model_dir) - redundant
    assert abs(_llm(model_dir).engine.runner.weight_bytes - want) <= 0.02 * want


def test_online_fp8_matches_compressed_tensors_per_channel_fp8(checkpoints, tmp_path):
    """``quantization="fp8"`` on the 16-bit model quantizes each weight row to e4m3 with scale amax / 448: the
    reference is compressed-tensors' own quantize-dequantize (``fake_quantize``) of the FP8_DYNAMIC weight args with
    its ``calculate_qparams`` per channel, in float32, over the same model."""
    base = _base_model()
    base_dir = save_model_dir(base, tmp_path / "bf16")
    llm = _llm(base_dir, dtype="float32", quantization="fp8")
    assert sum(isinstance(m, Fp8Linear) for m in llm.engine.runner.model.modules()) == 2 * 4
    reference = base.float()
    args = preset_name_to_scheme("FP8_DYNAMIC", ["Linear"]).weights
    with torch.no_grad():
        for name, module in reference.named_modules():
            if isinstance(module, torch.nn.Linear) and name != "lm_head":
                w = module.weight.data
                scale, zero = calculate_qparams(w.amin(1, keepdim=True), w.amax(1, keepdim=True), args)
                module.weight.data = fake_quantize(w, scale, zero, args)
        want = reference(torch.tensor([PROMPT])).logits[0]
        original = _base_model().float()(torch.tensor([PROMPT])).logits[0]
    got = _engine_logits(llm)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    assert (original - want).abs().max() > ATOL
    loaded = _llm(base_dir, quantization="fp8").engine.runner.weight_bytes
    want = _checkpoint_bytes(checkpoints("FP8_DYNAMIC"))  # our scales are float32, theirs bfloat16: within 2%
    assert abs(loaded - want) <= 0.02 * want
    assert loaded < 0.75 * _llm(base_dir).engine.runner.weight_bytes


def _with_quant_config(src, dst, quant):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config["quantization_config"] = quant
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def _group(quant, **fields):
    (group,) = quant["config_groups"].values()
    return {**quant, "config_groups": {"group_0": {**group, **fields}}}


@pytest.mark.parametrize(("change", "message"), [
    (lambda q: q | {"quant_method": "awq"}, "quantization_config.quant_method='awq' in config.json is not supported"),
    (lambda q: _group(q, format="naive-quantized") | {"format": "naive-quantized"},
     "quantization_config.format='naive-quantized'"),
    (lambda q: _group(q, weights={**q["config_groups"]["group_0"]["weights"], "strategy": "block"}),
     "weights.strategy='block'"),
])
def test_unsupported_schemes_are_refused(change, message, checkpoints, tmp_path):
    source = checkpoints("FP8_DYNAMIC")
    quant = json.loads((source / "config.json").read_text())["quantization_config"]
    model_dir = _with_quant_config(source, tmp_path / "m", change(quant))
    with pytest.raises(ValueError, match=re.escape(message)):
        _llm(model_dir)


def test_the_cli_refuses_an_unsupported_scheme_in_one_line_with_exit_2(checkpoints, tmp_path, capsys):
    source = checkpoints("FP8_DYNAMIC")
    quant = json.loads((source / "config.json").read_text())["quantization_config"]
    model_dir = _with_quant_config(source, tmp_path / "m", quant | {"quant_method": "awq"})
    code, _, err = main_in_process(capsys, "serve", "--model", str(model_dir), "--device", "cpu")
    assert code == 2
    assert len([line for line in err.splitlines() if "quantization_config.quant_method='awq'" in line]) == 1, err


def test_weight_only_fp8_as_llm_compressor_writes_it_is_served_weight_only(checkpoints, tmp_path):
    """llm-compressor's W8A16 FP8 says format 'naive-quantized' (compressed-tensors keeps 'float-quantized' for FP8
    activations) — the same tensors; it was refused. Its layers are marked weight-only, so that a Hopper GPU never
    quantizes their activations (it did: found in review); and a quantized MoE router is refused by name."""
    from accelkit.serve.quant.load import _refuse_unserved

    source = checkpoints("FP8_DYNAMIC")
    quant = json.loads((source / "config.json").read_text())["quantization_config"]
    w8a16 = _group(quant, format="naive-quantized", input_activations=None) | {"format": "naive-quantized"}
    model_dir = _with_quant_config(source, tmp_path / "w8a16", w8a16)
    llm = _llm(model_dir, dtype="float32")
    layers = [m for m in llm.engine.runner.model.modules() if isinstance(m, Fp8Linear)]
    assert len(layers) == 2 * 4 and all(m.weight_only and not m.scaled_mm for m in layers)
    torch.testing.assert_close(_engine_logits(llm), _dequantized_reference(source), atol=ATOL, rtol=0)
    dynamic = _llm(source, dtype="float32")
    assert not any(m.weight_only for m in dynamic.engine.runner.model.modules() if isinstance(m, Fp8Linear))
    router = {"model.layers.0.mlp.gate.weight": torch.zeros(4, 8, dtype=torch.float8_e4m3fn),
              "model.layers.0.mlp.gate.weight_scale": torch.ones(4)}
    with pytest.raises(ValueError, match=r"a quantized MoE router \(model.layers.0.mlp.gate.weight\) is not served"):
        _refuse_unserved(router, parse_quantization_config(quant))


@pytest.mark.parametrize(("scheme", "per_element"), [("FP8_DYNAMIC", 10), ("W4A16", 14)])
def test_the_dequantization_workspace_is_the_largest_weight_times_its_peak_bytes(scheme, per_element, checkpoints):
    """What a GPU keeps out of the KV cache for per-matmul dequantization: the largest quantized weight (here the
    fused gate‖up, 2·intermediate × hidden) times the bytes live per element while it is dequantized."""
    from accelkit.serve.quant.linear import dequant_workspace_bytes

    model = _llm(checkpoints(scheme), dtype="float32").engine.runner.model
    largest = max(m.out_features * m.in_features for m in model.modules() if isinstance(m, (Fp8Linear, Int4Linear)))
    assert dequant_workspace_bytes(model) == largest * per_element > 0


def test_online_fp8_of_a_quantized_checkpoint_is_refused(checkpoints):
    with pytest.raises(ValueError, match=r"quantization='fp8' quantizes a 16-bit checkpoint.*leave quantization out "
                                         r"or give quantization='compressed-tensors'"):
        _llm(checkpoints("W4A16"), quantization="fp8")


def test_the_checkpoints_own_format_is_taken_by_name_and_another_refused(checkpoints, tmp_path):
    """vLLM scripts name the checkpoint's format (LLM(model, quantization="gptq")): it was a field error ('gptq' is
    not one of 'fp8'); the checkpoint is served from its own quantization_config, and another format is refused."""
    ct_dir = checkpoints("W4A16")
    gptq_dir = _gptq_from(ct_dir, tmp_path / "gptq", symmetric=True)
    for name in ("gptq", "gptq_marlin"):
        llm = _llm(gptq_dir, quantization=name)
        assert llm.engine.model_args.quantization.method == "gptq" and not llm.engine.runner.quantization.is_online
    assert _llm(ct_dir, quantization="compressed-tensors").engine.model_args.quantization.method == "compressed-tensors"
    with pytest.raises(ValueError, match=r"quantization='gptq' names the gptq format, but .* describes a "
                                         r"compressed-tensors checkpoint"):
        _llm(ct_dir, quantization="gptq")
    with pytest.raises(ValueError, match=r"quantization='gptq' names the gptq format of a quantized checkpoint, but "
                                         r".* has no quantization_config"):
        _llm(save_model_dir(_base_model(), tmp_path / "bf16"), quantization="gptq")


def test_quantized_weights_with_tensor_parallelism_are_refused(checkpoints, tmp_path):
    """Before any worker starts: the ranks' shards are cut from 16-bit tensors only."""
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2 with quantized weights \(compressed-tensors fp8"):
        _llm(checkpoints("FP8"), tensor_parallel_size=2)
    base_dir = save_model_dir(_base_model(), tmp_path / "bf16")
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2 with quantized weights \(fp8\)"):
        _llm(base_dir, tensor_parallel_size=2, quantization="fp8")


# ---- MoE: FP8 experts (Qwen3-MoE: layer 0 dense, layer 1 top-2 of 8 experts) --------------------------------------
FP8_CHANNEL = preset_name_to_scheme("FP8_DYNAMIC", ["Linear"]).weights


def _moe_base(moe_intermediate_size=64):
    return hf_model("tiny-qwen3-moe", seed=9, hidden_size=128, intermediate_size=256, head_dim=32, num_hidden_layers=2,
                    mlp_only_layers=[0], moe_intermediate_size=moe_intermediate_size).to(torch.bfloat16)


def _channel_qparams(w):
    """compressed-tensors' per-channel FP8 scale of a (rows, cols) weight, in the weight's dtype."""
    return calculate_qparams(w.amin(1, keepdim=True), w.amax(1, keepdim=True), FP8_CHANNEL)


def _fake_quantized_moe_logits(model):
    """The model with every decoder Linear (not the router) and every expert's rows quantize-dequantized by
    compressed-tensors' fake_quantize, per channel; run in float32."""
    model = model.float()
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and name != "lm_head" and not name.endswith("mlp.gate"):
                module.weight.data = fake_quantize(module.weight.data, *_channel_qparams(module.weight.data), FP8_CHANNEL)
            elif type(module).__name__.endswith("Experts"):  # transformers 5: (E, 2F, H) and (E, H, F) parameters
                for param in (module.gate_up_proj, module.down_proj):
                    for e in range(param.shape[0]):
                        param.data[e] = fake_quantize(param.data[e], *_channel_qparams(param.data[e]), FP8_CHANNEL)
        return model(torch.tensor([PROMPT])).logits[0]


def test_online_fp8_quantizes_moe_experts_too(tmp_path):
    from accelkit.serve.quant.linear import Fp8Experts

    base = _moe_base()
    model_dir = save_model_dir(base, tmp_path / "moe")
    llm = _llm(model_dir, dtype="float32", quantization="fp8")
    modules = list(llm.engine.runner.model.modules())
    assert sum(isinstance(m, Fp8Experts) for m in modules) == 1 and sum(isinstance(m, Fp8Linear) for m in modules) == 6
    want = _fake_quantized_moe_logits(_moe_base())
    torch.testing.assert_close(_engine_logits(llm), want, atol=ATOL, rtol=0)
    with torch.inference_mode():
        assert (_moe_base().float()(torch.tensor([PROMPT])).logits[0] - want).abs().max() > ATOL


@pytest.mark.parametrize(("scheme", "fmt"), [("FP8_DYNAMIC", "float-quantized"), ("W4A16_ASYM", "pack-quantized")])
def test_quantized_moe_checkpoint_with_per_expert_tensors(scheme, fmt, tmp_path):
    """The per-expert layout vLLM reads for a quantized MoE checkpoint (compressed-tensors' per-Linear names,
    ``experts.{e}.gate_proj.weight`` e4m3 + ``weight_scale``, or ``weight_packed`` + scale + zero point), each Linear
    compressed by compressed-tensors' own compressor for the format; the router stays bf16 (llm-compressor's MoE
    recipes ignore ``mlp.gate``). Reference: the transformers model with every weight replaced by that compressor's
    decompression of the same tensors."""
    from compressed_tensors.compressors import BaseCompressor

    compressor = BaseCompressor.get_value_from_registry(fmt)
    quant_scheme = preset_name_to_scheme(scheme, ["Linear"])
    args = quant_scheme.weights
    base = lambda: _moe_base(moe_intermediate_size=128)  # noqa: E731 -- INT4 groups of 128 along every input
    source = save_model_dir(base(), tmp_path / "bf16")
    model_dir = tmp_path / "quantized"
    shutil.copytree(source, model_dir)
    tensors = load_file(str(model_dir / "model.safetensors"))
    out, deq = {}, {}
    for name, t in tensors.items():
        if not (name.startswith("model.layers.") and t.ndim == 2 and not name.endswith(("norm.weight", "gate.weight"))):
            out[name] = t
            continue
        if args.strategy == QuantizationStrategy.GROUP:
            groups = t.unflatten(-1, (-1, args.group_size))
            scale, zero = calculate_qparams(groups.amin(-1), groups.amax(-1), args)
        else:
            scale, zero = _channel_qparams(t)
        compressed = compressor.compress({"weight": t, "weight_scale": scale, "weight_zero_point": zero}, quant_scheme)
        prefix = name.removesuffix(".weight")
        out.update({f"{prefix}.{key}": value for key, value in compressed.items()})
        deq[prefix] = compressor.decompress(dict(compressed), quant_scheme)["weight"].float()
    assert sum(1 for k in deq if ".experts." in k) == 3 * 8
    save_file(out, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((model_dir / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": fmt, "ignore": ["lm_head", "re:.*mlp.gate$"],
        "config_groups": {"group_0": {"targets": ["Linear"], "format": fmt, **quant_scheme.model_dump(
            include={"weights", "input_activations"})}}}
    (model_dir / "config.json").write_text(json.dumps(config))
    llm = _llm(model_dir, dtype="float32")
    reference, replaced = base().float(), []
    with torch.no_grad():
        for name, module in reference.named_modules():
            if isinstance(module, torch.nn.Linear) and name in deq:
                module.weight.data = deq[name]
                replaced.append(name)
            elif type(module).__name__.endswith("Experts"):
                for e in range(module.gate_up_proj.shape[0]):
                    module.gate_up_proj.data[e] = torch.cat([deq[f"{name}.{e}.gate_proj"], deq[f"{name}.{e}.up_proj"]])
                    module.down_proj.data[e] = deq[f"{name}.{e}.down_proj"]
        want = reference(torch.tensor([PROMPT])).logits[0]
    assert len(replaced) == 4 * 2 + 3  # q, k, v, o in both layers; gate, up, down of the dense layer 0
    torch.testing.assert_close(_engine_logits(llm), want, atol=ATOL, rtol=0)
    with torch.inference_mode():
        assert (base().float()(torch.tensor([PROMPT])).logits[0] - want).abs().max() > ATOL
    loaded = _llm(model_dir).engine.runner.weight_bytes
    want_bytes = _checkpoint_bytes(model_dir) - sum(  # less compressed-tensors' weight_shape, which is not kept
        t.num_bytes for n, t in checkpoint_tensors(model_dir).items() if n.endswith(".weight_shape"))
    assert abs(loaded - want_bytes) <= 0.02 * want_bytes
