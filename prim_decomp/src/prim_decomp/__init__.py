"""prim_decomp: the ember_prims operator set and swappable ATen decomposition tables.

Stable API: everything in `__all__`.
"""

__version__ = "0.1.0"

__all__: list[str] = []
