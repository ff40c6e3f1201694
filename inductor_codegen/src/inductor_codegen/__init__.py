"""inductor_codegen: loop-level IR, fusion, and Triton / C++-OpenMP code generation.

Stable API: everything in `__all__`.
"""

__version__ = "0.1.0"

__all__: list[str] = []
