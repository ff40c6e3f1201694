"""A dispatch mode that records the shapes of the tensors `copy_` writes.

Copy-backs of mutated inputs are `Tensor.copy_` calls, or one `torch._foreach_copy_`
for a group; tests use the shapes to tell a whole-cache copy from none. A dispatch mode
(not a torch function mode, which compiled entries are guarded on) sees the calls the
compiled code makes without changing what is compiled.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


class CopyShapes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is aten.copy_.default:
            self.shapes.append(tuple(args[0].shape))
        elif func is aten._foreach_copy_.default:  # copy-backs grouped in one call
            self.shapes.extend(tuple(t.shape) for t in args[0])
        return func(*args, **(kwargs or {}))
