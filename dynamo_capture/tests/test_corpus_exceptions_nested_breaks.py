"""Exceptions and graph breaks nested in callees, modelled on pytorch's test/dynamo
test_exceptions.py and test_nested_graph_breaks.py: user exception classes with
`__init__`, attributes and `__str__`; `raise ... from`, implicit chaining and bare
re-raise across calls; exceptions as values (`e.args`, `str`, `isinstance`); errors
raised by containers and objects and caught; `StopIteration` of user iterators and
generator return values; `with` blocks whose `__exit__` sees or suppresses the error;
assert statements and `torch._assert`; `sys.exc_info` / `sys.exception`; exception
groups; then graph breaks inside try blocks of callees and in callees one to three
calls deep: in their loops, in their `with` blocks (grad mode, autocast, a user context
manager), in methods reached through a module's forward, and inside a torch function
mode's block entered in the frame.

Each program gives eager's results (or its exception: type and message) and
torch.compile's graph and op counts, two calls on fresh arguments
(`torchcheck.check_like_torch`). EAGER_PROGRAMS are checked against eager alone, where
torch.compile itself differs from eager (said at each).

PYTEST_DONT_REWRITE: the programs' assert statements are the user's, not pytest's
(rewritten, their messages hold object addresses)."""

from __future__ import annotations

import contextlib
import functools
import sys

import pytest
import torch
import torch._dynamo
from programcheck import assert_same_results, check_program_like_torch, run_program
from torchcheck import check_captured_whole, check_like_eager, check_like_torch, program_registry

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same

PROGRAMS, program = program_registry()
# where torch.compile's own values differ from eager's: a KeyError's or an own
# `__str__` read in the frame, `dict.pop` of a missing key, torch._assert failing, and a
# break inside a torch function mode's block (in the frame or a callee)
EAGER_PROGRAMS, eager_program = program_registry()
# captured as one graph where torch.compile runs the frame eagerly: it cannot trace
# `super().__init__(message)` of an exception class, `str` of a caught exception in an
# f-string, an assert failing in a callee, ExceptionGroup, a generator's return value
WHOLE_PROGRAMS, whole_program = program_registry()
# eager's values, counts unlike torch.compile's (benchmarks/RESULTS.md):
# a callee returning from no_grad after a break two calls deeper (torch compiles one more
# empty graph); a break inside a user `__exit__` or a property (torch runs the frame
# eagerly; capture compiles the code before) or a user `__getitem__` calling a function
# that breaks (capture compiles the item's code after the call; torch runs it eagerly)
DIFFERING_PROGRAMS, differing_program = program_registry()


def _break():
    torch._dynamo.graph_break()


def r(*shape):
    return torch.randn(*shape)


def r4():
    return torch.randn(4)


# ----- user exception classes ------------------------------------------------------------
class CodedError(Exception):
    def __init__(self, message, code):
        self.message = message
        self.code = code


class SuperInitError(Exception):
    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


class WithStr(Exception):
    def __str__(self):
        return f"WithStr({len(self.args)})"


class BaseFailure(Exception):
    kind = "base"


class LeafFailure(BaseFailure):
    kind = "leaf"


class OtherFailure(Exception):
    pass


class NoSuperInit(Exception):
    def __init__(self, value):
        self.value = value


@program(r4)
def user_exception_attribute_read_in_handler(x):
    try:
        raise CodedError("bad", 3)
    except CodedError as error:
        scale = error.code
        message = str(error)
    return x * scale, message


@program(r4)
def user_exception_args_read(x):
    try:
        raise CodedError("two", 5)
    except CodedError as error:
        args = error.args
    return x + len(args), args


@eager_program(r4)
def user_exception_own_str(x):
    try:
        raise WithStr(1, 2)
    except WithStr as error:
        text = str(error)
    return x + 1, text


@program(r4)
def subclass_caught_by_its_base(x):
    try:
        raise LeafFailure("leaf")
    except BaseFailure as error:
        kind = error.kind
    return x * 2, kind


@program(r4)
def tuple_of_user_classes_caught(x):
    for cls in (LeafFailure, OtherFailure):
        try:
            raise cls("either")
        except (OtherFailure, BaseFailure) as error:
            x = x + len(type(error).__name__)
    return x


@program(r4)
def exception_without_super_init(x):
    try:
        raise NoSuperInit(4)
    except NoSuperInit as error:
        value, args = error.value, error.args
    return x * value, args


@program(r4)
def builtin_caught_by_exception(x):
    try:
        raise KeyError("k")
    except Exception as error:  # noqa: BLE001
        is_lookup = isinstance(error, LookupError)
    return x + int(is_lookup)


@program(r4)
def inner_handler_misses_outer_catches(x):
    try:
        try:
            raise OtherFailure("o")
        except BaseFailure:
            x = x - 100
    except OtherFailure:
        x = x + 1
    return x


@program(r4)
def raise_class_not_instance(x):
    try:
        raise LeafFailure
    except BaseFailure as error:
        args = error.args
    return x + 1, args


@eager_program(r4)
def key_error_str_quotes_the_key(x):
    try:
        raise KeyError("name")
    except KeyError as error:
        text, rep = str(error), repr(error)
    return x + 1, text, rep


@program(r4)
def exception_args_hold_a_tensor(x):
    try:
        raise ValueError(x * 2, "t")
    except ValueError as error:
        y = error.args[0] + 1
    return y


@program(r4)
def exception_isinstance_checks(x):
    try:
        raise LeafFailure("l")
    except Exception as error:  # noqa: BLE001
        flags = (
            isinstance(error, BaseFailure),
            isinstance(error, OtherFailure),
            issubclass(type(error), Exception),
        )
    return x + sum(flags), flags


@whole_program(r4)
def super_init_exception_attribute_read(x):
    try:
        raise SuperInitError("bad", 3)
    except SuperInitError as error:
        scale = error.code
        message = str(error)
    return x * scale, message, error_args(scale)


def error_args(scale):
    try:
        raise SuperInitError("args", scale)
    except SuperInitError as error:
        return error.args


@whole_program(r4)
def super_init_exception_from_a_callee(x):
    try:
        _raises_super_init(x)
    except SuperInitError as error:
        x = x + error.code
    return x


def _raises_super_init(t):
    raise SuperInitError("callee", 2)


# ----- try / except / else / finally in the frame -----------------------------------------
@program(r4)
def else_runs_when_nothing_raised(x):
    try:
        y = x + 1
    except ValueError:
        y = x - 1
    else:
        y = y * 10
    return y


@program(r4)
def else_skipped_when_raised(x):
    try:
        y = x + 1
        raise ValueError
    except ValueError:
        y = y - 1
    else:
        y = y * 10
    return y


@program(r4)
def return_in_try_runs_finally(x):
    log = []

    def inner(t):
        try:
            return t + 1
        finally:
            log.append("finally")

    return inner(x), log


@program(r4)
def return_in_except(x):
    def inner(t):
        try:
            raise ValueError
        except ValueError:
            return t * 2
        return t

    return inner(x)


@program(r4)
def finally_return_overrides(x):
    def inner(t):
        try:
            return t + 1
        finally:
            return t + 2  # noqa: B012

    return inner(x)


@program(r4)
def break_statement_in_try_with_finally(x):
    log = []
    for i in range(5):
        try:
            if i == 2:
                break
            x = x + i
        finally:
            log.append(i)
    return x, log


@program(r4)
def continue_in_try_with_finally(x):
    count = 0
    for i in range(4):
        try:
            if i % 2:
                continue
            x = x * 2
        finally:
            count += 1
    return x + count


@program(r4)
def raise_in_handler_sets_context(x):
    try:
        try:
            raise KeyError("first")
        except KeyError:
            raise ValueError("second")  # noqa: B904
    except ValueError as error:
        context = type(error.__context__).__name__
        cause = error.__cause__
    return x + 1, context, cause


@program(r4)
def raise_from_none_suppresses_context(x):
    try:
        try:
            raise KeyError("first")
        except KeyError:
            raise ValueError("second") from None
    except ValueError as error:
        flags = (error.__suppress_context__, error.__cause__ is None)
    return x + 1, flags


@program(r4)
def raise_from_user_cause_reads_its_attribute(x):
    try:
        try:
            raise CodedError("inner", 7)
        except CodedError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as error:
        code = error.__cause__.code
    return x * code


@whole_program(r4)
def wrap_and_reraise_message(x):
    try:
        try:
            raise KeyError("k")
        except KeyError as error:
            raise RuntimeError(f"wrapped {error}")  # noqa: B904
    except RuntimeError as error:
        text = str(error)
    return x + len(text), text


@program(r4)
def raise_breaks_out_of_nested_loops(x):
    try:
        for i in range(3):
            for j in range(3):
                x = x + i * j
                if i * j == 2:
                    raise StopIteration
    except StopIteration:
        x = x * 2
    return x


@program(r4)
def handler_variable_unbound_after(x):
    error = "before"
    try:
        raise ValueError("v")
    except ValueError as error:  # noqa: F841
        pass
    try:
        error  # noqa: B018
    except UnboundLocalError:
        x = x + 1
    return x


@program(r4)
def exception_stored_and_read_after(x):
    errors = []
    for i in range(3):
        try:
            if i != 1:
                raise CodedError("c", i)
        except CodedError as error:
            errors.append(error)
    return x + sum(e.code for e in errors), len(errors)


@program(r4)
def traceback_present_in_handler(x):
    try:
        raise ValueError
    except ValueError as error:
        has = error.__traceback__ is not None
    return x + int(has)


# ----- raised in callees, caught in callers -------------------------------------------------
def _level3(t):
    if t.shape[0] == 4:
        raise CodedError("deep", 2)
    return t


def _level2(t):
    log = []
    try:
        return _level3(t + 1)
    finally:
        log.append("level2")


def _level1(t):
    try:
        return _level2(t * 2)
    except KeyError:
        return t


def _translates(t):
    try:
        _level3(t)
    except CodedError as error:
        raise ValueError(error.code) from error
    return t


def _handles_then_reraises(t, log):
    try:
        _level3(t)
    except CodedError:
        log.append("seen")
        raise


@program(r4)
def raised_three_deep_caught_in_frame(x):
    try:
        y = _level1(x)
    except CodedError as error:
        y = x * error.code
    return y


@program(r4)
def callee_translates_the_error(x):
    try:
        _translates(x)
    except ValueError as error:
        x = x + error.args[0] + int(isinstance(error.__cause__, CodedError))
    return x


@program(r4)
def callee_bare_reraise(x):
    log = []
    try:
        _handles_then_reraises(x, log)
    except CodedError:
        x = x - 1
    return x, log


class _Thrower:
    def __init__(self):
        self.calls = 0

    def risky(self, t):
        self.calls += 1
        raise OtherFailure(self.calls)


@program(r4)
def method_of_a_local_object_raises(x):
    obj = _Thrower()
    for _ in range(2):
        try:
            obj.risky(x)
        except OtherFailure as error:
            x = x + error.args[0]
    return x, obj.calls


class _RaisingModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, t):
        h = self.linear(t)
        try:
            if h.dim() == 1:
                raise IndexError("one dimension")
        except IndexError:
            h = h.unsqueeze(0)
        return h.relu()


torch.manual_seed(0)
_RAISING_MODULE = _RaisingModule()


@program(r4)
def module_forward_catches_its_own_error(x):
    return _RAISING_MODULE(x) + 1


def _base_not_implemented(t):
    raise NotImplementedError


@program(r4)
def not_implemented_falls_back(x):
    try:
        return _base_not_implemented(x)
    except NotImplementedError:
        return x.cos()


# ----- errors raised by containers and objects -------------------------------------------
class _Grid:
    def __init__(self):
        self.cells = {(0, 0): 1}

    def __getitem__(self, key):
        return self.cells[key]


class _Slots:
    __slots__ = ("a",)

    def __init__(self):
        self.a = 2


class _GetattrRaises:
    def __getattr__(self, name):
        if name.startswith("known"):
            return 3
        raise AttributeError(name)


class _RaisingProperty:
    @property
    def value(self):
        raise AttributeError("no value")


@program(r4)
def list_index_out_of_range(x):
    items = [1, 2]
    try:
        v = items[3]
    except IndexError as error:
        v = len(str(error))
    return x + v


@program(r4)
def tuple_index_out_of_range(x):
    try:
        v = (1, 2)[-5]
    except IndexError:
        v = 9
    return x + v


@eager_program(r4)
def dict_pop_missing_key(x):
    table = {"a": 1}
    try:
        v = table.pop("b")
    except KeyError as error:
        v = len(error.args)
    return x * v, table


@program(r4)
def del_missing_dict_key(x):
    table = {"a": 1}
    try:
        del table["z"]
    except KeyError:
        table["z"] = 2
    return x * table["z"]


@program(r4)
def list_index_of_missing_value(x):
    items = [1, 2, 3]
    try:
        where = items.index(9)
    except ValueError:
        where = -1
    return x + where


@program(r4)
def list_remove_missing_value(x):
    items = [1, 2]
    try:
        items.remove(7)
    except ValueError:
        items.append(7)
    return x + len(items), items


@program(r4)
def pop_from_empty_list(x):
    items = []
    try:
        items.pop()
    except IndexError:
        x = x + 1
    return x


@program(r4)
def user_getitem_raises_key_error(x):
    grid = _Grid()
    try:
        v = grid[(1, 1)]
    except KeyError:
        v = grid[(0, 0)] * 5
    return x * v


@program(r4)
def slots_object_missing_attribute(x):
    obj = _Slots()
    try:
        obj.b = 1
    except AttributeError:
        x = x + obj.a
    return x


@program(r4)
def user_getattr_raising_caught(x):
    obj = _GetattrRaises()
    try:
        v = obj.unknown
    except AttributeError as error:
        v = len(str(error)) + obj.known_one
    return x + v


@program(r4)
def getattr_default_on_user_getattr(x):
    obj = _GetattrRaises()
    return x + getattr(obj, "missing", 10) + getattr(obj, "known_two", 0)


@program(r4)
def hasattr_on_raising_property(x):
    return x + int(hasattr(_RaisingProperty(), "value"))


@program(r4)
def add_int_and_str_caught(x):
    try:
        v = 1 + "a"
    except TypeError:
        v = 2
    return x * v


@program(r4)
def unpack_wrong_length_caught(x):
    try:
        a, b = (1, 2, 3)
    except ValueError:
        a, b = 4, 5
    return x + a + b


@program(r4)
def tensor_attribute_missing_caught(x):
    try:
        v = x.not_an_attribute
    except AttributeError:
        v = 3
    return x * v


@program(r4)
def missing_key_in_a_loop_counts(x):
    table = {}
    for word in ("a", "b", "a"):
        try:
            table[word] += 1
        except KeyError:
            table[word] = 1
    return x * table["a"], table


@program(r4)
def int_of_a_float_string_caught(x):
    try:
        v = int("2.5")
    except ValueError:
        v = int(float("2.5"))
    return x * v


# ----- StopIteration and iterators ---------------------------------------------------------
class _Countdown:
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.n <= 0:
            raise StopIteration
        self.n -= 1
        return self.n


def _returns_value():
    yield 1
    return 5


@program(r4)
def user_iterator_drained_by_for(x):
    for i in _Countdown(3):
        x = x + i
    return x


@program(r4)
def user_iterator_next_with_default(x):
    it = _Countdown(1)
    first = next(it, -1)
    second = next(it, -1)
    return x + first + second


@program(r4)
def user_iterator_stop_caught(x):
    it = _Countdown(2)
    total = 0
    while True:
        try:
            total += next(it)
        except StopIteration:
            break
    return x + total


@whole_program(r4)
def generator_return_value_in_stop_iteration(x):
    gen = _returns_value()
    next(gen)
    try:
        next(gen)
    except StopIteration as stop:
        value = stop.value
    return x * value


@program(r4)
def exhausted_generator_next_default(x):
    gen = (i for i in range(1))
    return x + next(gen) + next(gen, 7)


@program(r4)
def list_of_user_iterator(x):
    return x + sum(list(_Countdown(4)))


# ----- with blocks that see or suppress the error -----------------------------------------
class _Records:
    def __init__(self):
        self.seen = []

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        self.seen.append(None if kind is None else kind.__name__)
        return False


class _SuppressesCoded:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if isinstance(value, CodedError):
            self.code = value.code
            return True
        return False


@program(r4)
def exit_sees_the_error_kind(x):
    rec = _Records()
    try:
        with rec:
            x = x + 1
            raise KeyError("k")
    except KeyError:
        x = x * 2
    with rec:
        x = x - 1
    return x, rec.seen


@program(r4)
def exit_suppresses_callee_error(x):
    guard = _SuppressesCoded()
    with guard:
        x = x + 1
        _level3(x)
    return x * guard.code


@program(r4)
def exit_reads_the_error_value(x):
    guard = _SuppressesCoded()
    try:
        with guard:
            raise OtherFailure("other")
    except OtherFailure:
        x = x + 3
    return x, hasattr(guard, "code")


@program(r4)
def suppress_of_several_types(x):
    for cls in (KeyError, IndexError):
        with contextlib.suppress(KeyError, IndexError):
            x = x + 1
            raise cls
    return x


@program(r4)
def nested_suppress_inner_misses(x):
    with contextlib.suppress(ValueError):
        with contextlib.suppress(KeyError):
            x = x + 1
            raise ValueError
        x = x - 100
    return x


@contextlib.contextmanager
def _translating():
    try:
        yield
    except KeyError as error:
        raise CodedError("translated", len(error.args)) from error


@program(r4)
def generator_context_translates_the_error(x):
    try:
        with _translating():
            raise KeyError("k")
    except CodedError as error:
        x = x + error.code
    return x


@contextlib.contextmanager
def _finally_logs(log):
    try:
        yield
    finally:
        log.append("closed")


@program(r4)
def generator_context_finally_on_error(x):
    log = []
    try:
        with _finally_logs(log):
            raise ValueError
    except ValueError:
        x = x + len(log)
    return x, log


# ----- asserts ----------------------------------------------------------------------------
@program(r4)
def assert_message_read(x):
    try:
        assert x.dim() == 2, f"rank {x.dim()}"  # noqa: PT018
    except AssertionError as error:
        text = str(error)
    return x + 1, text


@program(r4)
def torch_assert_on_a_python_bool(x):
    torch._assert(x.shape[0] == 4, "four")
    return x * 2


@whole_program(r4)
def assert_in_a_callee_caught(x):
    def checked(t):
        assert t.shape[0] > 10, "too short"
        return t

    try:
        y = checked(x)
    except AssertionError:
        y = x * 3
    return y


@program(r4)
def assert_without_message_fails(x):
    y = x * 2
    assert y.shape[0] == 5  # noqa: PT018
    return y


@program(r4)
def assert_with_a_computed_message_fails(x):
    y = x + 1
    z = y * 2
    assert z.shape[0] == 5, f"got {z.shape[0]}"
    return z


@program(r4)
def assert_failing_in_a_loop(x):
    for i in range(2):
        x = x + i
        assert x.shape[0] == 5, "in a loop"
    return x


@program(r4)
def assert_failing_in_a_try_block(x):
    try:
        y = x + 1
        assert y.shape[0] == 5, "in a try"
    except ValueError:
        y = x
    return y


@program(r4)
def assert_fails_leaves_the_frame(x):
    y = x + 1
    assert y.shape[0] == 5, "needs five"
    return y


@eager_program(r4)
def torch_assert_fails_leaves_the_frame(x):
    torch._assert(x.shape[0] == 5, "needs five")
    return x * 2


# ----- sys.exc_info, sys.exception, exception groups --------------------------------------
@program(r4)
def exc_info_outside_any_handler(x):
    return x + int(sys.exc_info()[0] is None)


@program(r4)
def exc_info_restored_after_inner_handler(x):
    try:
        raise KeyError("outer")
    except KeyError:
        try:
            raise ValueError("inner")
        except ValueError:
            inner = sys.exc_info()[0].__name__
        outer = sys.exc_info()[0].__name__
    return x + 1, inner, outer


@program(r4)
def exc_info_value_args(x):
    try:
        raise CodedError("c", 6)
    except CodedError:
        code = sys.exc_info()[1].code
    return x * code


@program(r4)
def exc_info_in_a_callee_of_the_handler(x):
    def current():
        return sys.exc_info()[0]

    try:
        raise IndexError
    except IndexError:
        kind = current().__name__
    return x + 1, kind


@whole_program(r4)
def exception_group_caught_as_a_whole(x):
    try:
        raise ExceptionGroup("g", [ValueError(1), KeyError(2)])
    except ExceptionGroup as group:
        count = len(group.exceptions)
    return x + count


@program(r4)
def exception_group_split_by_except_star(x):
    seen = []
    try:
        raise ExceptionGroup("g", [ValueError(1), KeyError(2)])
    except* ValueError:
        seen.append("value")
    except* KeyError:
        seen.append("key")
    return x + len(seen), seen


# ----- escaping the frame ----------------------------------------------------------------
@program(r4)
def user_exception_escapes_with_message(x):
    y = x + 1
    raise CodedError(f"code {y.shape[0]}", 1)


@program(r4)
def escapes_from_a_handler(x):
    try:
        raise KeyError("first")
    except KeyError:
        x = x + 1
        raise ValueError("from the handler")  # noqa: B904


@program(r4)
def escapes_after_finally_ran(x):
    try:
        x = x * 2
        raise IndexError("escaping")
    finally:
        x = x + 1


# ----- graph breaks and try blocks ---------------------------------------------------------
def _try_break_in_callee(t):
    try:
        u = t + 1
        _break()
        u = u * 2
    except ValueError:
        u = t
    return u


def _break_in_callee_handler(t):
    try:
        raise KeyError
    except KeyError:
        _break()
        u = t - 1
    return u


def _break_in_callee_finally(t):
    try:
        u = t + 1
    finally:
        _break()
    return u * 3


def _break_then_raise(t):
    u = t.sin()  # noqa: F841 - an op before the break, unused
    _break()
    raise CodedError("after the break", 4)


def _break_in_else(t):
    try:
        u = t + 1
    except ValueError:
        u = t
    else:
        _break()
        u = u * 2
    return u


@program(r4)
def break_in_a_try_of_a_callee(x):
    a = x.cos()
    return _try_break_in_callee(a) + a


@program(r4)
def break_in_a_handler_of_a_callee(x):
    a = x.cos()
    return _break_in_callee_handler(a) * 2


@program(r4)
def break_in_a_finally_of_a_callee(x):
    a = x.cos()
    return _break_in_callee_finally(a) + 1


@program(r4)
def break_in_an_else_of_a_callee(x):
    a = x.exp()
    return _break_in_else(a) - 1


@program(r4)
def callee_breaks_then_raises_caught_in_frame(x):
    a = x * 2
    try:
        b = _break_then_raise(a)
    except CodedError as error:
        b = a + error.code
    return b


@program(r4)
def break_in_the_frames_handler(x):
    a = x + 1
    try:
        raise ValueError
    except ValueError:
        _break()
        a = a * 2
    return a


@program(r4)
def break_in_the_frames_else(x):
    try:
        a = x + 1
    except ValueError:
        a = x
    else:
        _break()
        a = a * 2
    return a


@program(r4)
def break_after_a_caught_error(x):
    try:
        raise KeyError
    except KeyError:
        a = x + 1
    _break()
    return a * 2


@program(r4)
def break_after_a_suppressed_error(x):
    with contextlib.suppress(KeyError):
        raise KeyError
    a = x + 1
    _break()
    return a * 2


@program(r4)
def break_after_finally_on_a_caught_error(x):
    log = []
    try:
        try:
            raise ValueError("v")
        finally:
            log.append(1)
    except ValueError as error:
        a = x + len(error.args)
    _break()
    return a * 2, log


@program(r4)
def data_branch_after_a_caught_error(x):
    try:
        raise KeyError
    except KeyError:
        a = x + 1
    if a.sum() > 0:
        return a * 2
    return a - 1


def _branches_after_a_caught_error(t):
    try:
        raise KeyError
    except KeyError:
        a = t + 1
    if a.sum() > 0:
        return a * 2
    return a - 1


@program(r4)
def callee_data_branch_after_a_caught_error(x):
    return _branches_after_a_caught_error(x.cos()) + 1


def _catches_then_breaks(t):
    try:
        raise IndexError
    except IndexError:
        u = t.cos()
    _break()
    return u + 1


@program(r4)
def callee_breaks_after_its_caught_error(x):
    return _catches_then_breaks(x * 2) - 1


@program(r4)
def break_in_a_with_that_suppresses(x):
    with contextlib.suppress(KeyError):
        a = x + 1
        _break()
        a = a * 2
    return a


@program(r4)
def break_in_a_callee_of_a_suppressing_with(x):
    a = x * 3
    with contextlib.suppress(KeyError):
        a = _try_break_in_callee(a)
    return a + 1


# ----- graph breaks nested in callees ------------------------------------------------------
def _d3(t):
    u = t * 3
    _break()
    return u + 1


def _d2(t):
    v = t.sin()
    w = _d3(v)
    return v * w


def _d1(t):
    a = t + 2
    b = _d2(a)
    return a - b


def _two_breaks(t):
    u = t + 1
    _break()
    u = u * 2
    _break()
    return u - 3


def _break_in_loop(t):
    for i in range(3):
        t = t + i
        _break()
    return t


def _break_in_nested_loops(t):
    for _ in range(2):
        for j in range(2):
            t = t * 1.5 + j
        _break()
    return t


def _break_in_while(t):
    n = 0
    while n < 2:
        t = t.cos()
        _break()
        n += 1
    return t


def _loop_calls_breaking(t):
    for _ in range(2):
        t = _d3(t)
    return t


def _returns_tuple_after_break(t):
    a = t + 1
    _break()
    return a, a * 2


def _appends_after_break(t, out):
    out.append(t + 1)
    _break()
    out.append(t * 2)
    return len(out)


def _breaks_with_keywords(t, *, scale=1.0, shift=0.0):
    u = t * scale
    _break()
    return u + shift


def _breaks_with_star_args(*ts):
    total = ts[0]
    _break()
    for t in ts[1:]:
        total = total + t
    return total


def _breaks_in_no_grad_callee(t):
    with torch.no_grad():
        u = t * 2
        _break()
        u = u + 1
    return u + t


def _breaks_in_enable_grad_callee(t):
    with torch.enable_grad():
        u = t * 2
        _break()
        u = u.sin()
    return u


def _breaks_in_autocast(t):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        u = torch.mm(t, t)
        _break()
        u = torch.mm(u, t)
    return u.float()


class _Tracks:
    def __init__(self):
        self.depth = 0
        self.log = []

    def __enter__(self):
        self.depth += 1
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        self.log.append("exit")
        return False


_TRACKS = _Tracks()


def _breaks_in_user_context(t):
    with _TRACKS:
        u = t + 1
        _break()
        u = u * 2
    return u


@contextlib.contextmanager
def _scope(log):
    log.append("in")
    yield
    log.append("out")


def _breaks_in_generator_context(t, log):
    with _scope(log):
        u = t + 1
        _break()
        u = u * 2
    return u


@program(r4)
def break_three_calls_deep(x):
    return _d1(x.exp()) * 2


@program(r4)
def break_three_deep_twice(x):
    return _d1(x) + _d1(x * 2)


@program(r4)
def two_breaks_in_one_callee(x):
    a = x.cos()
    return _two_breaks(a) + a


@program(r4)
def break_in_a_callees_loop(x):
    return _break_in_loop(x.sin()) * 2


@program(r4)
def break_in_a_callees_nested_loops(x):
    return _break_in_nested_loops(x + 1) - 1


@program(r4)
def break_in_a_callees_while(x):
    return _break_in_while(x) + 1


@program(r4)
def callee_loop_calls_a_breaking_callee(x):
    return _loop_calls_breaking(x.sin()) + 1


@program(r4)
def frame_loop_calls_a_two_deep_break(x):
    for _ in range(2):
        x = _d2(x)
    return x


@program(r4)
def callee_returns_a_tuple_after_break(x):
    a, b = _returns_tuple_after_break(x * 2)
    return a + b


@program(r4)
def callee_appends_to_the_callers_list(x):
    out = []
    n = _appends_after_break(x, out)
    return out[0] + out[1] * n


@program(r4)
def breaking_callee_with_keywords(x):
    return _breaks_with_keywords(x + 1, scale=2.0, shift=1.0)


@program(r4)
def breaking_callee_with_star_args(x):
    return _breaks_with_star_args(x, x + 1, x * 2)


@program(r4)
def break_in_a_callees_no_grad(x):
    return _breaks_in_no_grad_callee(x) * 2


@program(lambda: torch.randn(4, requires_grad=True))
def break_in_a_callees_no_grad_with_grad_input(x):
    return _breaks_in_no_grad_callee(x) * 2


@program(lambda: torch.randn(4, requires_grad=True))
def break_in_a_callees_enable_grad_under_no_grad(x):
    with torch.no_grad():
        y = _breaks_in_enable_grad_callee(x)
    return y + 1


@program(lambda: torch.randn(4, 4))
def break_in_a_callees_autocast(x):
    return _breaks_in_autocast(x) + 1


@program(r4)
def break_in_a_callees_user_context(x):
    y = _breaks_in_user_context(x.sin())
    return y + _TRACKS.depth


@program(r4)
def break_in_a_callees_generator_context(x):
    log = []
    y = _breaks_in_generator_context(x, log)
    return y, log


@program(r4)
def break_in_a_callee_inside_the_frames_user_context(x):
    with _TRACKS:
        y = _d3(x + 1)
    return y * 2


def _two_deep_in_no_grad(t):
    with torch.no_grad():
        return _d2(t)


@differing_program(lambda: torch.randn(4, requires_grad=True))
def break_two_deep_below_a_callees_no_grad(x):
    return _two_deep_in_no_grad(x) + x


def _closure_maker(scale):
    def inner(t):
        u = t * scale
        _break()
        return u + scale

    return inner


_CLOSED = _closure_maker(3.0)


@program(r4)
def breaking_closure_from_outside(x):
    return _CLOSED(x + 1) * 2


@program(r4)
def breaking_closure_made_in_the_frame(x):
    scale = 2.0

    def inner(t):
        u = t * scale
        _break()
        return u + scale

    return inner(x) + inner(x + 1)


# ----- breaks in methods reached through a module's forward --------------------------------
class _Helper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def project(self, t):
        h = self.linear(t)
        _break()
        return h.tanh()

    def forward(self, t):
        return self.project(t) + t


class _Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.helper = _Helper()
        self.scale = torch.nn.Parameter(torch.ones(4))

    def forward(self, t):
        return self.helper(t * self.scale) * 2


class _LoopsOverBlocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([_Helper() for _ in range(2)])

    def forward(self, t):
        for block in self.blocks:
            t = block(t)
        return t


class _StaticBreaks(torch.nn.Module):
    @staticmethod
    def shift(t):
        _break()
        return t + 1

    def forward(self, t):
        return self.shift(t.sin()) * 2


torch.manual_seed(0)
_OUTER = _Outer()
_LOOPS = _LoopsOverBlocks()
_STATIC = _StaticBreaks()


@program(r4)
def method_break_through_forward(x):
    return _OUTER.helper(x) + 1


@program(r4)
def method_break_two_modules_deep(x):
    return _OUTER(x) - 1


@program(r4)
def method_break_in_a_module_list_loop(x):
    return _LOOPS(x)


@program(r4)
def static_method_break_through_forward(x):
    return _STATIC(x)


@program(r4)
def direct_call_of_the_breaking_method(x):
    return _OUTER.helper.project(x) * 3


# ----- torch function modes -------------------------------------------------------------
class _AddsOne(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.add:
            return func(*args, **kwargs) + 1
        return func(*args, **kwargs)


@eager_program(r4)
def break_inside_a_mode_block(x):
    with _AddsOne():
        y = torch.add(x, 1)
        _break()
        y = torch.add(y, 2)
    return y * 2


@eager_program(r4)
def break_in_a_callee_inside_a_mode_block(x):
    with _AddsOne():
        y = torch.add(x, 1)
        y = _d3(y)
    return y


@program(r4)
def break_after_a_mode_block(x):
    with _AddsOne():
        y = torch.add(x, 1)
    _break()
    return torch.add(y, 1)


def _mode_in_callee(t):
    with _AddsOne():
        u = torch.add(t, 1)
        _break()
        return torch.add(u, 1)


@eager_program(r4)
def break_inside_a_callees_mode_block(x):
    return _mode_in_callee(x) * 2


# ----- more breaks in callees: outside writes, recursion, dunders, handlers ---------------------


class _Counts:
    def __init__(self):
        self.value = 0


_COUNTS = _Counts()


def _sets_then_breaks(t):
    _COUNTS.value = _COUNTS.value + 1
    _break()
    return t * _COUNTS.value


def _fills(t, out):
    out.append(t + 1)
    _break()
    out.append(t + 2)


@program(r4)
def caller_iterates_list_a_breaking_callee_filled(x):
    out = [x]
    _fills(x, out)
    total = x * 0
    for item in out:
        total = total + item
    return total


def _recurse(t, n):
    if n == 0:
        _break()
        return t
    return _recurse(t + n, n - 1) * 2


@program(r4)
def recursion_breaking_three_deep(x):
    return _recurse(x, 3)


def _breaks_then_raises(t):
    u = t + 1  # noqa: F841 - an op before the break, unused
    _break()
    raise KeyError("deep")


def _middle_catches(t):
    try:
        _breaks_then_raises(t)
    except KeyError:
        t = t * 3
    _break()
    return t


@program(r4)
def raised_after_a_break_caught_in_a_middle_callee(x):
    return _middle_catches(x.sin()) + 1


class _ExitBreaks:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _break()
        return False


@differing_program(r4)
def break_inside_a_user_exit(x):
    with _ExitBreaks():
        y = x + 1
    return y * 2


class _InitBreaks:
    def __init__(self, t):
        self.t = t + 1
        _break()
        self.u = self.t * 2


@program(r4)
def break_inside_an_init(x):
    obj = _InitBreaks(x)
    return obj.t + obj.u


class _PropBreaks:
    def __init__(self, t):
        self.t = t

    @property
    def doubled(self):
        _break()
        return self.t * 2


@differing_program(r4)
def break_inside_a_property(x):
    obj = _PropBreaks(x + 1)
    return obj.doubled + 1


class _ItemBreaks:
    def __init__(self, t):
        self.t = t

    def __getitem__(self, i):
        _break()
        return self.t * i


@differing_program(r4)
def break_inside_a_getitem(x):
    return _ItemBreaks(x)[3] - 1


def _handler_breaks(t):
    try:
        _breaks_then_raises(t)
    except KeyError:
        _break()
        t = t - 1
    return t


@program(r4)
def break_in_a_callees_handler_after_deeper_raise(x):
    return _handler_breaks(x) * 2


def _with_suppress_breaks(t):
    with contextlib.suppress(KeyError):
        _breaks_then_raises(t)
    return t + 5


@program(r4)
def callee_suppress_around_a_breaking_raiser(x):
    return _with_suppress_breaks(x) * 2


_GLOBAL_SCALE = 2.0


def _rebinds_global(t):
    global _GLOBAL_SCALE
    _GLOBAL_SCALE = 3.0
    _break()
    return t * _GLOBAL_SCALE


@program(r4)
def callee_rebinds_a_global_before_break(x):
    global _GLOBAL_SCALE
    _GLOBAL_SCALE = 2.0
    y = _rebinds_global(x)
    return y + _GLOBAL_SCALE


def _two_level_loop(t):
    for i in range(2):
        t = _sets_then_breaks(t) + i
    return t


@program(r4)
def loop_in_callee_calling_a_breaking_writer(x):
    _COUNTS.value = 0
    return _two_level_loop(x)


def _finally_breaks(t, log):
    try:
        return t + 1
    finally:
        log.append("f")
        _break()


@program(r4)
def callee_finally_breaks_after_return_value(x):
    log = []
    y = _finally_breaks(x, log)
    return y, log


def _kw_only_breaks(t, *, scale):
    _break()
    return t * scale


@program(r4)
def breaking_callee_result_in_a_dict(x):
    d = {"a": _kw_only_breaks(x, scale=2), "b": x}
    return d["a"] + d["b"]


@program(r4)
def breaking_callee_in_a_list_comprehension(x):
    return sum([_kw_only_breaks(x, scale=i) for i in range(3)])


# ----- exception objects made each call ----------------------------------------------------
_RAISED_LOG: list = []


class LoggedError(Exception):
    def __init__(self, message):
        _RAISED_LOG.append(message)
        self.seen = len(_RAISED_LOG)


def logged_error_counts(x):
    try:
        raise LoggedError("m")
    except LoggedError as error:
        return x + error.seen


def traceback_of_exc_info(x):
    try:
        raise ValueError
    except ValueError:
        traceback = sys.exc_info()[2]
    return x + int(traceback is None)


def exception_made_and_returned(x):
    return x + 1, ValueError("a")


class _SeesTraceback:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        self.had = traceback is not None
        return True


def exit_sees_a_traceback(x):
    guard = _SeesTraceback()
    with guard:
        raise KeyError
    return x + int(guard.had)


def test_exception_init_runs_every_call():
    # the class's own __init__ appends to an outside list: eagerly every call does
    compiled = dynamo_capture.optimize(logged_error_counts, backend=CountingBackend())
    _RAISED_LOG.clear()
    got = [compiled(torch.zeros(2)) for _ in range(3)]
    assert len(_RAISED_LOG) == 3
    _RAISED_LOG.clear()
    expected = [logged_error_counts(torch.zeros(2)) for _ in range(3)]
    assert_same(got, expected)


@pytest.mark.parametrize("fn", [traceback_of_exc_info, exit_sees_a_traceback])
def test_raised_exception_has_a_traceback(fn):
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    for _ in range(2):
        x = torch.randn(3)
        assert_same(compiled(x), fn(x))


def test_exception_returned_is_a_new_object_each_call():
    compiled = dynamo_capture.optimize(exception_made_and_returned, backend=CountingBackend())
    first, second = compiled(torch.zeros(2))[1], compiled(torch.zeros(2))[1]
    assert first is not second and type(first) is ValueError and first.args == ("a",)


def exception_holding_a_tensor_returned(x):
    try:
        raise ValueError(x * 2)
    except ValueError as error:
        return error


@pytest.mark.parametrize(
    ("fn", "named"),
    [
        (exception_made_and_returned, "ValueError made in the frame leaves"),
        (exception_holding_a_tensor_returned, "ValueError made in the frame leaves"),
    ],
)
def test_fullgraph_names_the_exception_construct(fn, named):
    compiled = dynamo_capture.optimize(fn, backend="eager", fullgraph=True)
    with pytest.raises(dynamo_capture.Unsupported, match=named):
        compiled(torch.randn(4))


def reads_the_traceback_frame(x):
    try:
        raise ValueError
    except ValueError as error:
        line = error.__traceback__.tb_lineno
    return x + line


def test_reading_a_traceback_breaks():
    # capture's traceback is not the user's frame: reading anything of it breaks
    compiled = dynamo_capture.optimize(reads_the_traceback_frame, backend=CountingBackend())
    x = torch.randn(3)
    assert_same(compiled(x), reads_the_traceback_frame(x))
    assert any("traceback" in str(b) for b in compiled.graph_breaks)
    with pytest.raises(dynamo_capture.Unsupported, match="traceback"):
        dynamo_capture.optimize(reads_the_traceback_frame, backend="eager", fullgraph=True)(x)


# ----- state read by handlers, changed between calls ----------------------------------------
CAUGHT = (KeyError,)
KINDS = (LookupError,)


def _set_caught(kinds):
    def between(index, fn):
        global CAUGHT, KINDS
        CAUGHT = KINDS = kinds[index % len(kinds)]

    return between


def except_on_a_global_tuple_rebound():
    def fn(x):
        try:
            raise KeyError("k")
        except CAUGHT:
            return x + 1
        except Exception:  # noqa: BLE001
            return x - 1

    return {"fn": fn, "args": lambda: (torch.randn(3),), "calls": 3,
            "between": _set_caught([(KeyError,), (ValueError,)])}  # fmt: skip


def isinstance_on_a_global_tuple_rebound():
    def fn(x):
        try:
            raise KeyError("k")
        except Exception as error:  # noqa: BLE001
            return x + int(isinstance(error, KINDS))

    return {"fn": fn, "args": lambda: (torch.randn(3),), "calls": 3,
            "between": _set_caught([(LookupError,), (ValueError,)])}  # fmt: skip


def exception_init_appends_to_a_list():
    seen = []

    class Seen(Exception):
        def __init__(self, message):
            seen.append(message)
            self.count = len(seen)

    def fn(x):
        try:
            raise Seen("m")
        except Seen as error:
            return x * error.count

    return {"fn": fn, "args": lambda: (torch.randn(3),), "calls": 3, "state": lambda fn: seen}


def exit_flag_changed_between_calls():
    class Gate:
        swallow = True

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.swallow

    def fn(x):
        try:
            with Gate():
                raise KeyError
            return x + 1
        except KeyError:
            return x - 1

    def between(index, fn):
        fn.__closure__[0].cell_contents.swallow = index == 0

    return {"fn": fn, "args": lambda: (torch.randn(3),), "calls": 3, "between": between}


def callee_writes_an_outside_attribute_across_a_break():
    box = _Counts()

    def writes_then_breaks(t):
        box.value = box.value + 1
        _break()
        return t * box.value

    def fn(x):
        y = writes_then_breaks(x)
        return y + box.value

    return {"fn": fn, "args": lambda: (torch.randn(3),), "calls": 3, "state": lambda fn: box.value}


STATEFUL = [
    callee_writes_an_outside_attribute_across_a_break,
    except_on_a_global_tuple_rebound,
    isinstance_on_a_global_tuple_rebound,
    exit_flag_changed_between_calls,
]


@pytest.mark.parametrize("program", STATEFUL, ids=[p.__name__ for p in STATEFUL])
def test_stateful_exception_program_like_torch(program):
    check_program_like_torch(program)


def test_exception_init_writing_a_closure_list_runs_every_call():
    # the class's own __init__ appends to its factory's list: eagerly each call does
    # (capture reads the list's length each call: a recompile per call, where
    # torch.compile compiles once)
    expected, expected_state = run_program(exception_init_appends_to_a_list, lambda f: f)
    compile_fn = functools.partial(dynamo_capture.optimize, backend=CountingBackend())
    got, state = run_program(exception_init_appends_to_a_list, compile_fn)
    assert_same_results(got, expected)
    assert state == expected_state == ["m"] * 3


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_exception_and_nested_break_program_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


@pytest.mark.parametrize("name", list(WHOLE_PROGRAMS))
def test_program_captured_whole_where_torch_runs_eagerly(name):
    check_captured_whole(*WHOLE_PROGRAMS[name])


@pytest.mark.parametrize("name", list(EAGER_PROGRAMS))
def test_program_equals_eager_where_torch_differs(name):
    check_like_eager(*EAGER_PROGRAMS[name])


@pytest.mark.parametrize("name", list(DIFFERING_PROGRAMS))
def test_program_equals_eager_where_counts_differ(name):
    check_like_eager(*DIFFERING_PROGRAMS[name])
