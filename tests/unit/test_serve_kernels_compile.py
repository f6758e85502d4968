"""The engine's Triton kernels compile with the real Triton compiler for Hopper (sm_90) and Ampere (sm_80) —
through ptxas from the triton wheel, no GPU needed — in every variant the engine launches (bf16/fp32, KV
bf16/fp8/int8, decode/split-K/prefill, sliding window, the fused layer ops). The interpreter tests check
their numerics; this checks what the interpreter lets through (types, layouts, register allocation).
Runs in a subprocess (one for both tests: importing torch and triton is a good part of each run): the kernels must
be imported without TRITON_INTERPRET."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
REPO = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from accelkit.serve.kernels import fused, kv_write, paged_attention as pa

def compile_one(fn, sig, consts, arch):
    full = {n: ("constexpr" if n in consts else sig[n]) for n in fn.arg_names}
    triton.compile(ASTSource(fn, full, consts), target=GPUTarget("cuda", arch, 32))

done, failed = [], []
I = "i32"
for arch in (90, 80):
    for dt, kv in (("bf16", 0), ("bf16", 1), ("bf16", 2), ("fp32", 0)):
        cache = {0: "*" + dt, 1: "*u8", 2: "*i8"}[kv]
        scale = "*fp16" if kv else cache
        qmax = {0: 1.0, 1: 448.0, 2: 127.0}[kv]
        jobs = []
        for mode, sliding in (("decode", False), ("split", False), ("prefill", False), ("prefill", True)):
            split = mode == "split"
            sig = dict(Q="*" + dt, OUT="*" + dt, K_CACHE=cache, V_CACHE=cache, K_SCALE=scale, V_SCALE=scale,
                       BLOCK_TABLES="*i64", SEQ_LENS="*i64", QUERY_START="*i64",
                       PART_O="*fp32" if split else "*" + dt, PART_LSE="*fp32" if split else "*" + dt,
                       seq_offset=I, bt_stride=I, qk_scale="fp32", window=I, num_splits=I, stride_qt=I, stride_qh=I,
                       stride_ot=I, stride_oh=I, stride_cs=I, stride_ss=I, stride_pt=I, stride_ph=I)
            block_n, _ = pa.DECODE_TILE if mode != "prefill" else pa.PREFILL_TILE
            consts = dict(HEAD_DIM=64, DIM_P2=64, REP=4, REP_P2=4, BLOCK_M=16 if mode != "prefill" else 64,
                          BLOCK_N=block_n, PAGE=16, KV_QUANT=kv, SLIDING=sliding, SPLIT_K=split,
                          DOT_PRECISION="ieee" if dt == "fp32" else "tf32", UPCAST=False)
            jobs.append((f"paged_attention {dt} kv{kv} {mode}{' window' if sliding else ''}", pa._paged_attention_kernel, sig, consts))
        sig = dict(QKV="*" + dt, POSITIONS="*i64", COS="*" + dt, SIN="*" + dt, K_CACHE=cache, V_CACHE=cache,
                   K_SCALE=scale, V_SCALE=scale, SLOTS="*i64", stride_t=I, stride_cs=I, stride_ss=I)
        jobs.append((f"rope_kv_write {dt} kv{kv}", fused._rope_kv_write_kernel, sig,
                     dict(NUM_HEADS=32, NUM_KV_HEADS=8, HEAD_DIM=64, HEADS_P2=32, KV_HEADS_P2=8, DIM_P2=64, QMAX=qmax,
                          MIN_SCALE=1e-7, KV_QUANT=kv)))
        sig = dict(K="*" + dt, V="*" + dt, K_CACHE=cache, V_CACHE=cache, K_SCALE=scale, V_SCALE=scale, SLOTS="*i64",
                   stride_kt=I, stride_kh=I, stride_vt=I, stride_vh=I, stride_cs=I, stride_ss=I)
        jobs.append((f"kv_write {dt} kv{kv}", kv_write._kv_write_kernel, sig,
                     dict(NUM_HEADS=8, HEAD_DIM=64, HEADS_P2=8, DIM_P2=64, QMAX=qmax, MIN_SCALE=1e-7, KV_QUANT=kv)))
        if kv == 0:
            jobs.append((f"merge_splits {dt}", pa._merge_splits_kernel,
                         dict(OUT="*" + dt, PART_O="*fp32", PART_LSE="*fp32", num_splits=I, stride_ot=I, stride_oh=I,
                              stride_pt=I, stride_ph=I), dict(NUM_HEADS=32, HEADS_P2=32, HEAD_DIM=64, DIM_P2=64)))
            for res in (False, True):
                jobs.append((f"rms_norm {dt} residual={res}", fused._rms_norm_kernel,
                             dict(X="*" + dt, RES="*" + dt, W="*" + dt, OUT="*" + dt, RES_OUT="*" + dt, stride_x=I,
                                  stride_r=I, stride_o=I, stride_ro=I, n=I, eps="fp32"),
                             dict(HAS_RESIDUAL=res, BLOCK=2048)))
            jobs.append((f"silu_mul {dt}", fused._silu_mul_kernel,
                         dict(GU="*" + dt, OUT="*" + dt, stride_gu=I, stride_o=I, n=I), dict(BLOCK=1024)))
        for name, fn, sig, consts in jobs:
            try:
                compile_one(fn, sig, consts, arch)
                done.append(f"sm_{arch} {name}")
            except Exception as exc:
                failed.append(f"sm_{arch} {name}: {type(exc).__name__}: {str(exc)[:1500]}")
print(json.dumps({"done": done, "failed": failed}))
'''


# SCRIPT (argv[1]), then scripts/kernel_jit_check.py (argv[2]) as its command line runs it, in one interpreter: each
# one's exit code (1 for an exception, its traceback on stderr) and stdout, as the JSON line the process prints last
BOTH = r'''
import contextlib, io, json, runpy, sys, traceback

def run(what):
    out, code = io.StringIO(), 0
    try:
        with contextlib.redirect_stdout(out):
            what()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    return [code, out.getvalue()]

signatures = run(lambda: exec(compile(sys.argv[1], "<SCRIPT>", "exec"), {"__name__": "__main__"}))
sys.argv = [sys.argv[2], "--arch", "90", "--json"]
launches = run(lambda: runpy.run_path(sys.argv[0], run_name="__main__"))
print(json.dumps({"signatures": signatures, "launches": launches}))
'''


def _compile_env() -> dict[str, str]:
    """This environment without TRITON_INTERPRET: the kernels must be compiled, not interpreted."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # triton 3.9 warns when unset; 1 = what 3.6 does
    return env


@pytest.fixture(scope="module")
def compiled() -> tuple[dict, str]:
    """Both runs' {"signatures": [exit code, stdout], "launches": [...]}, and the process's stderr."""
    env = _compile_env()
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", BOTH, SCRIPT, str(REPO / "scripts" / "kernel_jit_check.py")],
                          capture_output=True, text=True, env=env, timeout=1800, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(not PTXAS.exists(), reason=f"this triton wheel has no ptxas ({PTXAS})")
def test_every_kernel_variant_compiles_for_sm90_and_sm80(compiled):
    (code, stdout), stderr = compiled[0]["signatures"], compiled[1]
    assert code == 0, stderr[-3000:]
    result = json.loads(stdout.strip().splitlines()[-1])
    assert not result["failed"], "\n".join(result["failed"])
    assert len(result["done"]) == 2 * (4 * 6 + 2 * 4)  # per arch: 4 dtype/KV kinds x 6, + 4 per unquantized dtype


@pytest.mark.slow
@pytest.mark.skipif(not PTXAS.exists(), reason=f"this triton wheel has no ptxas ({PTXAS})")
def test_every_launch_the_engine_makes_compiles_as_the_jit_would_for_sm90(compiled):
    """scripts/kernel_jit_check.py: the real engine (1B widths, one layer; bf16 with KV bf16/fp8/int8, fp32)
    steps through prefill chunks, prefix-cache hits, bucket-padded decodes and split-K, and each launch goes
    through Triton's own binding and specialization to a cubin — with the arguments the engine really passes."""
    (code, stdout), stderr = compiled[0]["launches"], compiled[1]
    result = json.loads(stdout.strip().splitlines()[-1])
    assert not result["failed"], "\n".join(result["failed"])
    assert code == 0, stderr[-3000:]
    kernels = {v["kernel"] for v in result["variants"].values()}
    assert kernels == {"_paged_attention_kernel", "_merge_splits_kernel", "_rope_kv_write_kernel", "_rms_norm_kernel",
                       "_silu_mul_kernel"}
    assert all(row["new_variants"] > 0 for row in result["configs"])  # each dtype/KV kind compiled its own
