"""C++/OpenMP kernels for CPU tensors: kernel text, scatters, prelude, build."""
