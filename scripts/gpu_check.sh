#!/usr/bin/env bash
# The GPU checks of issue 13 on one GPU, within GPU_CHECK_BUDGET_S; every part under its own timeout, writing its JSON to
# $OUT, and the run goes on when one part fails:
#   triton a trivial Triton kernel launched on the GPU (its launcher is built with the image's C compiler
#          at run time: if that fails, every Triton path of the engine would fail — said in 3 s, up front)  ~5 s
#   probe  `accelkit hw probe --quick` (the measured peak MFU is also divided by)                      ~20 s
#   (a)    `pytest -m gpu tests/gpu` (serve first; bench, fp8 inference/training, reference memory,
#          NVML)                                                                                        ~90-170 s
#   (b)    the engine benchmark: benchmarks/serve_throughput.py --device cuda                          ~180 s
#   (b2)   benchmarks/serve_real_shapes.py (issue 31), random weights on real layer shapes: serve_qwen3_moe
#          (Qwen3-30B-A3B's layers, 2 of them, online FP8 then bf16) and serve_fp8_checkpoint (Llama-3.1-8B's
#          layers, 4 of them, a compressed-tensors FP8 checkpoint against the bf16 one its codes dequantize
#          to)                                                                                          ~90 s each
#   (c)    fp8 vs bf16 training on the 1B Llama shape (benchmarks/configs/llama-1b-shape.json) at
#          batch 8 × seq 2048: bf16, fp8 tensorwise, fp8 rowwise, one after another                    ~60 s
#   (d)    SD3-medium's shapes (random weights) at 512², 28 steps, CFG 7: bf16 vs fp8 denoiser linears,
#          images/s, J/image (NVML), each phase's time and MFU, the image accuracy gate                 ~120 s
#   (e)    `accelkit bench suite reference --quick` (published per-GPU figures beside ours)            ≤ 180 s
#   report `accelkit report` of everything above (the parts before it leave it 30 s of the budget)
#   attention_backends (only when GPU_CHECK_PARTS names it): benchmarks/attention_backends.py, SDPA vs the
#          Triton kernels per layer call and the kernels' tile-shape sweep                               ~90 s
#   structured_outputs (only when GPU_CHECK_PARTS names it; issue 28): benchmarks/structured_outputs.py on
#          SmolLM2-135M's shape in bf16, warm guided / unguided throughput at batch 16 per kind, both ways
#          (drawing before the mask and masking first); needs llguidance (scripts/gpu_wheels.sh)       ~150 s
# then one summary, $OUT/gpu_check.json (scripts/gpu_results.py summarize), printed at the end.
#
#   OUT=/tmp/out scripts/gpu_check.sh            # PY=python3 by default (a Python whose torch sees the GPU)
#   GPU_CHECK_PARTS=serve_throughput,report ...   # only these parts (triton hw_probe pytest_gpu serve_throughput
#                                                # serve_qwen3_moe serve_fp8_checkpoint llm_train_1b_fp8 sd3_medium_fp8
#                                                # reference_quick report); a rerun into the
#                                                # same OUT replaces their rows and keeps the others'
#   GPU_CHECK_BUDGET_S=580 (default)             # the whole script's seconds: one device command is capped at
#                                                # 600 s, so each part's timeout is cut to what is left of the
#                                                # budget and a part with < 30 s left is skipped — the summary
#                                                # is always written (the part timeouts alone add up to 900 s)
# A part past its timeout gets SIGINT (as Ctrl-C), not SIGTERM: pytest then still writes its junit XML and a bench
# prints its document with the variants it finished ("interrupted": true); SIGKILL 15 s later if it did not end.
#   python3 scripts/gpu_results.py commit $OUT   # afterwards: the results as files under benchmarks/results/gpu/
#
# Carried wheels: when .whl/*.whl exists (made by scripts/gpu_wheels.sh; GPU_CHECK_WHEELS=DIR elsewhere) they are installed into
# /tmp/site first, for images without torchao, fastapi, uvicorn, pydantic or plotly.
set -uo pipefail
script_start=$(date +%s)
BUDGET_S="${GPU_CHECK_BUDGET_S:-580}"
PARTS="${GPU_CHECK_PARTS:-triton,hw_probe,pytest_gpu,serve_throughput,serve_qwen3_moe,serve_fp8_checkpoint,llm_train_1b_fp8,sd3_medium_fp8,reference_quick,report}"
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
export ACCELKIT_HOME="$OUT/accelkit-home"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# a Python whose torch sees the GPU: $PY, else the project venv, else python3
PY="${PY:-}"
for candidate in "$PY" .venv/bin/python python3; do
  if [ -n "$candidate" ] && "$candidate" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    PY="$candidate"; break
  fi
  PY=""
done
if [ -z "$PY" ]; then
  echo '{"error": "no Python with a CUDA-enabled torch found (set PY=...)"}' > "$OUT/gpu_check.json"
  echo "gpu_check: no CUDA-enabled torch found; set PY=/path/to/python" >&2
  exit 1
fi
WHEELS="${GPU_CHECK_WHEELS:-.whl}"
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEELS"/*.whl \
    && export PYTHONPATH="/tmp/site:$PYTHONPATH" && echo "gpu_check: installed $(ls "$WHEELS"/*.whl | wc -l) carried wheels into /tmp/site"
fi
"$PY" -c 'import accelkit' || { echo "gpu_check: accelkit does not import with PYTHONPATH=$PYTHONPATH" >&2; exit 1; }
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total --format=csv > "$OUT/nvidia-smi.csv" 2>&1 || true

start=$(date +%s)
# name, exit status, seconds (the summary reads it); a GPU_CHECK_PARTS rerun into the same OUT keeps the other rows
if [ -n "${GPU_CHECK_PARTS:-}" ] && [ -f "$OUT/parts.tsv" ]; then
  awk -F'\t' -v rerun=",$PARTS," 'index(rerun, "," $1 ",") == 0' "$OUT/parts.tsv" > "$OUT/parts.tsv.kept"
  mv "$OUT/parts.tsv.kept" "$OUT/parts.tsv"
else
  : > "$OUT/parts.tsv"
fi
part() {  # part NAME TIMEOUT_S CMD... — stdout to $OUT/NAME.out, stderr to $OUT/NAME.err
  local name=$1 limit=$2 t0 rc left
  shift 2
  case ",$PARTS," in *",$name,"*) ;; *) return 0 ;; esac
  # what the budget leaves, less timeout's 15 s kill grace and ~5 s for the summary, and 30 s kept for the report
  # when it is to run after this part
  local reserve=0
  case ",$PARTS," in *,report,*) case "$name" in report|attention_backends|structured_outputs) ;; *) reserve=30 ;; esac ;; esac
  left=$(( BUDGET_S - ($(date +%s) - script_start) - 20 - reserve ))
  if [ "$left" -lt 30 ]; then
    echo "gpu_check: $name skipped: ${left}s left of GPU_CHECK_BUDGET_S=${BUDGET_S}" >&2
    printf '%s\tskipped\t0\n' "$name" >> "$OUT/parts.tsv"
    return 0
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  t0=$(date +%s)
  echo "gpu_check: $name (timeout ${limit}s)" >&2
  timeout --signal=INT --kill-after=15 "$limit" "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >> "$OUT/parts.tsv"
  echo "gpu_check: $name exit $rc after $(( $(date +%s) - t0 )) s" >&2
  [ "$rc" -eq 0 ] || tail -5 "$OUT/$name.err" >&2
}

part triton 30 "$PY" -c '
import torch, triton, triton.language as tl
@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
x = torch.zeros(1000, device="cuda")
add_one[(4,)](x, 1000, BLOCK=256)
assert x.sum().item() == 1000, x.sum().item()
print("triton", triton.__version__, "launched a kernel on", torch.cuda.get_device_name())'

part hw_probe 60 "$PY" -m accelkit hw probe --device cuda --quick --json
cp "$OUT/hw_probe.out" "$OUT/hw_probe.json" 2>/dev/null || true

# the engine's GPU tests first (issue 12's exactness with CUDA graphs on and off); the durations say what took time
part pytest_gpu 200 "$PY" -m pytest -q -m gpu tests/gpu/test_serve_gpu.py \
  $(ls tests/gpu/test_*.py | grep -v '/test_serve_gpu\.py$') -p no:cacheprovider -rs \
  --durations=0 --junitxml="$OUT/pytest-gpu.xml"

# writes its JSON after each system, so a timeout keeps the systems already measured
part serve_throughput 210 "$PY" benchmarks/serve_throughput.py --device cuda --out "$OUT/serve_throughput_cuda.json"

part serve_qwen3_moe 150 "$PY" benchmarks/serve_real_shapes.py --model qwen3-moe --device cuda \
  --out "$OUT/serve_qwen3_moe.json"
part serve_fp8_checkpoint 150 "$PY" benchmarks/serve_real_shapes.py --model llama-fp8 --device cuda \
  --out "$OUT/serve_fp8_checkpoint.json"

part llm_train_1b_fp8 180 "$PY" -m accelkit bench llm-train --model benchmarks/configs/llama-1b-shape.json \
  --batch-size 8 --seq-len 2048 --precision bf16,fp8 --fp8-scaling tensorwise,rowwise --device cuda \
  --no-interleave --warmup 9 --warmup-time 0.5 --min-iterations 10 --min-time 2 --json
cp "$OUT/llm_train_1b_fp8.out" "$OUT/bench_llm_train_1b_fp8.json" 2>/dev/null || true

# the "SD3 FP8 raises images/s and cuts energy" check (docs/bench.md, text-to-image): one after another, so each
# variant's J/image is its own; the fp32 reference (for the image gate) is built first and freed
part sd3_medium_fp8 240 "$PY" -m accelkit bench diffusion --arch sd3 --size full --height 512 --width 512 \
  --precision bf16,fp8 --device cuda --no-interleave --warmup 2 --warmup-time 0 --min-iterations 5 --min-time 5 --json
cp "$OUT/sd3_medium_fp8.out" "$OUT/bench_sd3_medium_fp8.json" 2>/dev/null || true

part reference_quick 200 "$PY" -m accelkit bench suite reference --quick --device cuda --json
cp "$OUT/reference_quick.out" "$OUT/bench_reference_quick.json" 2>/dev/null || true

part report 60 "$PY" -m accelkit report --out "$OUT/report.html" --json

part attention_backends 120 "$PY" benchmarks/attention_backends.py --out "$OUT/attention_backends.json"

part structured_outputs 240 "$PY" benchmarks/structured_outputs.py --device cuda --dtype bfloat16 \
  --shape smollm2-135m --repeats 3 --out "$OUT/structured_outputs_cuda_smollm2-135m.json"

"$PY" scripts/gpu_results.py summarize "$OUT" --seconds "$(( $(date +%s) - start ))"
status=$?
exit "$status"
