"""Module-level constructs: ember's graph and op counts equal torch.compile's, its results
eager's (torchcheck.check_like_torch).

    hooks of a compiled module of a user class: nn.Module.__call__ runs eagerly, its
        forward and each hook are frames of their own (pre-hooks, hooks, with_kwargs,
        a hook returning a replacement or None); hooks added or removed later are seen
        at once; full backward hooks run; torch's own modules keep hooks inlined
    context managers entered by hand: contextlib generators, user classes, no_grad,
        autocast; a generator's context kept across a break runs the frame eagerly
    modules made in the frame: nn.Linear (a break at its parameters, its resume
        guarded on the module's structure), losses, activations, dropout
    functools.partialmethod, staticmethod / classmethod through instances, __call__
    .item() / .tolist(): a break, the floats read not specialised on every new value
"""

from __future__ import annotations

import contextlib
import functools
import itertools

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from torch import nn
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend as Counting


def _fixed(*shape, grad=False):
    values = torch.linspace(-1.5, 2.0, int(torch.Size(shape).numel())).reshape(shape)
    return values.requires_grad_(grad)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x, scale=1.0):
        return self.linear(x).relu() * scale


def _double_output(module, args, output):
    return output * 2


def _shift_input(module, args):
    return (args[0] + 1,)


def _with_kwargs_pre_hook(module, args, kwargs):
    return (args[0] - 1,), {**kwargs, "scale": 3.0}


def _with_kwargs_hook(module, args, kwargs, output):
    return output + args[0].sum() * kwargs.get("scale", 1.0)


def _returns_none(module, args, output):
    return None


class ScaleHook:
    """A callable object as a hook."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def __call__(self, module, args, output):
        return output * self.factor


def _hooked(*hooks: tuple[str, object]) -> Block:
    torch.manual_seed(0)
    block = Block()
    for kind, hook in hooks:
        if kind == "pre":
            block.register_forward_pre_hook(hook)
        elif kind == "pre_kwargs":
            block.register_forward_pre_hook(hook, with_kwargs=True)
        elif kind == "hook_kwargs":
            block.register_forward_hook(hook, with_kwargs=True)
        elif kind == "inner":
            block.linear.register_forward_hook(hook)
        else:
            block.register_forward_hook(hook)
    return block


HOOKED_MODULES = {
    "forward_hook_replaces_output": _hooked(("hook", _double_output)),
    "pre_hook_replaces_input": _hooked(("pre", _shift_input)),
    "with_kwargs_pre_hook": _hooked(("pre_kwargs", _with_kwargs_pre_hook)),
    "with_kwargs_forward_hook": _hooked(("hook_kwargs", _with_kwargs_hook)),
    "hook_returning_none": _hooked(("hook", _returns_none)),
    "pre_hook_forward_hook_and_object_hook": _hooked(
        ("pre", _shift_input), ("hook", _double_output), ("hook", ScaleHook(0.5))
    ),
    "hook_on_a_submodule_inlined": _hooked(("inner", _double_output)),
}


@pytest.mark.parametrize("name", list(HOOKED_MODULES))
def test_hooks_of_a_compiled_module_are_frames_like_torch(name):
    check_like_torch(HOOKED_MODULES[name], lambda: (_fixed(2, 4),))


def test_hooks_of_torch_module_are_inlined_like_torch():
    torch.manual_seed(0)
    linear = nn.Linear(4, 4)
    linear.register_forward_pre_hook(_shift_input)
    linear.register_forward_hook(_double_output)
    counter = check_like_torch(linear, lambda: (_fixed(2, 4),))
    assert counter.frame_count == 1


def _hooks_added_and_removed(compile_module):
    """Graph counts after each step: compiled, a hook added, a pre-hook added, both
    removed; and the outputs."""
    torch.manual_seed(0)
    block = Block()
    compiled, counter = compile_module(block)
    x = _fixed(2, 4)
    counts, outputs = [], []

    def step():
        outputs.append(compiled(x))
        counts.append(counter.frame_count)

    block.register_forward_hook(_double_output)
    step()
    pre = block.register_forward_pre_hook(_shift_input)
    step()
    pre.remove()
    step()
    block._forward_hooks.clear()
    step()
    return counts, outputs


def test_hooks_added_and_removed_after_compiling_like_torch():
    def with_torch(block):
        torch._dynamo.reset()
        counter = torch._dynamo.testing.CompileCounter()
        return torch.compile(block, backend=counter), counter

    def with_ember(block):
        counter = Counting()
        return dynamo_capture.optimize(block, backend=counter), counter

    torch_counts, expected = _hooks_added_and_removed(with_torch)
    torch._dynamo.reset()
    counts, outputs = _hooks_added_and_removed(with_ember)
    for got, want in zip(outputs, expected, strict=True):
        torch.testing.assert_close(got, want)
    assert counts == torch_counts


def test_hook_added_after_compiling_is_not_stale():
    torch.manual_seed(0)
    block = Block()
    block.register_forward_hook(_returns_none)
    compiled = dynamo_capture.optimize(block, backend=Counting())
    x = _fixed(2, 4)
    torch.testing.assert_close(compiled(x), block(x))
    handle = block.register_forward_hook(_double_output)
    torch.testing.assert_close(compiled(x), block(x))
    handle.remove()
    torch.testing.assert_close(compiled(x), block(x))


def test_full_backward_hook_of_a_compiled_module_scales_gradients():
    seen = []

    def scale_grad_input(module, grad_input, grad_output):
        seen.append(grad_output[0].shape)
        return (grad_input[0] * 10,)

    torch.manual_seed(0)
    block = Block()
    block.register_full_backward_hook(scale_grad_input)
    counter = Counting()
    compiled = dynamo_capture.optimize(block, backend=counter)
    x = _fixed(2, 4, grad=True)
    block(x).sum().backward()
    expected = x.grad
    x.grad = None
    compiled(x).sum().backward()
    torch.testing.assert_close(x.grad, expected)
    assert len(seen) == 2 and counter.frame_count == 1


def test_module_hooks_under_fullgraph_each_frame_whole():
    block = _hooked(("pre", _shift_input), ("hook", _double_output))
    counter = Counting()
    compiled = dynamo_capture.optimize(block, backend=counter, fullgraph=True)
    x = _fixed(2, 4)
    torch.testing.assert_close(compiled(x), block(x))
    assert counter.frame_count == 3

    def breaking_hook(module, args, output):
        torch._dynamo.graph_break()
        return output

    block.register_forward_hook(breaking_hook)
    with pytest.raises(dynamo_capture.Unsupported):
        compiled(x)


# ----- context managers entered by hand ----------------------------------------------
DEPTH: list[int] = []


@contextlib.contextmanager
def _scaled(x, factor):
    DEPTH.append(factor)
    try:
        yield x * factor
    finally:
        DEPTH.pop()


def generator_context_by_hand(x):
    cm = _scaled(x, 2)
    value = cm.__enter__()
    y = value + len(DEPTH)
    cm.__exit__(None, None, None)
    return y + len(DEPTH)


def generator_context_kept_across_a_break(x):
    cm = _scaled(x, 2)
    value = cm.__enter__()
    torch._dynamo.graph_break()
    y = value + len(DEPTH)
    cm.__exit__(None, None, None)
    return y * 2


@contextlib.contextmanager
def _grad_off():
    previous = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    try:
        yield
    finally:
        torch.set_grad_enabled(previous)


def generator_grad_context_by_hand(x):
    cm = _grad_off()
    cm.__enter__()
    y = x * 2
    cm.__exit__(None, None, None)
    return y, x * 3


class GradOff:
    def __enter__(self):
        self.previous = torch.is_grad_enabled()
        torch.set_grad_enabled(False)
        return self

    def __exit__(self, *exc):
        torch.set_grad_enabled(self.previous)
        return False


class Depth:
    def __init__(self) -> None:
        self.depth = 0

    def __enter__(self):
        self.depth += 1
        return self.depth

    def __exit__(self, *exc):
        self.depth -= 1
        return False


def user_context_by_hand(x):
    cm = Depth()
    depth = cm.__enter__()
    y = x * depth + cm.depth
    cm.__exit__(None, None, None)
    return y + cm.depth


def user_grad_context_by_hand(x):
    cm = GradOff()
    cm.__enter__()
    y = x * 2
    cm.__exit__(None, None, None)
    return y, x * 3


BF16 = torch.autocast("cpu", dtype=torch.bfloat16)


def global_autocast_by_hand(x):
    BF16.__enter__()
    y = torch.mm(x, x)
    BF16.__exit__(None, None, None)
    return y, torch.mm(x, x)


CONTEXTS_BY_HAND = [
    generator_context_by_hand,
    generator_context_kept_across_a_break,
    generator_grad_context_by_hand,
    user_context_by_hand,
    user_grad_context_by_hand,
    global_autocast_by_hand,
]


@pytest.mark.parametrize("fn", CONTEXTS_BY_HAND, ids=[fn.__name__ for fn in CONTEXTS_BY_HAND])
def test_context_entered_by_hand_like_torch(fn):
    check_like_torch(fn, lambda: (_fixed(3, 3, grad=True),))


def test_generator_context_kept_across_a_break_runs_the_frame_eagerly():
    counter = check_like_torch(generator_context_kept_across_a_break, lambda: (_fixed(3),))
    assert counter.frame_count == 0


def _no_grad_by_hand(x):
    cm = torch.no_grad()
    cm.__enter__()
    y = x * 2
    cm.__exit__(None, None, None)
    return y, x * 3


def _autocast_by_hand(x):
    cm = torch.autocast("cpu", dtype=torch.bfloat16)
    cm.__enter__()
    y = torch.mm(x, x)
    cm.__exit__(None, None, None)
    return y, torch.mm(x, x)


@pytest.mark.parametrize("fn", [_no_grad_by_hand, _autocast_by_hand])
def test_torch_context_entered_by_hand_matches_eager(fn):
    # NOTE: torch.compile 2.13 itself leaves x * 3 without grad (no_grad) or raises
    # (autocast) here; ember is held to eager's results
    counter = Counting()
    compiled = dynamo_capture.optimize(fn, backend=counter)
    for _ in range(2):
        x = _fixed(3, 3, grad=True)
        expected = fn(x)
        got = compiled(x)
        for a, b in zip(got, expected, strict=True):
            torch.testing.assert_close(a, b)
            assert a.dtype == b.dtype and a.requires_grad == b.requires_grad
        assert torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu")
    assert counter.frame_count <= 2


# ----- modules made in the frame -----------------------------------------------------
def linear_made_in_frame(x):
    return nn.Linear(4, 4)(x)


def linear_made_in_frame_kept_in_a_local(x):
    layer = nn.Linear(4, 2)
    y = layer(x).relu()
    return layer(x) + y


def cross_entropy_made_in_frame(x):
    return nn.CrossEntropyLoss()(x, torch.tensor([0, 3]))


def relu_and_dropout_made_in_frame(x):
    return nn.ReLU()(x) + nn.Dropout(0.5)(x)


def dropout_in_eval_made_in_frame(x):
    dropout = nn.Dropout(0.5)
    dropout.eval()
    return dropout(x)


MADE_IN_FRAME = [
    linear_made_in_frame,
    linear_made_in_frame_kept_in_a_local,
    cross_entropy_made_in_frame,
    relu_and_dropout_made_in_frame,
    dropout_in_eval_made_in_frame,
]


@pytest.mark.parametrize("fn", MADE_IN_FRAME, ids=[fn.__name__ for fn in MADE_IN_FRAME])
def test_module_made_in_frame_like_torch(fn):
    check_like_torch(fn, lambda: (_fixed(2, 4),), calls=3)


def test_linear_made_in_frame_resumes_without_recompiling():
    counter = check_like_torch(linear_made_in_frame, lambda: (_fixed(2, 4),), calls=4)
    assert counter.frame_count == 1


# ----- functools and method kinds ----------------------------------------------------
class Scaler:
    def __init__(self) -> None:
        self.k = 2

    def scale(self, x, factor, shift=0.0):
        return x * factor * self.k + shift

    triple = functools.partialmethod(scale, 3)
    shifted = functools.partialmethod(scale, factor=2, shift=1.0)

    @functools.cached_property
    def big(self):
        return self.k * 10

    @staticmethod
    def plus_one(x):
        return x + 1

    @classmethod
    def plus_name(cls, x):
        return x + len(cls.__name__)

    def __call__(self, x):
        return x - self.k


SCALER = Scaler()


def partialmethod_through_instance(x):
    return SCALER.triple(x) + SCALER.shifted(x)


def partialmethod_of_keywords_through_instance(x):
    return SCALER.shifted(x) * 2 + 1


def _partialmethod_in_a_callee(x):
    return SCALER.triple(x)


def partialmethod_in_a_callee(x):
    return _partialmethod_in_a_callee(x.cos()) + 1


def partialmethod_of_new_instance(x):
    return Scaler().triple(x)


def cached_property_of_global(x):
    return x * SCALER.big


def static_and_class_methods_through_instances(x):
    return SCALER.plus_one(x) + SCALER.plus_name(x) + Scaler.plus_one(x) + Scaler().plus_name(x)


def call_of_a_plain_object(x):
    return SCALER(x) + Scaler()(x)


METHOD_KINDS = [
    partialmethod_through_instance,
    partialmethod_of_keywords_through_instance,
    partialmethod_in_a_callee,
    partialmethod_of_new_instance,
    cached_property_of_global,
    static_and_class_methods_through_instances,
    call_of_a_plain_object,
]


@pytest.mark.parametrize("fn", METHOD_KINDS, ids=[fn.__name__ for fn in METHOD_KINDS])
def test_method_kinds_like_torch(fn):
    check_like_torch(fn, lambda: (_fixed(3),))


# ----- .item() / .tolist() -----------------------------------------------------------
def _values(*rows):
    """Arguments from `rows` in turn, over and over (each side of a check reads them all)."""
    rows_iter = itertools.cycle(rows)
    return lambda: (torch.tensor(next(rows_iter)),)


def item_scales(x):
    v = x.sum().item()
    return x * v


def item_branches(x):
    v = x.sum().item()
    if v > 0:
        return x * v
    return x - v


def two_items(x):
    top = x.max().item()
    bottom = x.min().item()
    return (x - bottom) / (top - bottom + 1e-3)


def tolist_items(x):
    items = x.tolist()
    return x * items[0] + items[1]


def int_item_indexes(x):
    i = int(x.argmax())
    return x[i] + x[:i].sum()


ITEM_PROGRAMS = [item_scales, item_branches, two_items, tolist_items, int_item_indexes]
ROWS = ([1.0, 2.0, 3.0], [-1.0, -2.0, -4.0], [4.0, 2.0, 3.0], [-5.0, 2.0, -3.0], [0.5, 0.0, 1.0])


@pytest.mark.parametrize("fn", ITEM_PROGRAMS, ids=[fn.__name__ for fn in ITEM_PROGRAMS])
def test_item_and_tolist_break_and_resume_like_torch(fn):
    # the same values, in the same order, for both: recompiles follow the values read
    check_like_torch(fn, _values(*ROWS), calls=len(ROWS))


def index_with_an_int_argument(x, i):
    return x[i] * 2


def test_tensor_indexed_by_a_dynamic_int_is_not_specialised_at_zero():
    indices = itertools.cycle([2, 0, 1, 3])
    counter = check_like_torch(
        index_with_an_int_argument, lambda: (torch.arange(5.0), next(indices)), calls=4
    )
    assert counter.frame_count == 2


def test_forward_replaced_after_compiling_a_hooked_module_is_not_stale():
    block = _hooked(("hook", _double_output))
    compiled = dynamo_capture.optimize(block, backend=Counting())
    x = _fixed(2, 4)
    torch.testing.assert_close(compiled(x), block(x))
    block.forward = lambda x, scale=1.0: x * 5  # on the instance
    torch.testing.assert_close(compiled(x), x * 10)
    del block.forward
    original = Block.forward
    try:
        Block.forward = lambda self, x, scale=1.0: x - 1  # on the class
        torch.testing.assert_close(compiled(x), (x - 1) * 2)
    finally:
        Block.forward = original
    torch.testing.assert_close(compiled(x), block(x))


def slice_with_an_int_argument(x, i):
    return x[:i].sum() + x[i]


def test_tensor_sliced_by_a_dynamic_int_is_not_specialised_at_zero():
    indices = itertools.cycle([2, 0, 1, 3])
    counter = check_like_torch(
        slice_with_an_int_argument, lambda: (torch.arange(5.0), next(indices)), calls=4
    )
    assert counter.frame_count == 2
