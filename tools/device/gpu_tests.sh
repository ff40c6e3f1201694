#!/usr/bin/env bash
# The CUDA-using test files of inductor_codegen (GPU 0) and ember, aot_autograd (GPU 1), each
# package from its own folder with pytest-xdist; failures and the summary line per part last.
#     bash tools/device/gpu_tests.sh   (logs under $OUT)
set -u
export PYTHONPATH=$PWD/guards/src:$PWD/dynamo_capture/src:$PWD/prim_decomp/src:$PWD/aot_autograd/src:$PWD/inductor_codegen/src:$PWD/packages/ember/src
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
git log --oneline -1
ind=$(grep -l -E "cuda" inductor_codegen/tests/test_*.py | tr '\n' ' ')
emb=$(grep -l -E "cuda" packages/ember/tests/test_*.py | tr '\n' ' ')
aot=$(grep -l -E "cuda" aot_autograd/tests/test_*.py | tr '\n' ' ')
(cd inductor_codegen && CUDA_VISIBLE_DEVICES=0 timeout 480 python -m pytest -q -n 10 -p no:cacheprovider $(echo $ind | sed 's#inductor_codegen/##g') > $OUT/ind.txt 2>&1) &
(cd packages/ember && CUDA_VISIBLE_DEVICES=1 timeout 480 python -m pytest -q -n 8 -p no:cacheprovider $(echo $emb | sed "s#packages/ember/##g") > $OUT/emb.txt 2>&1; cd ../..; cd aot_autograd && CUDA_VISIBLE_DEVICES=1 timeout 200 python -m pytest -q -n 4 -p no:cacheprovider $(echo $aot | sed 's#aot_autograd/##g') > $OUT/aot.txt 2>&1) &
wait
for f in ind emb aot; do echo "== $f"; grep -E "^FAILED|^ERROR" $OUT/$f.txt | head -20; tail -1 $OUT/$f.txt; done
