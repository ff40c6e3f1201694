"""A tensor autograd saved for the backward, modified in place after: the forward runs,
and the backward of an output reading it raises eager's error."""

from __future__ import annotations

import pytest
import torch

from aot_autograd import aot_function, default_partition, min_cut_rematerialization_partition


def _divide_then_mutate(mutate):
    def fn(a, b):
        v = b - a
        out = b / v  # saves v
        mutate(v)
        return out, b.sin()

    return fn


def _exp_then_mutate(mutate):
    def fn(a, b):
        v = (b * a).exp()  # saves its own output
        mutate(v)
        return v * 2, b.sin()

    return fn


MUTATIONS = {
    "mul_": lambda v: v.mul_(2),
    "unsqueeze_": lambda v: v.unsqueeze_(-1),
    "squeeze_": lambda v: v.squeeze_(),
    "transpose_": lambda v: v.transpose_(0, 2),
    "zero_of_a_view": lambda v: v[0].zero_(),
}


def _inputs():
    a = torch.linspace(-1, 1, 6).reshape(3, 2, 1)
    b = (torch.linspace(2, 3, 6).reshape(3, 2, 1)).requires_grad_()
    return a, b


def _grad_or_error(outputs, b):
    b.grad = None
    try:
        outputs.sum().backward(retain_graph=True)
    except RuntimeError as error:
        return error
    return b.grad


@pytest.mark.parametrize("make", [_divide_then_mutate, _exp_then_mutate])
@pytest.mark.parametrize("mutate", MUTATIONS.values(), ids=MUTATIONS.keys())
def test_backward_raises_where_a_saved_tensor_was_modified_in_place(make, mutate):
    fn = make(mutate)
    compiled = aot_function(fn, lambda gm, _: gm)
    a, b = _inputs()
    eager_out = fn(a, b)
    compiled_out = compiled(a, b)
    for eager, got in zip(eager_out, compiled_out):
        torch.testing.assert_close(got, eager)
    # the output reading the modified tensor: eager's backward raises, and so does ours
    eager_error = _grad_or_error(eager_out[0], b)
    assert isinstance(eager_error, RuntimeError)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        compiled_out[0].sum().backward()
    # the output not reading it keeps its gradient
    torch.testing.assert_close(_grad_or_error(compiled_out[1], b), _grad_or_error(eager_out[1], b))


def test_saved_tensor_modified_before_it_is_saved_keeps_its_gradient():
    def fn(a, b):
        v = b - a
        v.unsqueeze_(0).mul_(2)
        return b / v

    compiled = aot_function(fn, lambda gm, _: gm)
    a, b = _inputs()
    torch.testing.assert_close(
        _grad_or_error(compiled(a, b), b).clone(), _grad_or_error(fn(a, b), b).clone()
    )


def test_program_names_the_inputs_each_outputs_eager_backward_reads():
    from aot_autograd.program import trace_program

    def fn(x, w, b):
        # sin saves x; mul saves both operands; a scale and an add save nothing
        return x.sin(), x * w, (b + 1) * 2, (x[0] * 3).cos()

    x, w, b = (torch.randn(3, 3, requires_grad=True) for _ in range(3))
    program = trace_program(fn, [x, w, b], joint=True)
    assert program.saved_input_readers == (
        (0, frozenset({0, 1})),  # x: read by sin's and mul's backward
        (1, frozenset({1})),  # w: by mul's
    )


def test_write_into_an_input_after_the_call_raises_where_eager_backward_reads_it():
    compiled = aot_function(lambda x: (x.sin(), x.cos(), x * 2), fw_compiler=lambda gm, ex: gm)
    for which, raises in ((0, True), (1, True), (2, False)):
        x = torch.randn(4, requires_grad=True)
        y = x * 1
        outs = compiled(y)
        with torch.no_grad():
            y.zero_()
        if raises:
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                outs[which].sum().backward()
        else:
            outs[which].sum().backward()
            torch.testing.assert_close(x.grad, torch.full((4,), 2.0))


# Outputs, one of which the forward saves (exp saves its result), written in place by
# the caller after the call: eager raises only for a backward reaching the node saving
# it. (name: (fn, how the caller writes the saved output, which output is written))
WRITTEN_SAVED_OUTPUTS = {
    "exp_beside_scale": (lambda x: (x.exp(), x * 3), 0),
    "exp_of_a_view_beside_scale": (lambda x: (x.exp().t(), x * 3), 0),
    "scale_beside_tanh": (lambda x: (x * 3, x.tanh()), 1),
    "sigmoid_beside_sum": (lambda x: (x.sigmoid(), x.sum(0)), 0),
    "tanh_beside_sin": (lambda x: (x.tanh(), x.sin()), 0),
}


@pytest.mark.parametrize("partition", [default_partition, min_cut_rematerialization_partition])
@pytest.mark.parametrize("loss_of", [0, 1, "both"])
@pytest.mark.parametrize("case", sorted(WRITTEN_SAVED_OUTPUTS))
def test_write_into_a_saved_output_raises_only_where_its_backward_runs(case, loss_of, partition):
    fn, written = WRITTEN_SAVED_OUTPUTS[case]
    compiled = aot_function(fn, lambda gm, _: gm, partition_fn=partition)

    def run(f):
        x = torch.linspace(-1, 1, 6).reshape(2, 3).requires_grad_()
        outs = f(x)
        with torch.no_grad():
            outs[written].mul_(2)
        taken = outs if loss_of == "both" else [outs[loss_of]]
        try:
            sum(o.sum() for o in taken).backward()
        except RuntimeError as error:
            return error
        return x.grad

    expected, actual = run(fn), run(compiled)
    if isinstance(expected, RuntimeError):
        assert isinstance(actual, RuntimeError), actual
        assert "modified by an inplace operation" in str(actual)
    else:
        torch.testing.assert_close(actual, expected)


def test_compiled_function_called_inside_disable_saved_tensors_hooks_runs_as_eager():
    """Eager refuses only pushing saved-tensor hooks there; the trace's own hooks are not
    the caller's, and the disabling holds again after the call."""

    def fn(x):
        return x.exp().sin(), x * 2

    compiled = aot_function(fn, lambda gm, _: gm)
    grads = []
    for f in (fn, compiled):
        x = torch.linspace(-1, 1, 6, requires_grad=True)
        with torch.autograd.graph.disable_saved_tensors_hooks("hooks are off here"):
            a, b = f(x)
            (a.sum() + b.sum()).backward()
            with pytest.raises(RuntimeError, match="hooks are off here"):
                with torch.autograd.graph.save_on_cpu():
                    pass
        grads.append(x.grad)
    torch.testing.assert_close(grads[1], grads[0])
    assert torch._C._autograd._saved_tensors_hooks_is_enabled()
