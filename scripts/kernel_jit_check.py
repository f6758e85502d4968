"""Compile every Triton kernel launch the engine makes, as Triton's JIT would on a GPU, without a GPU.

The engine runs here for real (scheduler, runner, CUDA-graph bucket padding, the attention backend's
launch wrappers) on a one-layer model with the 1B Llama's widths (hidden 2048, 32 heads, 8 KV heads,
head_dim 64, MLP 8192), with Triton's active driver replaced by one that reports a GPU target: each
``kernel[grid](...)`` goes through the JIT's own argument binding and specialization (16-byte alignment of
pointers, integers equal to 1 or divisible by 16) and is compiled down to a cubin by the wheel's ptxas —
and then not launched (there is nothing to launch it on), so every output is left as allocated and the
tokens sampled are arbitrary. What is checked: every variant a real step launches compiles for the target,
and its shared memory fits the GPU (227 KiB per block on Hopper, 163 KiB on Ampere A100).
``tests/unit/test_serve_kernels_compile.py`` compiles hand-written signatures; this compiles what the
engine actually passes.

    python scripts/kernel_jit_check.py [--arch 90] [--json]     # run WITHOUT TRITON_INTERPRET
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MAX_SHARED = {80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024, 100: 227 * 1024}
NUM_SMS = {80: 108, 86: 84, 89: 128, 90: 132, 100: 148}  # the GPU the split-K heuristic plans for
# (dtype, kv_cache_dtype): what the GPU run serves (bf16 with each KV kind) and what tests/gpu checks (fp32)
CONFIGS = (("bfloat16", "auto"), ("bfloat16", "fp8"), ("bfloat16", "int8"), ("float32", "auto"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", type=int, default=90, choices=sorted(MAX_SHARED), help="compute capability × 10")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("kernel_jit_check: unset TRITON_INTERPRET (the kernels must be compiled, not interpreted)")
    sys.path.insert(0, str(ROOT))

    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    target = GPUTarget("cuda", args.arch, 32)

    class CompileOnlyDriver:
        """What JITFunction.run asks the active driver for, answered for ``target``; nothing is launched."""

        def get_current_device(self) -> int:
            return 0

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

        def get_current_target(self) -> Any:
            return target

    compiled: dict[str, dict[str, Any]] = {}
    failed: list[str] = []
    jit_run = JITFunction.run

    def compile_only(self: Any, *a: Any, grid: Any, warmup: bool, **kw: Any) -> None:
        try:
            kernel = jit_run(self, *a, grid=grid, warmup=True, **kw)
        except Exception as exc:  # the compiler's message is the finding
            failed.append(f"{self.__name__}: {type(exc).__name__}: {' '.join(str(exc).split())[:1500]}")
            return
        shared = int(getattr(kernel.metadata, "shared", 0))
        entry = compiled.setdefault(f"{self.__name__}/{kernel.hash[:12]}", {
            "kernel": self.__name__, "num_warps": kernel.metadata.num_warps, "shared_bytes": shared,
            "cubin_bytes": len(kernel.asm.get("cubin", b""))})
        entry["launches"] = entry.get("launches", 0) + 1

    # the kernels are imported as JIT functions (TRITON_INTERPRET unset) before the engine is built; the
    # backend refuses Triton on a CPU unless TRITON_INTERPRET=1, which is only read at construction from here on
    import accelkit.serve.attention.triton_backend as triton_backend  # (imports every kernel module)
    from accelkit.serve import LLM, SamplingParams
    from accelkit.serve.testing import save_tiny_model

    driver.set_active(CompileOnlyDriver())
    JITFunction.run = compile_only
    os.environ["TRITON_INTERPRET"] = "1"
    triton_backend._CPU_SMS = NUM_SMS[args.arch]
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    rows = []
    with tempfile.TemporaryDirectory(prefix="accelkit-jit-") as tmp:
        model = save_tiny_model(Path(tmp) / "m", "tiny-llama", hidden_size=2048, num_attention_heads=32,
                                num_key_value_heads=8, head_dim=64, intermediate_size=8192, num_hidden_layers=1)
        for dtype, kv in CONFIGS:
            before = len(compiled)
            llm = LLM(str(model), dtype=dtype, kv_cache_dtype=kv, attention_backend="triton", block_size=16,
                      max_num_seqs=8, max_num_batched_tokens=256, kv_cache_memory_bytes=64 << 20, max_model_len=1024)
            llm.engine.runner.enable_decode_graphs(capture=False)  # the padded bucket layout CUDA graphs replay
            # a shared 48-token prefix (prefix-cache hits: chunks with cached context), prompts longer than one
            # step's budget (chunked prefill), then decodes at 1..8 sequences (split-K for the small batches)
            prefix = list(range(10, 58))
            prompts = [prefix + [100 + i] * (5 + 40 * i) for i in range(6)]
            llm.generate(prompts[:1], SamplingParams.greedy(3, ignore_eos=True))
            llm.generate(prompts, SamplingParams.greedy(6, ignore_eos=True))
            rows.append({"dtype": dtype, "kv_cache_dtype": kv, "new_variants": len(compiled) - before})
            del llm

    limit = MAX_SHARED[args.arch]
    too_big = [f"{k}: {v['shared_bytes']} B of shared memory > {limit}" for k, v in compiled.items()
               if v["shared_bytes"] > limit]
    result = {"target": f"sm_{args.arch}", "triton": triton.__version__, "torch": torch.__version__,
              "configs": rows, "variants": compiled, "failed": failed + too_big}
    if args.json:
        print(json.dumps(result))
    else:
        for key, v in sorted(compiled.items()):
            print(f"{key:45s} warps {v['num_warps']}  shared {v['shared_bytes']:>7,} B  launches {v['launches']}")
        print(f"{len(compiled)} variants compiled for sm_{args.arch} (triton {triton.__version__}); "
              f"{len(failed) + len(too_big)} failed")
        for line in failed + too_big:
            print("FAILED", line)
    sys.exit(1 if failed or too_big else 0)


if __name__ == "__main__":
    main()
