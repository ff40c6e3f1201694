"""Exceptions raised and caught inside the compiled frame: one graph, as torch.compile
traces them; an exception leaving the frame runs it eagerly, with eager's type and message."""

from __future__ import annotations

import contextlib
import sys

import pytest
import torch
from torchcheck import check_like_torch

import dynamo_capture


def _one():
    return (torch.randn(4, requires_grad=True),)


class ShapeError(Exception):
    pass


def _fails(t):
    t = t + 1
    raise ShapeError("from the callee")


def _fails_two_deep(t):
    return _fails(t * 2)


def raise_caught_by_type(x):
    try:
        y = x + 1
        raise ValueError("bad")
    except ValueError:
        y = y * 2
    return y


def raise_caught_as_name(x):
    try:
        raise ShapeError("named")
    except ShapeError as error:
        message = str(error)
    return x + 1, message


def raise_class_caught_by_tuple(x):
    try:
        raise IndexError
    except (KeyError, IndexError):
        x = x + 2
    return x


def finally_runs_on_the_way_out(x):
    y = x
    try:
        try:
            y = y + 1
            raise KeyError("k")
        finally:
            y = y * 3
    except KeyError:
        y = y - 1
    return y


def try_else_and_finally(x):
    log = []
    try:
        y = x + 1
    except ValueError:
        y = x - 1
    else:
        y = y * 2
    finally:
        log.append("done")
    return y, log


def bare_raise_reraises(x):
    try:
        try:
            raise ValueError("a")
        except ValueError:
            x = x + 1
            raise
    except ValueError:
        x = x * 2
    return x


def raise_from_sets_the_cause(x):
    try:
        try:
            raise KeyError("a")
        except KeyError as error:
            raise ValueError("b") from error
    except ValueError as outer:
        cause = type(outer.__cause__).__name__
    return x + 1, cause


def callee_raises_caller_catches(x):
    try:
        _fails(x)
    except ShapeError:
        x = x * 5
    return x


def callee_two_deep_raises(x):
    try:
        _fails_two_deep(x)
    except ShapeError as error:
        x = x * len(error.args)
    return x


def next_past_the_end_raises_stop_iteration(x):
    items = iter([1, 2])
    next(items)
    next(items)
    try:
        next(items)
    except StopIteration:
        x = x + 1
    return x


def caught_in_a_loop(x):
    for step in range(3):
        try:
            if step == 1:
                raise ValueError(step)
            x = x + step
        except ValueError:
            x = x * 2
    return x


def missing_dict_key_caught(x):
    table = {"a": 1}
    try:
        scale = table["b"]
    except KeyError:
        scale = 2
    return x * scale


def assertion_error_caught(x):
    seen = []
    try:
        if not seen:
            raise AssertionError("nothing seen")
    except AssertionError:
        x = x + 1
    return x


def exc_info_inside_handler(x):
    try:
        raise ValueError("z")
    except ValueError:
        is_value_error = sys.exc_info()[0] is ValueError
    return x + 1, is_value_error


def suppress_swallows_the_raise(x):
    with contextlib.suppress(ValueError):
        x = x + 1
        raise ValueError("swallowed")
    return x * 2


class Swallowing:
    def __enter__(self):
        return 5

    def __exit__(self, kind, value, traceback):
        return kind is not None and issubclass(kind, LookupError)


def user_exit_swallows_the_raise(x):
    with Swallowing() as k:
        y = x * k
        raise KeyError("swallowed")
    return y + 1


@contextlib.contextmanager
def _catching():
    try:
        yield
    except ValueError:
        pass


def generator_context_catches_the_raise(x):
    with _catching():
        x = x + 1
        raise ValueError("caught in the generator")
    return x * 2


class _Fields:
    def __init__(self):
        self.a = 1


_FIELDS = _Fields()


def missing_attribute_of_an_outside_object_caught(x):
    try:
        scale = 2
        _FIELDS.b  # noqa: B018
    except AttributeError:
        scale = 3
    return torch.sin(x) * scale


def division_by_zero_caught(x):
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        x = x + 1
    return x


def failed_int_parse_caught(x):
    try:
        value = int("abc")
    except ValueError:
        value = 7
    return x * value


class _Lenient:
    def __init__(self):
        self._b = 20

    def __getattr__(self, name):
        try:
            return self.__dict__["_" + name]
        except KeyError:
            raise AttributeError(f"{name} absent") from None


_LENIENT = _Lenient()


def getattr_raising_attribute_error_read_by_hasattr(x):
    return x * (2 if hasattr(_LENIENT, "c") else 3) * _LENIENT.b


PROGRAMS = [
    raise_caught_by_type,
    raise_caught_as_name,
    raise_class_caught_by_tuple,
    finally_runs_on_the_way_out,
    try_else_and_finally,
    bare_raise_reraises,
    raise_from_sets_the_cause,
    callee_raises_caller_catches,
    callee_two_deep_raises,
    next_past_the_end_raises_stop_iteration,
    caught_in_a_loop,
    missing_dict_key_caught,
    assertion_error_caught,
    exc_info_inside_handler,
    suppress_swallows_the_raise,
    user_exit_swallows_the_raise,
    generator_context_catches_the_raise,
    missing_attribute_of_an_outside_object_caught,
    division_by_zero_caught,
    failed_int_parse_caught,
    getattr_raising_attribute_error_read_by_hasattr,
]


@pytest.mark.parametrize("fn", PROGRAMS, ids=[fn.__name__ for fn in PROGRAMS])
def test_exception_caught_in_the_frame_is_traced_like_torch(fn):
    check_like_torch(fn, _one)


def escapes(x):
    x = x + 1
    raise ValueError(f"escaping {x.shape[0]}")


def escapes_from_a_callee(x):
    y = x + 1
    _fails(y)


def escapes_a_no_grad_block(x):
    with torch.no_grad():
        y = x * 2
        raise RuntimeError("out of no_grad")
    return y


def escapes_after_a_caught_one(x):
    try:
        raise KeyError("a")
    except KeyError:
        x = x + 1
    raise RuntimeError("second")


ESCAPING = [escapes, escapes_from_a_callee, escapes_a_no_grad_block, escapes_after_a_caught_one]


@pytest.mark.parametrize("fn", ESCAPING, ids=[fn.__name__ for fn in ESCAPING])
def test_exception_leaving_the_frame_is_eagers_like_torch(fn):
    counter = check_like_torch(fn, _one)
    assert counter.frame_count == 0
    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward)
    x = torch.randn(4, requires_grad=True)
    with pytest.raises(Exception) as eager:
        fn(x)
    with pytest.raises(type(eager.value)) as got:
        compiled(x)
    assert str(got.value) == str(eager.value)
    assert torch.is_grad_enabled()


def _two_then_raises(t):
    yield t + 1
    yield t + 2
    raise ValueError("third")


class _TwoThenKeyError:
    def __init__(self):
        self.count = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.count += 1
        if self.count == 3:
            raise KeyError("third")
        return self.count


def generator_raising_after_two_items(x):
    seen = []
    try:
        for item in _two_then_raises(x):
            seen.append(item)
    except ValueError:
        pass
    return len(seen), x + 1


def iterator_raising_after_two_items(x):
    seen = []
    try:
        for item in _TwoThenKeyError():
            seen.append(item)
    except KeyError:
        pass
    return x * len(seen)


@pytest.mark.parametrize(
    "fn", [generator_raising_after_two_items, iterator_raising_after_two_items]
)
def test_exception_of_a_generator_run_ahead_is_not_caught_early(fn):
    # capture runs a generator to its end when it is called, and drains an iterator when
    # the loop starts: their exception must not reach the handler before the loop body
    # saw the items before it (eagerly it does not)
    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward)
    for _ in range(2):
        x = torch.randn(3)
        got, expected = compiled(x), fn(x)
        torch.testing.assert_close(got, expected)


class _Sizeless:
    pass


def len_of_an_int_caught(x):
    try:
        n = len(5)
    except TypeError:
        n = 3
    return x + n


def len_of_a_size_caught_as_a_name(x):
    y = x * 2
    try:
        n = len(y.shape[0])
    except TypeError as error:
        n = 2 if isinstance(error, TypeError) else 5
    return y + n


def len_of_an_object_without_len_caught(x):
    try:
        n = len(_Sizeless())
    except TypeError:
        n = -1
    return x * n


LEN_ERRORS = [
    len_of_an_int_caught,
    len_of_a_size_caught_as_a_name,
    len_of_an_object_without_len_caught,
]


@pytest.mark.parametrize("fn", LEN_ERRORS, ids=[fn.__name__ for fn in LEN_ERRORS])
def test_len_of_a_value_without_len_raises_in_the_frame_like_torch(fn):
    check_like_torch(fn, _one)


def matmul_of_mixed_dtypes_caught(a, b):
    try:
        y = a @ b.mT
    except RuntimeError as error:
        y = a.abs() + len(type(error).__name__)
    return y * 2


def test_an_op_eager_refuses_at_run_time_is_caught_by_the_frames_handler():
    # The meta kernel of mm computes a result for an int32 and a bfloat16 operand, which
    # eager's kernel refuses: a graph holding the product raised past the handler.
    a = torch.ones(3, 2, dtype=torch.int32)
    b = torch.ones(4, 2, dtype=torch.bfloat16)
    compiled = dynamo_capture.optimize(
        matmul_of_mixed_dtypes_caught, backend=lambda gm, ex: gm.forward
    )
    torch.testing.assert_close(compiled(a, b), matmul_of_mixed_dtypes_caught(a, b))
    same = torch.ones(4, 2, dtype=torch.int32)
    torch.testing.assert_close(compiled(a, same), matmul_of_mixed_dtypes_caught(a, same))
