"""Lazy modules (nn.LazyLinear, ...) called for the first time inside captured code.

As eagerly, the first call infers the parameters' shapes from the inputs: capture
runs the module's `_infer_parameters` on real tensors shaped like the example
inputs (only shapes and dtypes are read), which materializes the parameters and
turns the module into its regular class; the call is then traced as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.nn.modules.lazy import LazyModuleMixin

from dynamo_capture.errors import Unsupported
from dynamo_capture.operations import NotConstant, as_constant
from dynamo_capture.values import PythonValue, TensorValue, Value

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = ["initialize_lazy_module"]


def _stand_in(value: Value) -> Any:
    if isinstance(value, TensorValue):
        example = value.example
        if any(not isinstance(size, int) for size in example.shape):
            raise Unsupported("a lazy module's first call on a tensor of symbolic size")
        return torch.zeros(tuple(example.shape), dtype=example.dtype, device=example.device)
    try:
        return as_constant(value)
    except NotConstant:
        raise Unsupported("a lazy module's first call on values known only when it runs") from None


def initialize_lazy_module(
    tx: Translator, module_value: PythonValue, args: list[Value], kwargs: dict[str, Value]
) -> None:
    """Materialize the parameters of a lazy module not called before, from the inputs."""
    module = module_value.obj
    if not (isinstance(module, LazyModuleMixin) and module.has_uninitialized_params()):
        return
    real_args = tuple(_stand_in(arg) for arg in args)
    real_kwargs = {name: _stand_in(value) for name, value in kwargs.items()}
    with torch.no_grad():
        module._infer_parameters(module, real_args, real_kwargs)
