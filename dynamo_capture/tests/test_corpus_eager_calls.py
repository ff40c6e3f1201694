"""Programs in the style of torch's dynamo tests of exceptions, context managers, tensor
attributes, in-place updates, logging and `torch.compiler.disable`: ember's graph and op
counts equal torch.compile's and its results eager's (torchcheck.check_like_torch).

    a call that runs eagerly on its own (a disabled function, print, a logging call,
    torch.autograd.grad, a factory with requires_grad=True): its arguments computed in
    the graph before it, the code after it compiled
    standard-library frames (a logger's methods) never compiled as callees of a break
    items of a multi-output result nothing reads (topk's indices) dropped from the graph
    Tensor.storage_offset() read where the code runs (guards do not fix it)
    a split frame whose locals are no identifiers (pytest's rewritten asserts)
    an input's .grad read and guarded (None, or a tensor input of its own); a leaf
    input's .grad_fn None, guarded to stay a leaf
    a function made in the frame that breaks runs as a compiled frame of its own
"""

from __future__ import annotations

import contextlib
import logging
import math

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torchcheck import check_like_torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend

LOG = logging.getLogger("eager_calls_program")


def r(*shape, grad=False):
    return torch.randn(*shape, requires_grad=grad)


# ----- exceptions -------------------------------------------------------------------
def _raise_caught(x):
    try:
        raise ValueError("boom")
    except ValueError:
        y = x.sin()
    return y + 1


def _raise_from_cause(x):
    try:
        try:
            raise ValueError("a")
        except ValueError as inner:
            raise TypeError("b") from inner
    except TypeError as outer:
        caused = outer.__cause__ is not None
    return x + int(caused)


def _break_in_try(x):
    try:
        y = x + 1
        torch._dynamo.graph_break()
        y = y * 2
    except RuntimeError:
        y = x
    return y.cos()


def _break_in_finally(x):
    try:
        y = x + 1
    finally:
        torch._dynamo.graph_break()
    return y * 3


def _lookup_errors_caught(x):
    items, table = [1, 2], {"a": 1}
    try:
        first = items[5]
    except IndexError:
        first = 10
    try:
        second = table["b"]
    except KeyError:
        second = 3
    return x * first + second


def _callee_raises_caught(x):
    def fails(t):
        raise NotImplementedError("no")

    try:
        y = fails(x)
    except NotImplementedError:
        y = x * 5
    return y


def _nested_finally(x):
    y = x
    try:
        try:
            y = y + 1
        finally:
            y = y * 2
    finally:
        y = y - 3
    return y


def _suppress_raised(x):
    with contextlib.suppress(ValueError):
        raise ValueError
    return x + 1


def _continue_on_error(x):
    s = x
    for i in range(3):
        try:
            if i == 1:
                raise ValueError
            s = s + i
        except ValueError:
            continue
    return s


def _assert_on_shape(x):
    assert x.shape[0] == 4, "four rows"
    torch._check(x.dim() == 1)
    return x + 1


def _assert_then_break(x):
    # NOTE: pytest rewrites this assert: the frame binds locals named `@py_assert0`, which
    # the parts of the split frame take as parameters
    assert x.shape[0] == 4, "four rows"
    y = x + 1
    torch._dynamo.graph_break()
    return y * 2


def _assert_fails(x):
    assert x.shape[0] == 3, "wrong"
    return x * 2


def _reraised(x):
    try:
        try:
            raise ValueError("inner")
        except ValueError:
            raise
    except ValueError as error:
        message = str(error)
    return x + len(message)


def _uncaught_after_break(x):
    y = x + 1
    torch._dynamo.graph_break()
    if y.sum() > -1000:
        raise RuntimeError("bad")
    return y


# ----- context managers --------------------------------------------------------------
class Counter:
    def __init__(self):
        self.entered = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc):
        self.entered -= 1
        return False


@contextlib.contextmanager
def _yields_three():
    yield 3


def _user_context_break(x):
    with Counter():
        y = x + 1
        torch._dynamo.graph_break()
        y = y * 2
    return y


def _contextmanager_break(x):
    with _yields_three() as v:
        y = x * v
        torch._dynamo.graph_break()
        y = y + 1
    return y


def _nullcontext_value(x):
    with contextlib.nullcontext(5) as v:
        y = x * v
    return y


def _exit_stack_no_grad(x):
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        y = x + 1
    return y


def _no_grad_break(x):
    with torch.no_grad():
        y = x * 2
        torch._dynamo.graph_break()
        y = y + 1
    return y, x * 3


def _enable_grad_break(x):
    with torch.no_grad():
        with torch.enable_grad():
            b = x * 3
            torch._dynamo.graph_break()
            b = b * 2
        c = x + 1
    return b, c


def _inference_mode(x):
    with torch.inference_mode():
        y = x * 2
    return y.clone()


def _exception_in_with_caught(x):
    counter = Counter()
    try:
        with counter:
            raise ValueError
    except ValueError:
        pass
    return x + counter.entered


# ----- tensor attributes, sizes, dtypes, devices --------------------------------------
def _shape_arithmetic(x):
    return x.reshape(x.shape[0] * x.shape[1]) + x.ndim


def _dtype_and_device_branches(x):
    y = x + 1 if x.dtype == torch.float32 else x - 1
    y = y * (2 if x.is_cuda else 3)
    return y + (1 if x.device.type == "cpu" else 0)


def _transposes(x):
    return x.T @ x, x.mT.sum(0), x.data * 2


def _size_objects(x):
    s = x.shape + (1,)
    return x.reshape(s), x.view(*x.shape[:1], -1), x.new_ones(x.size(-1))


def _dtype_facts(x):
    return x * x.dtype.itemsize + x.is_floating_point() + torch.finfo(x.dtype).eps


def _promote_types(x):
    return x.to(torch.promote_types(torch.int32, torch.float16))


def _size_unpacked(x):
    rows, cols = x.shape
    return x.reshape(cols, rows)


def _stride_and_contiguity(x):
    y = x.t()
    z = y.contiguous() if not y.is_contiguous() else y
    return z * x.stride(0)


def _requires_grad_branch(x):
    y = x * 2
    return x * (2 if x.requires_grad else 3), y.requires_grad


def _grad_fn_of_input(x):
    return x * (1 if x.grad_fn is None else 2)


# ----- in-place updates ------------------------------------------------------------
def _inplace_on_argument(x):
    x.add_(1)
    return x * 2


def _inplace_on_argument_view(x):
    x[0].mul_(0)
    return x


def _inplace_view_chain(x):
    flat = x.view(-1)
    flat[2:5] += 1
    return x


def _masked_assign(x):
    x[x > 0] = 0
    return x


def _inplace_around_break(x):
    x.add_(1)
    torch._dynamo.graph_break()
    x.mul_(2)
    return x


def _diagonal_zeroed(x):
    x.diagonal().zero_()
    return x


# ----- calls that run eagerly on their own -----------------------------------------------
@torch.compiler.disable
def _disabled(t):
    return t * 3


def _calls_disabled(t):
    return _disabled(t + 1) - 1


def _disabled_in_callee(x):
    return _calls_disabled(x).cos()


def _disabled_made_in_frame(x):
    add_five = torch.compiler.disable(lambda t: t + 5)
    return add_five(x) * 2


def _logs_info(x):
    y = x + 1
    LOG.info("value %s", 1)
    return y * 2


def _logs_computed_argument(x):
    LOG.debug("sum %s", (x + 1).sum())
    return x * 2


def _prints(x):
    y = x + 1
    print("value", 1)
    return y * 2


def _autograd_grad(x):
    y = (x**3).sum()
    (grad,) = torch.autograd.grad(y, x)
    return grad


def _factory_requiring_grad(x):
    w = torch.ones(4, requires_grad=True)
    return x * w


def _is_compiling_in_callee(x):
    def shifted(t):
        return t + (1 if torch.compiler.is_compiling() else 0)

    return shifted(x)


# ----- model snippets ----------------------------------------------------------------
def _causal_attention(x):
    b, t, c = x.size()
    q = k = v = x.view(b, t, 2, c // 2).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    mask = torch.tril(torch.ones(t, t)).view(1, 1, t, t)
    att = att.masked_fill(mask[:, :, :t, :t] == 0, float("-inf"))
    return (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, t, c)


def _rotary(x):
    d = x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    freqs = torch.einsum("i,j->ij", torch.arange(x.shape[1]).float(), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * emb.cos() + torch.cat((-x2, x1), dim=-1) * emb.sin()


def _topk_values(x):
    return torch.topk(x, 3).values.sum()


def _max_unpacked(x):
    values, indices = x.max(dim=1)
    result = x.max(1)
    return values + result.values, indices, result.indices


def _label_smoothing(x):
    target = torch.tensor([1, 0, 3, 2])
    logp = F.log_softmax(x, dim=-1)
    nll = -logp.gather(dim=-1, index=target.unsqueeze(1)).squeeze(1)
    return (0.9 * nll + 0.1 * -logp.mean(dim=-1)).mean()


def _getattr_builtins(x):
    class Holder:
        b = 2

    return getattr(torch, "relu")(x) + getattr(Holder(), "c", 3) + hasattr(Holder, "b")  # noqa: B009


def _made_in_frame_breaks(x):
    def doubled_then_one(t):
        a = t * 2
        torch._dynamo.graph_break()
        return a + 1

    return doubled_then_one(x), x * 3


PROGRAMS = {
    "raise_caught": (_raise_caught, lambda: (r(4),)),
    "raise_from_cause": (_raise_from_cause, lambda: (r(4),)),
    "break_in_try": (_break_in_try, lambda: (r(4),)),
    "break_in_finally": (_break_in_finally, lambda: (r(4),)),
    "lookup_errors_caught": (_lookup_errors_caught, lambda: (r(4),)),
    "callee_raises_caught": (_callee_raises_caught, lambda: (r(4),)),
    "nested_finally": (_nested_finally, lambda: (r(4),)),
    "suppress_raised": (_suppress_raised, lambda: (r(4),)),
    "continue_on_error": (_continue_on_error, lambda: (r(4),)),
    "assert_on_shape": (_assert_on_shape, lambda: (r(4),)),
    "assert_then_break": (_assert_then_break, lambda: (r(4),)),
    "assert_fails": (_assert_fails, lambda: (r(4),)),
    "reraised": (_reraised, lambda: (r(4),)),
    "uncaught_after_break": (_uncaught_after_break, lambda: (r(4),)),
    "user_context_break": (_user_context_break, lambda: (r(4),)),
    "contextmanager_break": (_contextmanager_break, lambda: (r(4),)),
    "nullcontext_value": (_nullcontext_value, lambda: (r(4),)),
    "exit_stack_no_grad": (_exit_stack_no_grad, lambda: (r(4),)),
    "no_grad_break": (_no_grad_break, lambda: (r(4, grad=True),)),
    "enable_grad_break": (_enable_grad_break, lambda: (r(4, grad=True),)),
    "inference_mode": (_inference_mode, lambda: (r(4, grad=True),)),
    "exception_in_with_caught": (_exception_in_with_caught, lambda: (r(4),)),
    "shape_arithmetic": (_shape_arithmetic, lambda: (r(4, 3),)),
    "dtype_and_device_branches": (_dtype_and_device_branches, lambda: (r(4, 3),)),
    "transposes": (_transposes, lambda: (r(4, 3),)),
    "size_objects": (_size_objects, lambda: (r(4, 3),)),
    "dtype_facts": (_dtype_facts, lambda: (r(4, 3),)),
    "promote_types": (_promote_types, lambda: (r(4, 3),)),
    "size_unpacked": (_size_unpacked, lambda: (r(4, 3),)),
    "stride_and_contiguity": (_stride_and_contiguity, lambda: (r(4, 3),)),
    "requires_grad_branch": (_requires_grad_branch, lambda: (r(4, 3, grad=True),)),
    "grad_fn_of_input": (_grad_fn_of_input, lambda: (r(4, grad=True),)),
    "inplace_on_argument": (_inplace_on_argument, lambda: (r(4, 3),)),
    "inplace_on_argument_view": (_inplace_on_argument_view, lambda: (r(4, 3),)),
    "inplace_view_chain": (_inplace_view_chain, lambda: (r(4, 3),)),
    "masked_assign": (_masked_assign, lambda: (r(4, 3),)),
    "inplace_around_break": (_inplace_around_break, lambda: (r(4, 3),)),
    "diagonal_zeroed": (_diagonal_zeroed, lambda: (r(3, 3),)),
    "disabled_in_callee": (_disabled_in_callee, lambda: (r(4),)),
    "disabled_made_in_frame": (_disabled_made_in_frame, lambda: (r(4),)),
    "logs_info": (_logs_info, lambda: (r(4),)),
    "logs_computed_argument": (_logs_computed_argument, lambda: (r(4),)),
    "prints": (_prints, lambda: (r(4),)),
    "autograd_grad": (_autograd_grad, lambda: (r(4, grad=True),)),
    "factory_requiring_grad": (_factory_requiring_grad, lambda: (r(4, grad=True),)),
    "causal_attention": (_causal_attention, lambda: (r(2, 4, 8),)),
    "rotary": (_rotary, lambda: (r(2, 6, 8),)),
    "topk_values": (_topk_values, lambda: (r(4, 8),)),
    "max_unpacked": (_max_unpacked, lambda: (r(4, 8),)),
    "label_smoothing": (_label_smoothing, lambda: (r(4, 8),)),
    "getattr_builtins": (_getattr_builtins, lambda: (r(4, 8),)),
    "made_in_frame_breaks": (_made_in_frame_breaks, lambda: (r(4, grad=True),)),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_program_counts_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


def test_multihead_attention_drops_unread_weights_item():
    torch.manual_seed(0)
    attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def attend(x):
        return attention(x, x, x, need_weights=False)[0]

    check_like_torch(attend, lambda: (r(2, 3, 8),))


def test_is_compiling_is_true_in_a_compiled_callee():
    compiled = dynamo_capture.optimize(_is_compiling_in_callee, backend=CountingBackend())
    x = r(4)
    torch.testing.assert_close(compiled(x), x + 1)
    torch.testing.assert_close(_is_compiling_in_callee(x), x)


def test_logging_call_runs_every_call_between_graphs(caplog):
    backend = CountingBackend()
    compiled = dynamo_capture.optimize(_logs_info, backend=backend)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        for _ in range(3):
            x = r(4)
            torch.testing.assert_close(compiled(x), (x + 1) * 2)
    assert [record.getMessage() for record in caplog.records if record.name == LOG.name] == [
        "value 1"
    ] * 3
    assert backend.frame_count == 2


def test_storage_offset_of_an_input_view_is_read_each_call():
    def shifted(x):
        return x[1:] + x[1:].storage_offset()

    compiled = dynamo_capture.optimize(shifted, backend=CountingBackend())
    base = torch.zeros(20)
    for start in (0, 2, 5):
        view = base[start : start + 4]
        torch.testing.assert_close(compiled(view), shifted(view))


def test_input_grad_is_read_and_guarded():
    def uses_grad(x):
        if x.grad is not None:
            return x.grad * 2
        return x * 0

    backend = CountingBackend()
    compiled = dynamo_capture.optimize(uses_grad, backend=backend)
    x = torch.ones(3, requires_grad=True)
    torch.testing.assert_close(compiled(x), uses_grad(x))
    x.grad = torch.full((3,), 3.0)
    torch.testing.assert_close(compiled(x), torch.full((3,), 6.0))
    x.grad = torch.full((3,), 5.0)
    torch.testing.assert_close(compiled(x), torch.full((3,), 10.0))
    x.grad = None
    torch.testing.assert_close(compiled(x), torch.zeros(3))
    assert len(compiled.entries) == 2  # grad None, grad a tensor


def test_grad_fn_of_a_leaf_input_is_guarded_to_stay_a_leaf():
    compiled = dynamo_capture.optimize(_grad_fn_of_input, backend=CountingBackend())
    leaf = torch.ones(2, requires_grad=True)
    for x in (leaf, leaf * 1, torch.ones(2)):  # a leaf, a tensor with a grad_fn, no grad
        torch.testing.assert_close(compiled(x), _grad_fn_of_input(x))
