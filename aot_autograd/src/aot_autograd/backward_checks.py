"""Checks of values that autograd's C++ backward formulas make, asserted at every backward.

Some formulas refuse a backward by reading values: `linalg_eig_backward` raises
"ill-defined" where the loss depends on the eigenvectors' phase (the imaginary part
of `diag(V^H gV)` is not zero). On fake tensors, and on any tensor subclass, the
formula skips the read, so a traced backward would return a gradient where eager
raises.

`BACKWARD_CHECKS` is a table keyed by the autograd node's name. Before the backward
is traced, every node of a table entry gets a hook (`Node.register_hook`) that calls
the entry with the node, its output gradients and an `assert_value(predicate, error,
message)` callback; the entry asserts with traced ops what eager checks. The hook
leaves the gradient to the C++ formula. Each assertion becomes a backward check of
the traced program (`TracedProgram.backward_assertions`: a boolean output of the
backward graph after the grads); the run time raises eager's error where one is not
all true.

    >>> f = aot_function(lambda x: torch.linalg.eig(x)[1].real.sum(), fw_compiler=...)
    >>> f(torch.randn(3, 3, requires_grad=True)).backward()  # RuntimeError: ... ill-defined.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from aot_autograd.backward_formulas import autograd_nodes

__all__ = ["BACKWARD_CHECKS", "check_backward_values"]

AssertValue = Callable[[torch.Tensor, str, str], None]
BackwardCheck = Callable[[Any, tuple, AssertValue], None]
BACKWARD_CHECKS: dict[str, BackwardCheck] = {}


def _register(name: str) -> Callable[[BackwardCheck], BackwardCheck]:
    def register(check: BackwardCheck) -> BackwardCheck:
        if name in BACKWARD_CHECKS:
            raise ValueError(f"backward check for {name} registered twice")
        BACKWARD_CHECKS[name] = check
        return check

    return register


def _eigenvector_phase_check(kernel: str) -> BackwardCheck:
    """eig's and eigh's: with complex eigenvectors V and their gradient gV, the loss must
    not depend on each eigenvector's phase: `allclose(imag(diag(V^H gV)), 0, 1e-2, 1e-2)`."""
    message = (
        f"{kernel}: The eigenvectors in the complex case are specified up to multiplication "
        "by e^{i phi}. The specified loss function depends on this quantity, so it is "
        "ill-defined."
    )

    def check(node: Any, grad_outputs: tuple, assert_value: AssertValue) -> None:
        grad_vectors = grad_outputs[1] if len(grad_outputs) > 1 else None
        vectors = node._saved_eigenvectors
        if grad_vectors is None or not vectors.is_complex():
            return  # eager checks only where the eigenvectors' gradient is defined
        projected = torch.matmul(vectors.mH, grad_vectors.to(vectors.dtype))
        imaginary = projected.diagonal(0, -2, -1).imag
        # allclose(imaginary, 0, rtol=1e-2, atol=1e-2): NaN fails it, as there
        assert_value(imaginary.abs().le(1e-2).all(), "RuntimeError", message)

    return check


_register("LinalgEigBackward0")(_eigenvector_phase_check("linalg_eig_backward"))
_register("LinalgEighBackward0")(_eigenvector_phase_check("linalg_eigh_backward"))


def _hook(check: BackwardCheck, node: Any, assert_value: AssertValue) -> Callable:
    def run(grad_inputs: tuple, grad_outputs: tuple) -> None:
        check(node, grad_outputs, assert_value)

    return run


def check_backward_values(outputs: Sequence[torch.Tensor], assert_value: AssertValue) -> list[Any]:
    """Hook every node of `BACKWARD_CHECKS` in the outputs' autograd graph, asserting
    through `assert_value` as the backward runs. Returns the hook handles (remove them
    once the backward ran)."""
    handles = []
    for node in autograd_nodes([t.grad_fn for t in outputs]):
        check = BACKWARD_CHECKS.get(node.name())
        if check is not None:
            handles.append(node.register_hook(_hook(check, node, assert_value)))
    return handles
