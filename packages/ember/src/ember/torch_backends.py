"""ember's pipelines as torch.compile backends.

Registered through torch's `torch_dynamo_backends` entry point group (see
pyproject.toml), so that once ember is installed

    torch.compile(model, backend="ember")             # aot_autograd + prim_decomp + inductor_codegen
    torch.compile(model, backend="ember_aot_eager")   # aot_autograd's ATen graphs, run eagerly

torch's Dynamo captures the graph and hands it here; ember compiles it as its own
"inductor" / "aot_eager" backend does. `mode` and `options` of torch.compile are
ember's (`ember.config.MODES` / `OPTIONS`). Stable API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from ember.backends import make_aot_eager, make_inductor
from ember.config import resolve_options

__all__ = ["ember_aot_eager", "ember_inductor"]


def ember_inductor(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    *,
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """The `ember` backend of torch.compile: ember's inductor pipeline.

    torch.compile(model, backend="ember", mode="max-autotune")
    """
    return make_inductor(resolve_options(mode, options, "inductor"))(gm, example_inputs)


def ember_aot_eager(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    *,
    options: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """The `ember_aot_eager` backend of torch.compile: aot_autograd's graphs, eager kernels."""
    return make_aot_eager(resolve_options(None, options, "aot_eager"))(gm, example_inputs)
