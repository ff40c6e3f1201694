#!/usr/bin/env bash
# Does the fuzzer find a silent mismatch? The fixed seeds 0..COUNT-1 split over the CPU cores,
# then fresh seeds until SECONDS pass, aot_eager and inductor on the CPU, and (with CUDA) a
# Triton slice on the GPU; a summary of every process's counts last.
#     COUNT=2000 SECONDS=240 CUDA_COUNT=100 bash tools/device/fuzz_sweep.sh $OUT
set -u
out=${1:-$OUT}
root=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH=$root/guards/src:$root/dynamo_capture/src:$root/prim_decomp/src:$root/aot_autograd/src:$root/inductor_codegen/src:$root/packages/ember/src:${PYTHONPATH:-}
jobs=${JOBS:-$(($(nproc --all) - 1))}  # before OMP_NUM_THREADS, which nproc honours
export OMP_NUM_THREADS=1 EMBER_CACHE_DIR=${EMBER_CACHE_DIR:-/tmp/ember-fuzz-cache}
cd "$root"
count=${COUNT:-2000} seconds=${SECONDS_FRESH:-240}
per=$(((count + jobs - 1) / jobs))
fresh=$(date +%s)
for ((j = 0; j < jobs; j++)); do
    first=$((j * per)) n=$((count - j * per < per ? count - j * per : per))
    (
        [ "$n" -gt 0 ] && python tools/fuzz/fuzz.py --seed "$first" --count "$n" --backend aot_eager,inductor \
            --shrink-budget 30 --out "$out/fixed_$j" --quiet >"$out/fixed_$j.txt" 2>&1
        python tools/fuzz/fuzz.py --seed $((fresh * 100 + j * 1000000)) --seconds "$seconds" \
            --backend aot_eager,inductor --shrink-budget 30 --out "$out/fresh_$j" --quiet >"$out/fresh_$j.txt" 2>&1
    ) &
done
if python -c "import torch; raise SystemExit(not torch.cuda.is_available())"; then
    python tools/fuzz/fuzz.py --device cuda --seed 0 --count "${CUDA_COUNT:-100}" --backend inductor \
        --shrink-budget 30 --out "$out/cuda" --quiet >"$out/cuda.txt" 2>&1 &
fi
wait
python - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for part in ("fixed", "fresh", "cuda"):
    programs, counts, reproducers = 0, {}, []
    for summary in sorted(out.glob(f"{part}*/summary.json")):
        data = json.loads(summary.read_text())
        programs += data["programs"]
        for key, value in data["counts"].items():
            counts[key] = counts.get(key, 0) + value
        reproducers += [f'{r["kind"]} {r["backend"]} seed {r["seed"]}: {r["mismatch"][:160]}'
                        for r in data["reproducers"]]
        programs_crashed = data.get("crashes", [])
        if programs_crashed:
            reproducers.append(f"crashed seeds: {programs_crashed}")
    print(f"{part}: {programs} programs, mismatches {counts}")
    for r in reproducers:
        print("   ", r)
PY
