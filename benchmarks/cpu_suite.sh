#!/usr/bin/env bash
# The CPU model suite (benchmarks/models.py: mlp, cnn, gpt2, bert, llama, t5, vit),
# inference and training, eager vs ember.compile vs torch.compile in one run, at two
# threads pinned to cores 0 and 1 (taskset, where there is one). Each row is checked
# against a float64 eager run, and first-call (compile) times come from cold caches;
# the markdown table at the end is the one benchmarks/RESULTS.md takes.
#
#     benchmarks/cpu_suite.sh                  every model, both modes
#     benchmarks/cpu_suite.sh gpt2 bert        only these models
#     EMBER_BENCH_REPEATS=50 EMBER_BENCH_MODES=inference benchmarks/cpu_suite.sh
#     EMBER_BENCH_CORES=2,3 benchmarks/cpu_suite.sh      other cores
#
# Runs the code of the checkout it sits in (its packages' src folders go first on
# PYTHONPATH). The JSON of every row goes to $EMBER_BENCH_JSON (default
# cpu_suite.json in the current folder).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cores="${EMBER_BENCH_CORES:-0,1}"
threads="$(tr ',' '\n' <<<"$cores" | wc -l | tr -d ' ')"

pythonpath="$root/packages/ember/src"
for package in guards dynamo_capture prim_decomp aot_autograd inductor_codegen; do
  pythonpath="$pythonpath:$root/$package/src"
done
export PYTHONPATH="$pythonpath${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS="$threads" EMBER_BENCH_THREADS="$threads"
export EMBER_BENCH_JSON="${EMBER_BENCH_JSON:-$PWD/cpu_suite.json}"

pin=()
if command -v taskset >/dev/null 2>&1 && taskset -c "$cores" true 2>/dev/null; then
  pin=(taskset -c "$cores")
else
  echo "note: not pinned (no taskset, or cores $cores not available); $threads threads" >&2
fi
exec "${pin[@]}" "${PYTHON:-python}" "$root/benchmarks/model_bench.py" "$@"
