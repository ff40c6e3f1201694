"""Exceptions raised by capture."""

from __future__ import annotations

import linecache
import sys
import types
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BackendCompilerFailed",
    "CaptureError",
    "CAPTURED_TRACEBACK",
    "CaptureUnavailableError",
    "ExceptionRaised",
    "GraphValueArgument",
    "graph_value_arguments",
    "NeedsEagerFrame",
    "raised_by_python",
    "raised_ahead",
    "RecompileError",
    "RegionsCalledOnce",
    "StanceError",
    "TensorHookEscapes",
    "Unsupported",
    "UserLocation",
]


class CaptureError(Exception):
    """Base of every error raised by dynamo_capture."""


class CaptureUnavailableError(CaptureError, NotImplementedError):
    """Compiled code was called, but this build of dynamo_capture cannot capture bytecode yet."""


class BackendCompilerFailed(CaptureError):
    """The backend raised while compiling a captured graph; the original error is `__cause__`."""

    def __init__(self, backend: object, graph_name: str, where: str, error: BaseException) -> None:
        self.backend_name = getattr(backend, "__name__", None) or type(backend).__name__
        self.graph_name = graph_name
        self.where = where
        super().__init__(
            f"backend {self.backend_name!r} failed to compile graph {graph_name} of {where}: "
            f"{type(error).__name__}: {error}\n"
            "The captured graph is fine for eager; try backend='eager' to confirm, and report the "
            "backend's error (the original is chained as __cause__)."
        )


class RecompileError(CaptureError, RuntimeError):
    """A recompile was needed under the stance "fail_on_recompile" (a RuntimeError, as
    torch.compile raises there)."""


class StanceError(CaptureError, ValueError):
    """An unknown stance, or a stance option that does not go with it."""


@dataclass(frozen=True, slots=True)
class UserLocation:
    """A place in the user's code: file, line, function and the line's text."""

    filename: str
    line: int
    function: str

    @property
    def text(self) -> str:
        return linecache.getline(self.filename, self.line).strip()

    def __str__(self) -> str:
        return f'File "{self.filename}", line {self.line}, in {self.function}\n    {self.text}'


class Unsupported(CaptureError):
    """Capture met a construct it cannot put in a graph.

    `reason` names the construct; `where` lists the user's frames, innermost last
    (the inlined call chain), so the message points at the user's file and line.
    """

    def __init__(self, reason: str, where: tuple[UserLocation, ...] = ()) -> None:
        self.reason = reason
        self.where = where
        self.offset: int | None = None  # the compiled frame's instruction where capture stopped
        self.contexts: tuple[Any, ...] = ()  # grad/autocast blocks open there (resume.ContextSpec)
        self.callee: Any = None  # the inlined call the break happened in (interpreter.Callee)
        # the failing call runs eagerly on its own (a disabled function, a logging call):
        # the graph before it computes its arguments and the code resumes after the call
        self.eager_call = False
        # an instruction-level cut: (offset where the failing call's sequence starts, stack
        # depth there, offset after the call), when the values below it can leave a graph
        self.call_cut: tuple[int, int, int, int] | None = None
        # the call lies in `for` loops whose iterators ride below its partial values
        self.call_cut_in_loops = False
        self.plain_args = False  # the failing call's arguments are tensors or constants
        self.stack_nulls: tuple[int, ...] = ()  # where NULLs lie below the failing call
        # the code of the function made in the frame whose call broke (FunctionValue)
        self.callee_code: Any = None
        # the code raised StopIteration outside any try block up to where it is caught:
        # a user iterator's __next__ ending the iteration
        self.stop_iteration = False
        # an exception the code raised was caught by no handler of the compiled frame
        self.escapes = False
        # a `with` block on a context capture cannot re-enter is open where it stopped
        self.in_unknown_with = False
        # an explicit __enter__/__exit__ call on a grad-mode context (ContextSwitchCall)
        self.context_switch = isinstance(self, ContextSwitchCall)
        # no part of the frame may be compiled: a split would hand the eager part a
        # value capture changed (NeedsEagerFrame)
        self.whole_frame = isinstance(self, NeedsEagerFrame)
        # a loop open where capture stopped iterates what torch.compile does not resume
        # inside (a generator, a dict, an enumerate of a list): the frame runs eagerly,
        # its calls compiled
        self.loop_not_resumed = False
        # a `with` torch.compile cannot resume from: on a context manager made outside
        # the frame or of a kind not traced (opcodes_flow.before_with)
        self.outside_context = False
        # a local the rest of the frame reads holds a context manager no resume function
        # can be handed (a generator's context entered by hand): the frame runs eagerly,
        # its calls compiled, as torch.compile does
        self.cannot_resume = False
        # raised reading an attribute torch.compile breaks on when read (not when called):
        # it cannot resume after that instruction (capture_frame cuts the frame before it)
        self.read_not_resumed = False
        # functools.partialmethod objects whose function runs as a compiled frame of its
        # own while the frame runs eagerly (break_callees.partialmethod_shadows)
        self.partial_methods: list[Any] = []
        # the frame is cut at the statement where capture stopped; the rest runs eagerly
        self.rest_eager = False
        # the break lies where torch.compile cannot resume (a module it refuses to wrap, as
        # an RNN): the frame is compiled up to the last statement boundary before it whose
        # graph has more than one call, the rest runs eagerly; else the frame runs eagerly
        self.rest_from_checkpoint = False
        # the truth value of a tensor a jump of the frame tests (`if t.sum() > 0:`); set by
        # capture to the jump's offset when that jump is a POP_JUMP of the frame itself
        self.data_branch = False
        self.branch_jump: int | None = None
        # where NULLs lie among the values handed on below the tested one (an enclosing
        # call's callable slot: `f(x, t.sum() > 0 and 3)`)
        self.branch_nulls: tuple[int, ...] = ()
        # (offset, call nodes of the graph so far) where the compiled frame's stack was
        # empty, in the order run (capture_frame): where the frame may be cut before a
        # break it cannot resume from
        self.checkpoints: tuple[tuple[int, int], ...] = ()
        super().__init__(self._message())

    def _message(self) -> str:
        if not self.where:
            return self.reason
        frames = "\n".join(f"  {location}" for location in self.where)
        return (
            f"{self.reason}\n{frames}\n"
            "Capture cannot put this in a graph. Rewrite that line, move it out of the compiled "
            "function, or compile with fullgraph=False to run this function eagerly."
        )

    def located(self, where: tuple[UserLocation, ...]) -> Unsupported:
        """The same error, pointing at `where` (kept if it already has a location)."""
        if self.where:
            return self
        located = Unsupported(self.reason, where)
        located.callee = self.callee
        located.eager_call = self.eager_call
        located.stop_iteration = self.stop_iteration
        located.context_switch = self.context_switch
        located.whole_frame = self.whole_frame
        located.outside_context = self.outside_context
        located.data_branch = self.data_branch
        located.cannot_resume = self.cannot_resume
        located.read_not_resumed = self.read_not_resumed
        located.rest_from_checkpoint = self.rest_from_checkpoint
        located.partial_methods = self.partial_methods
        return located


class TensorHookEscapes(CaptureError):
    """A tensor whose hook capture put in the graph leaves it (an output, a value handed
    to an eager part): a hook registered on it outside would run before the graph's.
    Capture starts again with `Tensor.register_hook` run eagerly (tensor_hooks)."""


class RegionsCalledOnce(CaptureError):
    """nested_compile_region functions the graph calls from one place only: as
    torch.compile inlines such a region after tracing, capture starts again with them
    traced in place (`codes`: their code objects; control_flow)."""

    def __init__(self, codes: frozenset[Any]) -> None:
        self.codes = codes
        super().__init__(f"nested_compile_region functions called once: {len(codes)}")


class NeedsEagerFrame(Unsupported):
    """A construct the frame's compiled parts cannot hand to an eager part as eager
    would see it (a generator with side effects left unfinished where a part ends, one
    paused inside a try/finally, a `throw`): the whole frame runs eagerly."""


class ContextSwitchCall(Unsupported):
    """An explicit `__enter__()` / `__exit__()` call on a grad-mode context: torch.compile
    breaks the graph there. Inside a `with` block the frame runs eagerly: the parts of a
    split frame enter that block again, which would undo the mode the call set."""


class ExceptionRaised(Unsupported):
    """The captured code raised `value` (a PythonValue holding the exception instance).

    The interpreter unwinds to the handler the code's exception table names; one that
    leaves the compiled frame uncaught is a break that runs the frame eagerly, where
    the exception is raised again with its type and message.
    """

    def __init__(self, value: Any) -> None:
        self.value = value
        exception = value.obj
        if isinstance(exception, BaseException) and exception.__traceback__ is None:
            # raised: eagerly it has a traceback from here on (`e.__traceback__`,
            # `sys.exc_info()[2]`, `__exit__`'s third argument are not None)
            exception.__traceback__ = CAPTURED_TRACEBACK
        super().__init__(f"the code raises an exception while capturing: {exception!r}")
        self.stop_iteration = isinstance(exception, StopIteration)
        self.plain_assert = False  # raised by an `assert` with no computed message


def _captured_traceback() -> types.TracebackType:
    frame = sys._getframe()
    return types.TracebackType(None, frame, frame.f_lasti, frame.f_lineno)


# NOTE: the traceback every exception raised in captured code holds: not None, as
# eagerly, but no frame of the user's: reading anything of it breaks (attributes.py)
CAPTURED_TRACEBACK = _captured_traceback()


def raised_by_python(error: BaseException) -> ExceptionRaised:
    """The code raises `error`, which Python raised computing on capture-time constants
    (`1 / 0`, `int("x")`): the same exception, raised in the captured code."""
    from dynamo_capture.values import PythonValue

    return ExceptionRaised(PythonValue(error.with_traceback(None)))


def raised_ahead(error: ExceptionRaised, what: str) -> Unsupported:
    """A break for an exception raised by code capture runs ahead of eager's order (a
    user iterator drained when a loop starts):
    eagerly it is raised later, after the items before it were used."""
    return Unsupported(f"{what} raised {error.value.obj!r} (capture runs it ahead of time)")


class GraphValueArgument:
    """Stands, in the args of an exception made while capturing, for an argument known only
    when the graph runs (`ValueError(x * 2)`): `value` is capture's Value of it.

    Such an exception is read through `.args` only (the Values again): folding it as a
    constant (`str(e)`, `repr`, copies, its methods) breaks, and so does its leaving the
    compiled part (returned, stored outside, handed on at a break), where the frame runs
    eagerly and makes the real one. Any other use of a stand-in raises Unsupported.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:  # the message of ExceptionRaised only
        return "<a value of the captured graph>"

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise Unsupported(
            "an exception argument known only when the graph runs, read as a constant"
        )

    __str__ = __format__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __hash__ = __bool__ = __len__ = __iter__ = __getitem__ = __call__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _refuse
    __neg__ = __pos__ = __abs__ = __int__ = __float__ = __index__ = _refuse
    __getattr__ = __reduce__ = __reduce_ex__ = __copy__ = __deepcopy__ = _refuse


def graph_value_arguments(exception: BaseException) -> bool:
    """Whether an exception made while capturing holds arguments known only when the graph
    runs (GraphValueArgument)."""
    return any(type(argument) is GraphValueArgument for argument in exception.args)
