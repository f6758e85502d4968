"""The engine on real model shapes with random weights (issue 31, criterion 5): a Qwen3-MoE and an FP8 checkpoint.

* ``--model qwen3-moe`` — Qwen3-30B-A3B's layer shapes (hidden 2048, 32 heads, 4 KV heads, head_dim 128, 128
  experts of 768, top-8, vocab 151936), ``--num-layers`` of them (default 2): served in bf16, then with
  ``quantization="fp8"`` (online FP8, experts included); reported as for llama-fp8 below.
* ``--model llama-fp8`` — Llama-3.1-8B's layer shapes (hidden 4096, 32 heads, 8 KV heads, ffn 14336, vocab 128256),
  ``--num-layers`` of them (default 4), written twice from the same random codes: as a compressed-tensors FP8
  checkpoint (``float-quantized``, per-channel weight scales, dynamic per-token activations — llm-compressor's
  FP8_DYNAMIC layout) and as the bf16 checkpoint those codes dequantize to. Both are served; reported: tok/s of
  each, the share of greedy tokens they agree on, weight bytes against the checkpoint's, how many layers ran
  ``torch._scaled_mm``.

Each run: ``--requests`` prompts (lengths uniform in [256, 512], seed 0), ``--max-tokens`` (128) greedy output tokens
each, EOS ignored,
all at t=0, after a 4-request warm-up; output tok/s = output tokens / wall time (``time.perf_counter``). Writes one
JSON document (``--out``) with the environment. ``--tiny`` shrinks every shape (a CPU check of this script).

    python benchmarks/serve_real_shapes.py --model llama-fp8 --device cuda --out fp8.json
    python benchmarks/serve_real_shapes.py --model qwen3-moe --tiny --device cpu      # smoke run, prints only
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors.torch import save_file

from accelkit.hardware.detect import environment
from accelkit.models import get_preset
from accelkit.models.build import _CLASSES, hf_config
from accelkit.serve import LLM, SamplingParams
from accelkit.serve.preflight import checkpoint_tensors
from accelkit.serve.quant.linear import FP8_MAX, Fp8Linear
from accelkit.serve.testing import build_tokenizer

PRESETS = {"qwen3-moe": ("qwen3-30b-a3b", 2), "llama-fp8": ("llama-3.1-8b", 4)}
TINY = {"hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64, "num_experts": 8,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 512}


def _config(model: str, num_layers: int, tiny: bool) -> Any:
    spec = get_preset(PRESETS[model][0])
    overrides: dict[str, Any] = {"num_hidden_layers": num_layers}
    if tiny:
        overrides |= {k: v for k, v in TINY.items() if model == "qwen3-moe" or k not in ("moe_intermediate_size",
                                                                                       "num_experts")}
    config = hf_config(spec, **overrides)
    config.bos_token_id, config.eos_token_id = 1, 2
    class_name = _CLASSES[spec.family][1]
    config.architectures = [class_name]
    return config, class_name


def _random_tensors(config: Any, class_name: str, seed: int) -> dict[str, torch.Tensor]:
    """Every tensor the transformers model holds, N(0, 0.02) (norm weights 1), bf16 — built from its meta shapes."""
    with torch.device("meta"):
        model = getattr(transformers, class_name)(config)
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, param in model.state_dict().items():
        if name.endswith("norm.weight"):
            out[name] = torch.ones(param.shape, dtype=torch.bfloat16)
            continue
        value = (torch.randn(param.shape, generator=gen) * 0.02).to(torch.bfloat16)
        if name.endswith(".experts.gate_up_proj"):  # transformers 5's fused (E, 2F, H) → the checkpoint's per expert
            f = value.shape[1] // 2
            for e in range(value.shape[0]):
                out[name.replace("gate_up_proj", f"{e}.gate_proj.weight")] = value[e, :f].contiguous()
                out[name.replace("gate_up_proj", f"{e}.up_proj.weight")] = value[e, f:].contiguous()
        elif name.endswith(".experts.down_proj"):  # (E, H, F)
            for e in range(value.shape[0]):
                out[name.replace("down_proj", f"{e}.down_proj.weight")] = value[e].contiguous()
        else:
            out[name] = value
    return out


def _save(path: Path, config: Any, tensors: dict[str, torch.Tensor], quant: dict[str, Any] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(path)
    if quant is not None:
        data = json.loads((path / "config.json").read_text())
        data["quantization_config"] = quant
        (path / "config.json").write_text(json.dumps(data, indent=2))
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    build_tokenizer(config.vocab_size).save_pretrained(path)
    return path


def _fp8_dynamic(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(FP8 checkpoint tensors, the bf16 ones they dequantize to): each decoder Linear weight → e4m3 with a bf16 scale
    per output row (amax / 448), the layout compressed-tensors' FP8_DYNAMIC scheme saves."""
    fp8, dequantized = {}, {}
    for name, t in tensors.items():
        if name.startswith("model.layers.") and name.endswith("_proj.weight"):
            scale = (t.float().abs().amax(dim=1, keepdim=True) / FP8_MAX).to(torch.bfloat16)  # (out, 1)
            codes = (t.float() / scale.float()).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            fp8[name], fp8[name.removesuffix(".weight") + ".weight_scale"] = codes, scale
            dequantized[name] = (codes.float() * scale.float()).to(torch.bfloat16)
        else:
            fp8[name] = dequantized[name] = t
    return fp8, dequantized


FP8_DYNAMIC_CONFIG = {
    "quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
    "ignore": ["lm_head"], "sparsity_config": {}, "transform_config": {}, "kv_cache_scheme": None,
    "config_groups": {"group_0": {
        "targets": ["Linear"], "format": "float-quantized", "output_activations": None,
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False,
                    "group_size": None},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True,
                              "dynamic": True, "group_size": None},
    }},
}


def _serve(model_dir: Path, *, device: str, num_requests: int, max_tokens: int, vocab: int, tiny: bool,
           quantization: str | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    llm = LLM(str(model_dir), device=device, dtype="bfloat16", max_model_len=1024, quantization=quantization,
              **({"kv_cache_memory_bytes": 64 * 2**20} if tiny else {}))
    load_s = time.perf_counter() - t0
    rng = random.Random(0)
    prompts = [[rng.randrange(4, vocab) for _ in range(rng.randint(256, 512))] for _ in range(num_requests)]
    params = SamplingParams.greedy(max_tokens, ignore_eos=True)
    llm.generate(prompts[:4], params)  # warm-up (compiles the Triton kernels on CUDA)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    wall_s = time.perf_counter() - t0
    runner = llm.engine.runner
    fp8 = [m for m in runner.model.modules() if isinstance(m, Fp8Linear)]
    result = {
        "load_s": round(load_s, 2), "wall_s": round(wall_s, 3),
        "output_tok_per_s": round(num_requests * max_tokens / wall_s, 1),
        "weight_bytes": runner.weight_bytes,
        "checkpoint_bytes": sum(t.num_bytes for t in checkpoint_tensors(model_dir).values()),
        "fp8_layers": len(fp8), "fp8_layers_scaled_mm": sum(m.scaled_mm for m in fp8),
        "kv_cache_tokens": runner.num_blocks * runner.block_size,
        "token_ids": [o.token_ids for o in outs],
    }
    del llm
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(PRESETS), required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--num-layers", type=int, default=None)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--tiny", action="store_true", help="small shapes: a CPU check of this script")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    num_layers = args.num_layers or (1 if args.tiny else PRESETS[args.model][1])
    config, class_name = _config(args.model, num_layers, args.tiny)
    doc: dict[str, Any] = {"model": args.model, "preset": PRESETS[args.model][0], "num_layers": num_layers,
                           "tiny": args.tiny, "requests": args.requests, "output_tokens": args.max_tokens,
                           "environment": environment(), "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tensors = _random_tensors(config, class_name, seed=0)
        # run name → (checkpoint, online quantization); the first is the FP8 one, the second its bf16 reference
        runs: dict[str, tuple[Path, str | None]]
        if args.model == "llama-fp8":
            fp8, dequantized = _fp8_dynamic(tensors)
            runs = {"fp8-checkpoint": (_save(Path(tmp) / "fp8", config, fp8, FP8_DYNAMIC_CONFIG), None),
                    "bf16-dequantized": (_save(Path(tmp) / "bf16", config, dequantized), None)}
        else:
            bf16 = _save(Path(tmp) / "bf16", config, tensors)
            runs = {"fp8-online": (bf16, "fp8"), "bf16": (bf16, None)}
        del tensors
        for name, (model_dir, quantization) in runs.items():
            doc["runs"][name] = _serve(model_dir, device=args.device, num_requests=args.requests,
                                       max_tokens=args.max_tokens, vocab=config.vocab_size, tiny=args.tiny,
                                       quantization=quantization)
            print(f"{name}: {doc['runs'][name]['output_tok_per_s']} output tok/s", file=sys.stderr)
    (fp8_run, a), (bf16_run, b) = ((k, v["token_ids"]) for k, v in doc["runs"].items())
    same = sum(x == y for sa, sb in zip(a, b, strict=True) for x, y in zip(sa, sb, strict=True))
    doc["fp8_vs_bf16"] = {
        "greedy_token_agreement": round(same / sum(len(s) for s in a), 4),
        "throughput_ratio": round(doc["runs"][fp8_run]["output_tok_per_s"] / doc["runs"][bf16_run]["output_tok_per_s"],
                                  3)}
    for run in doc["runs"].values():
        run.pop("token_ids")
    text = json.dumps(doc, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
