#!/usr/bin/env bash
# Runs pytest test ids many times in parallel loops, to show whether a failure is intermittent (or gone).
#
#   scripts/repeat_test.sh [-n RUNS] [-j LOOPS] [-o DIR] TEST_ID [TEST_ID ...]
#
# Each of the LOOPS loops (default 2) runs every TEST_ID in a fresh `python -m pytest` process, RUNS times in all
# per test id (default 200, split between the loops), so the loops load the machine as CI's two workers do. Every
# failed run keeps its whole output under DIR (default: a new temporary folder); the summary names each failure.
# Exits 1 when any run failed. PYTHON picks the interpreter (default: .venv/bin/python, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=200 loops=2 out=""
while getopts "n:j:o:h" opt; do
  case $opt in
    n) runs=$OPTARG ;;
    j) loops=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,10p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "error: give at least one pytest test id, e.g. tests/integration/test_x.py::test_y" >&2; exit 2; }
[[ $runs =~ ^[1-9][0-9]*$ && $loops =~ ^[1-9][0-9]*$ ]] || { echo "error: -n and -j take positive integers (got -n $runs -j $loops)" >&2; exit 2; }
py=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
out=${out:-$(mktemp -d -t repeat_test.XXXXXX)}
mkdir -p "$out"

loop() {  # loop number → one line per run: "<status> <test id> <run>"
  local l=$1 id n i log
  for id in "${ids[@]}"; do
    n=$(( runs / loops + (l <= runs % loops ? 1 : 0) ))
    for ((i = 1; i <= n; i++)); do
      log="$out/$(echo "$id" | tr '/:[]' '____').loop$l.run$i.log"
      if "$py" -m pytest -q -p no:cacheprovider -p no:randomly -n 0 "$id" >"$log" 2>&1; then
        echo "pass $id $l.$i"; rm -f "$log"
      else
        echo "FAIL $id $l.$i $log"
      fi
    done
  done
}

ids=("$@")
start=$(date +%s)
for ((l = 1; l <= loops; l++)); do loop "$l" > "$out/loop$l.txt" & done
wait
elapsed=$(( $(date +%s) - start ))

total=0 failed=0
for id in "${ids[@]}"; do
  p=$(cat "$out"/loop*.txt | grep -c "^pass $id " || true)
  f=$(cat "$out"/loop*.txt | grep -c "^FAIL $id " || true)
  total=$((total + p + f)); failed=$((failed + f))
  echo "$id: $p of $((p + f)) passed"
done
grep -h "^FAIL" "$out"/loop*.txt || true
echo "$((total - failed)) of $total runs passed in $loops parallel loops, ${elapsed} s; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); logs: $out"
[ "$failed" -eq 0 ]
