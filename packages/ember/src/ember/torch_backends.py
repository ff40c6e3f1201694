"""ember's pipelines as backends of torch's own compiler.

Registered through torch's `torch_dynamo_backends` entry point group (see
pyproject.toml) under two names, so that once ember is installed a model compiled by
torch with one of them as its backend runs ember's pipeline:

    backend="ember"             aot_autograd + prim_decomp + inductor_codegen
    backend="ember_aot_eager"   aot_autograd's ATen graphs, run eagerly

torch captures the graph and hands it here; ember compiles it as its own
"inductor" / "aot_eager" backend does. The `mode` and `options` torch passes on are
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
    """The `ember` backend: ember's inductor pipeline, with the `mode` (e.g.
    "max-autotune") and `options` torch's compiler was given."""
    return make_inductor(resolve_options(mode, options, "inductor"))(gm, example_inputs)


def ember_aot_eager(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    *,
    options: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """The `ember_aot_eager` backend of torch.compile: aot_autograd's graphs, eager kernels."""
    return make_aot_eager(resolve_options(None, options, "aot_eager"))(gm, example_inputs)
