"""Custom torch.autograd.Functions and programs calling them, shared by the capture tests
and the end-to-end tests of ember's backends.

Most backwards differ from the true derivative (a straight-through round, a reversed
gradient, a scaled one), so a result equal to eager's shows the user's backward ran.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

SCALE = 3.0
CALLS: list[int] = []


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x  # not the derivative: shows this backward ran


class StraightThroughRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class ReverseGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.weight = weight  # a number kept on ctx
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.neg() * ctx.weight, None


class ScaledByGlobal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.sum()

    @staticmethod
    def backward(ctx, grad):
        return grad.expand(ctx.shape) * SCALE


class TwoOutputs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        ctx.needs = ctx.needs_input_grad
        return x * y, x + y

    @staticmethod
    def backward(ctx, grad_product, grad_sum):
        x, y = ctx.saved_tensors
        grad_x = grad_product * y + grad_sum if ctx.needs_input_grad[0] else None
        grad_y = grad_product * x * 2 + grad_sum if ctx.needs_input_grad[1] else None
        return grad_x, grad_y


class WithIndices(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        values, indices = x.max(dim=0)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.size = x.shape[0]
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        out = torch.zeros(ctx.size, grad_values.shape[0], dtype=grad_values.dtype)
        return out.scatter(0, indices.unsqueeze(0), grad_values.unsqueeze(0) * 2)


class NoMaterialize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x.clone(), x.clone()

    @staticmethod
    def backward(ctx, grad_a, grad_b):
        total = torch.zeros(())
        if grad_a is not None:
            total = total + grad_a * 2
        if grad_b is not None:
            total = total + grad_b * 5
        return total


class ClipGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bound):
        ctx.bound = bound
        return x.clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        return grad.clamp(-ctx.bound, ctx.bound), None


class SetupContextStyle(torch.autograd.Function):
    @staticmethod
    def forward(x, power):
        return x**power

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, power = inputs
        ctx.save_for_backward(x)
        ctx.power = power

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.power * x ** (ctx.power - 1) + 1, None


class VmapStyle(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out * 2


class DirtyInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 7


class NonTensorOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2, 4

    @staticmethod
    def backward(ctx, grad, _):
        return grad * 3


class PrintsInForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        print("forward")
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad


class WritesGlobalInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        CALLS.append(1)
        return grad


class DataDependentBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        if grad.sum() > 0:
            return grad * 2
        return grad


class DataDependentForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2 if x.sum().item() > 0 else x

    @staticmethod
    def backward(ctx, grad):
        return grad


def square_of_sin(x):
    return Square.apply(x.sin()) + 1


def straight_through(x):
    return StraightThroughRound.apply(x * 4) / 4


def reversed_gradient(x):
    return ReverseGradient.apply(x.cos(), 0.5) * 2


def scaled_by_global(x):
    return ScaledByGlobal.apply(x * 2) + 1


def two_outputs(x, y):
    product, total = TwoOutputs.apply(x.sin(), y)
    return product + total


def max_with_indices(x):
    values, indices = WithIndices.apply(x * 1)
    return values * 2, indices


def one_of_two_used(x):
    a, b = NoMaterialize.apply(x + 1)
    return a.sum()


def clipped(x):
    return ClipGradient.apply(x * 10, 0.5).sum()


def setup_context_style(x):
    return SetupContextStyle.apply(x + 1, 3)


def vmap_style(x):
    return VmapStyle.apply(x * 2).sum()


def dirty_in_place(x):
    y = x * 1
    return DirtyInPlace.apply(y) + 1


def dirty_input_buffer(x, buffer):
    y = DirtyInPlace.apply(buffer)  # the frame's input written in place
    return y + x, buffer * 1


def dirty_then_read_again(x):
    y = x * 1
    z = DirtyInPlace.apply(y)
    return z + y, y


def non_tensor_output(x):
    y, n = NonTensorOutput.apply(x + 1)
    return y * n


def reversed_gradient_of_input(x, weight):
    return ReverseGradient.apply(x, weight)  # a view of the input, returned


def reversed_gradient_returned(x):
    return ReverseGradient.apply(x * 1, 0.5).view(-1)  # a view of an intermediate


def chained(x):
    return ReverseGradient.apply(Square.apply(x), 2.0).sum()


def prints_in_forward(x):
    return PrintsInForward.apply(x.sin()) + 1


def writes_global_in_backward(x):
    return WritesGlobalInBackward.apply(x.sin()) + 1


def data_dependent_backward(x):
    return DataDependentBackward.apply(x.sin()) + 1


def data_dependent_forward(x):
    return DataDependentForward.apply(x.sin()) + 1


def one(shape=(4, 3)):
    return lambda: (torch.randn(*shape, requires_grad=True),)


# program, maker of its arguments: captured into one graph
CAPTURED = [
    (square_of_sin, one()),
    (straight_through, one()),
    (reversed_gradient, one()),
    (scaled_by_global, one()),
    (two_outputs, lambda: (torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True))),
    (two_outputs, lambda: (torch.randn(3, requires_grad=True), torch.randn(3))),
    (max_with_indices, one()),
    (one_of_two_used, one()),
    (clipped, one()),
    (setup_context_style, one()),
    (vmap_style, one()),
    (dirty_in_place, one()),
    (dirty_then_read_again, one()),
    (non_tensor_output, one()),
    (chained, one()),
    (reversed_gradient_of_input, lambda: (torch.randn(4, 3, requires_grad=True), 0.25)),
    (reversed_gradient_returned, one()),
]

# programs whose Function takes no tensor that requires grad: its forward is traced in
# place, as torch.compile traces it
INLINED = [
    (dirty_input_buffer, lambda: (torch.randn(3, requires_grad=True), torch.ones(3))),
]

# programs whose Function call is not captured: the graph breaks around it
BROKEN = [
    (prints_in_forward, one()),
    (writes_global_in_backward, one()),
    (data_dependent_backward, one()),
    (data_dependent_forward, one()),
]


def first(value):
    return value[0] if isinstance(value, tuple) else value


def check_values_and_gradients(compiled, fn, make_args, calls=2):
    """`compiled` against `fn` on fresh arguments: outputs, then the inputs' grads of the
    first output's sum (the user's backward must run, not a derivative worked out)."""
    import contextlib
    import io

    from dynamo_capture.testing import assert_same, clone_inputs

    for _ in range(calls):
        args = make_args()
        eager_args, compiled_args = clone_inputs(args), clone_inputs(args)
        with contextlib.redirect_stdout(io.StringIO()):
            expected = fn(*eager_args)
            got = compiled(*compiled_args)
            assert_same(got, expected)
            first(expected).sum().backward()
            first(got).sum().backward()
        for eager_arg, compiled_arg in zip(eager_args, compiled_args, strict=True):
            if isinstance(eager_arg, torch.Tensor) and eager_arg.requires_grad:
                torch.testing.assert_close(compiled_arg.grad, eager_arg.grad)
