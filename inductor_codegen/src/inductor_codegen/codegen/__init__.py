"""Code generation: one generator of kernels and wrappers, two languages.

codegen/kernel.py       what every kernel printer shares (parameters, names, scopes)
codegen/ops.py          the op table: one row an op, a spelling per language
codegen/op_text.py      call and infix, the shapes spellings share
codegen/wrapper.py      the one wrapper generator: allocate, launch, free at last
                        use; a device overrides its hooks
codegen/cpp/            C++/OpenMP kernels, their prelude and build
codegen/triton/         Triton kernels, templates, launch, device lowerings, and
                        the Triton driver
"""
