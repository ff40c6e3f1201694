#!/usr/bin/env bash
# torch's OpInfo database through ember.compile on the GPU: forward float32 / bfloat16 / dynamic on
# GPU 0, gradients float32 / bfloat16 on GPU 1; failures per part last. The database imports
# expecttest: where the machine lacks it, unpack its wheel into tools/device/pydeps first.
#     bash tools/device/opinfo_gpu.sh   (logs under $OUT)
set -u
R=$PWD
export PYTHONPATH=$R/guards/src:$R/dynamo_capture/src:$R/prim_decomp/src:$R/aot_autograd/src:$R/inductor_codegen/src:$R/packages/ember/src:$R/tools/device/pydeps
export EMBER_FULL_OPINFO=1 EMBER_OPINFO_DEVICE=cuda
cd packages/ember
T="python -m pytest -q -n 15 -p no:cacheprovider tests/test_end_to_end_opinfo.py -rf"
(CUDA_VISIBLE_DEVICES=0 timeout 200 $T -k test_forward_through > $OUT/fwd32.txt 2>&1
 CUDA_VISIBLE_DEVICES=0 EMBER_OPINFO_DTYPES=bfloat16 timeout 200 $T -k test_forward_through > $OUT/fwd16.txt 2>&1
 CUDA_VISIBLE_DEVICES=0 EMBER_OPINFO_DYNAMIC=1 timeout 200 $T -k test_forward_through > $OUT/fwddyn.txt 2>&1) &
(CUDA_VISIBLE_DEVICES=1 timeout 250 $T -k "grads and inductor" > $OUT/grads32.txt 2>&1
 CUDA_VISIBLE_DEVICES=1 EMBER_OPINFO_DTYPES=bfloat16 timeout 250 $T -k "grads and inductor" > $OUT/grads16.txt 2>&1) &
wait
for f in fwd32 fwd16 fwddyn grads32 grads16; do echo "== $f"; grep -E "^FAILED|^ERROR" $OUT/$f.txt | sed 's/tests.test_end_to_end_opinfo.py:://' | cut -c1-250 | head -25; tail -1 $OUT/$f.txt; done
