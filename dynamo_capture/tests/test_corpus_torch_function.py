"""Tensor subclasses, torch function overrides and rarely used tensor properties in
captured frames: subclasses keeping torch's default `__torch_function__` or turning it
off (made with `as_subclass`, given as arguments, nn.Parameter subclasses; their methods,
isinstance and type checks), `torch.overrides.has_torch_function*` and `is_tensor_like`
in user functions, and `.mT`, `.H`/`.mH`, `.real`/`.imag`, `.layout`,
`.is_contiguous(memory_format=)`, `.storage_offset()`, `.stride(dim)`, `.element_size()`,
`.data` reads and in-place writes, the `.requires_grad` setter and `.grad` reads and
writes on leaves.

Each program gives eager's results and torch.compile's graph and op counts (two calls
each, fresh arguments). A subclass defining its own `__torch_function__` has its override
run while capturing (test_corpus_torch_function_subclasses has those); operations of a
subclass keeping torch's default inside a DisableTorchFunction(Subclass) block break
the graph; the tests at the end check those against eager alone, and frames called
inside and outside a torch function mode (guarded: one graph each).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from tensor_subclasses import Passing, Unwrapping
from torch.overrides import handle_torch_function, has_torch_function
from torchcheck import check_like_torch, program_registry

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same

PROGRAMS, program = program_registry()


def r(*shape):
    return torch.randn(*shape)


class Default(torch.Tensor):
    def halved(self):
        return self / 2


class MyParam(nn.Parameter):
    pass


def ps(x):
    return x.as_subclass(Passing)


def pl(x):
    return x.as_subclass(Unwrapping)


def df(x):
    return x.as_subclass(Default)


@program(lambda: df(r(3)))
def s_default_add(x):
    return x + 1


@program(lambda: df(r(3)))
def s_default_result_type(x):
    y = x.sin()
    return y + 1 if type(y) is Default else y


@program(lambda: ps(r(3)))
def s_unwrap_as_subclass(x):
    return x.as_subclass(torch.Tensor) + 1


@program()
def m_as_subclass_default(x):
    return x.as_subclass(Default) * 2


@program()
def m_as_subclass_then_unwrap(x):
    y = x.as_subclass(Default) + 1
    return y.as_subclass(torch.Tensor) * 3


@program(lambda: MyParam(r(3)))
def p_param_subclass_add(x):
    return x + 1


@program(lambda: MyParam(r(3)))
def p_param_subclass_type(x):
    y = x * 2
    return y if type(y) is torch.Tensor else y + 1


@program(lambda: nn.Parameter(r(3)))
def p_param_isinstance(x):
    return x * 2 if isinstance(x, nn.Parameter) else x


@program(lambda: MyParam(r(3)))
def p_param_subclass_isinstance(x):
    return x * 2 if isinstance(x, MyParam) and isinstance(x, nn.Parameter) else x


@program(lambda: nn.Parameter(r(3)))
def p_param_requires_grad(x):
    return x * 2 if x.requires_grad else x


@program(lambda: MyParam(r(3), requires_grad=False))
def p_param_subclass_no_grad(x):
    return x * 2 if x.requires_grad else x + 1


@program(lambda: nn.Parameter(r(3)))
def p_param_data(x):
    return x.data * 2


@program(lambda: nn.Parameter(r(3)))
def p_param_detach_type(x):
    y = x.detach()
    return y + 1 if type(y) is torch.Tensor else y


def user_op(x):
    if has_torch_function((x,)):
        return handle_torch_function(user_op, (x,), x)
    return x * 2


def user_op_unary(x):
    if torch.overrides.has_torch_function_unary(x):
        return handle_torch_function(user_op_unary, (x,), x)
    return x + 3


class HandlesUser(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is user_op:
            return args[0].as_subclass(torch.Tensor) * 100
        return super().__torch_function__(func, types, args, kwargs or {})


@program()
def o_has_torch_function_plain(x):
    return user_op(x) + 1


@program()
def o_has_torch_function_unary_plain(x):
    return user_op_unary(x) + 1


@program()
def o_has_tf_variadic(x):
    return torch.overrides.has_torch_function_variadic(x, x)


@program()
def o_is_tensor_like(x):
    return x + 1 if torch.overrides.is_tensor_like(x) else x


@program()
def o_has_tf_constant(x):
    return x + (1 if has_torch_function((1, 2)) else 2)


@program(lambda: r(2, 3, 4))
def t_mT(x):
    return x.mT + 1


@program(lambda: r(2, 3))
def t_H_real(x):
    return x.H * 2


@program(lambda: torch.randn(2, 3, dtype=torch.complex64))
def t_H_complex(x):
    return x.H


@program(lambda: torch.randn(2, 3, dtype=torch.complex64))
def t_mH_complex(x):
    return x.mH * 2


@program(lambda: torch.randn(3, dtype=torch.complex64))
def t_real_imag(x):
    return x.real * 2 + x.imag


@program(lambda: torch.randn(3, dtype=torch.complex64))
def t_real_write(x):
    y = x.clone()
    y.real.mul_(2)
    return y


@program(lambda: torch.randn(3, dtype=torch.complex64))
def t_imag_abs(x):
    return x.imag.abs() + x.abs()


@program()
def t_real_of_real(x):
    return x.real + 1


@program()
def t_layout(x):
    return x + 1 if x.layout == torch.strided else x


@program()
def t_layout_is_sparse(x):
    return x * 2 if not x.is_sparse else x


@program(lambda: r(2, 3, 4, 5))
def t_is_contiguous_cl(x):
    return x + (1 if x.is_contiguous(memory_format=torch.channels_last) else 2)


@program(lambda: r(2, 3, 4, 5).contiguous(memory_format=torch.channels_last))
def t_is_contiguous_cl_true(x):
    return x + (1 if x.is_contiguous(memory_format=torch.channels_last) else 2)


@program(lambda: r(2, 3, 4, 5))
def t_to_channels_last(x):
    y = x.contiguous(memory_format=torch.channels_last)
    return y * (2 if y.is_contiguous(memory_format=torch.channels_last) else 3)


@program(lambda: r(4, 3))
def t_is_contiguous_t(x):
    return x.t() * (2 if x.t().is_contiguous() else 3)


@program(lambda: r(6))
def t_storage_offset(x):
    return x[2:] * x[2:].storage_offset()


@program(lambda: r(6)[1:])
def t_storage_offset_input(x):
    return x * x.storage_offset()


@program(lambda: r(3, 4))
def t_stride_dims(x):
    return x * x.stride(0) + x.stride(1) + x.stride(-1)


@program(lambda: r(3, 4))
def t_stride_tuple(x):
    s = x.t().stride()
    return x * s[0] + s[1]


@program()
def t_element_size(x):
    return x * x.element_size()


@program(lambda: torch.arange(3, dtype=torch.int16))
def t_element_size_int16(x):
    return x * x.element_size()


@program()
def t_itemsize_nbytes(x):
    return x * x.itemsize + x.nbytes


@program()
def t_data_read(x):
    return x.data + 1


@program(lambda: r(3).requires_grad_())
def t_data_read_grad(x):
    y = x.data * 2
    return y, y.requires_grad


@program(lambda: r(3).requires_grad_())
def t_data_mul_(x):
    x.data.mul_(2)
    return x * 1


@program()
def t_requires_grad_setter(x):
    y = x.clone()
    y.requires_grad = True
    return y * 2


@program()
def t_requires_grad_setter_leaf(x):
    y = torch.ones(3)
    y.requires_grad = True
    return (y * x).sum()


@program()
def t_requires_grad_underscore(x):
    y = torch.ones(3).requires_grad_()
    return y * x, y.requires_grad


@program(lambda: r(3).requires_grad_())
def t_grad_read_none(x):
    return x * 2 if x.grad is None else x


@program(lambda: _with_grad())
def t_grad_read(x):
    return x.grad * 2


@program(lambda: _with_grad())
def t_grad_clear(x):
    x.grad = None
    return x * 2


@program(lambda: _with_grad())
def t_grad_inplace(x):
    x.grad.mul_(3)
    return x.grad + 1


@program()
def t_is_leaf(x):
    y = x * 2
    return y + (1 if y.is_leaf else 2)


@program(lambda: r(3).requires_grad_())
def t_is_leaf_grad(x):
    y = x * 2
    return y + (1 if y.is_leaf else 2) + (1 if x.is_leaf else 4)


@program()
def t_grad_fn_none(x):
    return x + (1 if x.grad_fn is None else 2)


@program()
def t_names_none(x):
    return x + 1


@program()
def t_is_complex(x):
    return x * 2 if not x.is_complex() else x


@program(lambda: torch.randn(3, dtype=torch.complex64))
def t_view_as_real(x):
    return torch.view_as_real(x) * 2


@program()
def t_dim_order(x):
    return x + x.dim()


@program(lambda: r(2, 3))
def t_T_contig(x):
    return x.T.contiguous().stride(0) * x


@program()
def t_is_cpu(x):
    return x + (1 if x.is_cpu else 2)


@program()
def t_device_type(x):
    return x + (1 if x.device.type == "cpu" else 2)


@program()
def t_is_set_to(x):
    return x + (1 if x.is_set_to(x) else 2)


@program(lambda: r(3, 4))
def t_is_contiguous_slice(x):
    return x + (1 if x[:, 1:].is_contiguous() else 2)


@program()
def t_requires_grad_false_setter(x):
    y = torch.ones(3, requires_grad=True)
    y.requires_grad = False
    return y * x


def _with_grad():
    x = r(3).requires_grad_()
    x.grad = torch.ones(3)
    return x


@program(lambda: df(r(3)))
def s_default_requires_grad_setter(x):
    y = x.clone()
    y.requires_grad = True
    return y * 2, type(y).__name__


@program(lambda: df(r(3)))
def s_default_view_results(x):
    return x.detach(), x.clone(), x.view(3), x[0]


@program(lambda: df(r(3)), lambda: df(r(3)))
def s_default_two_inputs(x, y):
    return torch.cat([x, y]), torch.stack([x, y])


@program(lambda: df(r(3)))
def s_default_unbind(x):
    return x.unbind(0)


@program(lambda: df(r(3)))
def s_default_result_class_name(x):
    return x + len(type(x * 2).__name__)


@program(lambda: df(r(3)))
def s_default_isinstance(x):
    return x * 2 if isinstance(x, Default) else x


@program(lambda: df(r(3)))
def s_default_factories(x):
    return x.new_zeros(2), torch.zeros_like(x), x.new_tensor([1.0])


@program(lambda: df(r(2, 3)))
def s_default_functional(x):
    return torch.nn.functional.relu(x), torch.nn.functional.softmax(x, -1)


@program()
def t_requires_grad_setter_on_result(x):
    y = (x * 2).requires_grad_()
    y.requires_grad = False
    return y


@program(lambda: r(3).requires_grad_())
def t_requires_grad_setter_on_non_leaf_raises(x):
    y = x * 2
    y.requires_grad = False
    return y


@program(lambda: r(3, 4))
def t_is_contiguous_channels_last_2d(x):
    return x + (1 if x.is_contiguous(memory_format=torch.channels_last) else 2)


@program(lambda: r(2, 3, 4, 5))
def t_channels_last_strides(x):
    y = x.to(memory_format=torch.channels_last)
    return y.stride(), y + 1


@program(lambda: r(6))
def t_as_strided_storage_offset(x):
    y = x.as_strided((2,), (2,), 1)
    return y * y.storage_offset()


@program(lambda: r(4, 4))
def t_diagonal_stride_and_offset(x):
    y = x.diagonal()
    return y * y.stride(0) + y.storage_offset()


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_torch_function_program_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


def _against_eager(fn, *args):
    counter = CountingBackend()
    for _ in range(2):
        expected = fn(*args)
        assert_same(dynamo_capture.optimize(fn, backend=counter)(*args), expected)
    return counter


def test_disable_torch_function_subclass_block_gives_plain_tensors():
    """Inside DisableTorchFunctionSubclass, an operation on a subclass gives a plain
    tensor (the graph, run on the real subclass input, would give the subclass)."""

    def f(x):
        with torch._C.DisableTorchFunctionSubclass():
            y = x + 1
        return y * 2, type(y) is torch.Tensor

    _against_eager(f, torch.randn(3).as_subclass(Default))


def test_disable_torch_function_block_gives_plain_tensors():
    def f(x):
        with torch._C.DisableTorchFunction():
            y = x.sin()
        return y, type(y).__name__

    _against_eager(f, torch.randn(3).as_subclass(Default))


def test_subclass_under_disable_block_entered_outside_frame_keeps_eager_type():
    def f(x):
        return x + 1

    compiled = dynamo_capture.optimize(f, backend=CountingBackend())
    x = torch.randn(3).as_subclass(Default)
    with torch._C.DisableTorchFunctionSubclass():
        expected, got = f(x), compiled(x)
    assert_same(got, expected)
    assert_same(compiled(x), f(x))


def test_user_function_handed_to_passing_override():
    """`user_op` hands itself to Passing's override, whose default handling calls it
    again with subclass handling off (has_torch_function is False there): one graph.
    (torch.compile's has_torch_function answers True inside the override; it runs the
    frame eagerly.)"""
    x = torch.randn(3).as_subclass(Passing)
    _against_eager(lambda x: user_op(x) + 1, x)
    explained = dynamo_capture.explain(lambda x: user_op(x) + 1)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def test_has_torch_function_on_overriding_subclass_runs_its_override():
    """`has_torch_function` is True for a subclass with its own override: the user
    function hands the call to it (capture does not fold it to False)."""
    _against_eager(lambda x: user_op(x) + 1, torch.randn(3).as_subclass(HandlesUser))
    _against_eager(lambda x: user_op_unary(x) * 2, torch.randn(3).as_subclass(HandlesUser))


def test_unused_tensor_index_that_may_raise_stays_in_graph():
    """An unused slice of a tensor is dropped (as torch.compile drops it); an unused
    index by a tensor stays: out of range, it raises as eager does."""

    def f(x, i):
        x[i]
        return x + 1

    counter = _against_eager(f, torch.randn(3), torch.tensor([2]))
    compiled = dynamo_capture.optimize(f, backend=counter)
    with pytest.raises(IndexError):
        f(torch.randn(3), torch.tensor([5]))
    with pytest.raises(IndexError):
        compiled(torch.randn(3), torch.tensor([5]))


def test_subclass_with_own_torch_function_runs_its_override():
    """Operations on a subclass defining `__torch_function__` run its override while
    capturing (here it returns plain tensors): one graph."""

    def f(x, y):
        z = torch.relu(x) + y
        return z, type(z).__name__, isinstance(x, Unwrapping)

    args = (torch.randn(3).as_subclass(Unwrapping), torch.randn(3))
    _against_eager(f, *args)
    explained = dynamo_capture.explain(f)(*args)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


class _ScaledMulMode(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        return result + 100 if func in (torch.mul, torch.Tensor.mul) else result


def test_mode_stack_read_in_frame_is_guarded():
    """A frame compiled under a torch function mode that reads the mode stack is not
    reused outside the mode (nor the other way round)."""
    from torch.overrides import _get_current_function_mode_stack

    def f(x):
        return x + len(_get_current_function_mode_stack()), torch.mul(x, 2)

    counter = CountingBackend()
    compiled = dynamo_capture.optimize(f, backend=counter)
    x = torch.randn(3)
    for _ in range(2):
        with _ScaledMulMode():
            assert_same(compiled(x), f(x))
        assert_same(compiled(x), f(x))
    assert counter.frame_count == 2


def _mode_stack_depth(x):
    from torch.overrides import _get_current_function_mode_stack

    return x + len(_get_current_function_mode_stack())


def _sum_of_sines(x):
    return x.sin().sum()


def _in_place_product(x):
    y = x.clone()
    y.mul_(2)
    return y


@pytest.mark.parametrize("fn", [_mode_stack_depth, _sum_of_sines, _in_place_product])
def test_frame_called_inside_and_outside_a_mode_like_torch(fn):
    """Called under a torch function mode and outside it: eager's values, and as many
    graphs (one each) and operations as torch.compile."""
    import torch._dynamo
    import torch._dynamo.testing

    def run(compiled, counter):
        for _ in range(2):
            x = torch.randn(3)
            with _ScaledMulMode():
                assert_same(compiled(x.clone()), fn(x.clone()))
            assert_same(compiled(x.clone()), fn(x.clone()))
        return counter.frame_count, counter.op_count

    counter = CountingBackend()
    ours = run(dynamo_capture.optimize(fn, backend=counter), counter)
    torch._dynamo.reset()
    reference = torch._dynamo.testing.CompileCounter()
    theirs = run(torch.compile(fn, backend=reference), reference)
    torch._dynamo.reset()
    assert ours == theirs
