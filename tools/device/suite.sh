#!/usr/bin/env bash
# The whole test suite on the GPU machine: each package's tests in its own process, all at
# once, logs under $1 (default $OUT), then one summary line per package.
#     bash tools/device/suite.sh $OUT
set -u
out=${1:-$OUT}
root=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH=$root/guards/src:$root/dynamo_capture/src:$root/prim_decomp/src:$root/aot_autograd/src:$root/inductor_codegen/src:$root/packages/ember/src:${PYTHONPATH:-}
cd "$root"
packages="guards dynamo_capture prim_decomp aot_autograd inductor_codegen packages/ember"
for package in $packages; do
    log=$out/tests_$(basename "$package").txt
    timeout "${SUITE_TIMEOUT:-420}" python -m pytest -q -p no:cacheprovider "$package/tests" >"$log" 2>&1 &
done
wait
for package in $packages; do
    log=$out/tests_$(basename "$package").txt
    printf '%-18s %s\n' "$(basename "$package")" "$(tail -1 "$log")"
done
