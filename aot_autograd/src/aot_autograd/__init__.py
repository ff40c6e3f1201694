"""aot_autograd: joint forward/backward ATen graphs, functionalization and partitioning.

Stable API: everything in `__all__`.
"""

__version__ = "0.1.0"

__all__: list[str] = []
