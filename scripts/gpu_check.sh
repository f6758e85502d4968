#!/usr/bin/env bash
# GPU checks in under 5 minutes on one GPU: the `gpu`-marked tests (CUDA events, fp8 via torchao on SM89+,
# NVML energy, CUDA memory; the exporter's NVML path with DCGM names) and a small precision matrix
# through the real CLI.
# Everything lands as files under $OUT (default ./gpu-check-out): pytest results and bench JSON.
#   OUT=/tmp/out scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
export ACCELKIT_HOME="$OUT/accelkit-home"

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
"$PY" -c 'import accelkit' 2>/dev/null || "$PY" -m pip install -q -e . >/dev/null
"$PY" -c 'import pytest' 2>/dev/null || "$PY" -m pip install -q pytest pytest-timeout >/dev/null
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$OUT/nvidia-smi.csv" 2>&1 || true

start=$(date +%s)
status=0
timeout 200 "$PY" -m pytest -q -m gpu tests/gpu -p no:cacheprovider --junitxml="$OUT/pytest-gpu.xml" \
  > "$OUT/pytest-gpu.txt" 2>&1 || status=$?
tail -5 "$OUT/pytest-gpu.txt"

# the real CLI, short loops
LOOP=(--warmup 5 --warmup-time 1 --min-iterations 20 --min-time 3)
timeout 150 "$PY" -m accelkit bench bert --size base --batch-size 32 --seq-len 128 \
  --precision fp32,tf32,bf16,fp16,fp8 "${LOOP[@]}" --json > "$OUT/bench_bert_matrix.json" 2> "$OUT/bench_bert_matrix.err" || status=$?
timeout 60 "$PY" -m accelkit report --out "$OUT/report.html" --json > "$OUT/report.json" 2>&1 || status=$?

"$PY" - "$OUT" "$status" "$start" <<'PYEOF'
import json, pathlib, sys, time
out, status, start = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
summary = {"exit_status": status, "seconds": time.time() - start}
try:
    doc = json.loads((out / "bench_bert_matrix.json").read_text())
    summary["bert_matrix"] = [
        {"name": v["name"], "samples_per_s": v["throughput"]["value"], "mfu": v["mfu"]["value"],
         "peak_source": v["mfu"]["peak_source"], "energy_j_per_item": v["energy_j_per_item"],
         "timer": v["timer"], "ratio": (v.get("comparison") or {}).get("ratio")}
        for v in doc["variants"]]
    summary["refused"] = doc["refused"]
except Exception as exc:  # noqa: BLE001
    summary["bert_matrix_error"] = repr(exc)
(out / "gpu_check.json").write_text(json.dumps(summary, indent=2))
print(json.dumps(summary, indent=2))
PYEOF
exit "$status"
