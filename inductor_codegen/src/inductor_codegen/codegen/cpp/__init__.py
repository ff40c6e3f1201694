"""C++/OpenMP kernels for CPU tensors: kernel text, scatters, prelude, build.

kernel.py    a fused loop kernel as a C++ function (KernelCodegen)
scatter.py   a scatter kernel: a fill pass, then a scatter pass
prelude.py   the helpers every kernel file includes
vector_math.py  math library calls: one libmvec routine at every position of a loop
build.py     compile in parallel through the disk cache, load with ctypes
"""
