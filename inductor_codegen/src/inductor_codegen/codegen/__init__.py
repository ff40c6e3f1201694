"""Code generation: one generator of kernels and wrappers, two languages.

codegen/op_text.py      op spellings shared by both languages
codegen/wrapper.py      the Python wrapper: allocate, launch, free at last use
codegen/cpp/            C++/OpenMP kernels, their prelude and build
codegen/triton/         Triton kernels, templates, launch and device lowerings
"""
