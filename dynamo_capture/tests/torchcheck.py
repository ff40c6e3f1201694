"""Run a program under ember's capture and under torch.compile with counting backends.

`check_like_torch(fn, make_args)` calls both (and eager) on fresh arguments, `calls`
times; it asserts the results equal eager's (values, types, requires_grad; or the
exception eager raises, its type and message) and that
ember's backend got as many graphs, with as many operations, as torch.compile's.
`check_like_eager` is its first half alone (where torch.compile's own values or breaks
differ from eager's) and `check_captured_whole` that half for a frame captured in one
graph with no break.
torch.compile is only the reference here; capture never imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same, clone_inputs


def _run_all(
    compiled: Callable[..., Any],
    fn: Callable[..., Any],
    make_args: Any,
    calls: int,
    seeded: bool = True,
):
    """Each call's results (or exception) of `compiled` equal `fn`'s, on fresh arguments.
    `seeded`: each side starts from torch.manual_seed(0), so a program drawing random
    numbers draws the same on both; unseeded, the generator is left alone."""
    seed = torch.manual_seed if seeded else lambda _: None
    for _ in range(calls):
        args = make_args()
        # NOTE: each side starts from the same grad mode and must leave the same one:
        # some torch versions' eager itself leaves a mode set (set_grad_enabled used as a
        # decorator sets it when constructed), and the compiled side must do likewise.
        start_mode = torch.is_grad_enabled()
        seed(0)
        try:
            expected = fn(*clone_inputs(args))
        except Exception as eager_error:  # noqa: BLE001 - compiled must raise the same
            torch.set_grad_enabled(start_mode)
            seed(0)
            with pytest.raises(type(eager_error)) as raised:
                compiled(*clone_inputs(args))
            torch.set_grad_enabled(start_mode)
            assert str(raised.value) == str(eager_error)
            continue
        eager_end_mode = torch.is_grad_enabled()
        torch.set_grad_enabled(start_mode)
        seed(0)
        try:
            got = compiled(*clone_inputs(args))
            compiled_end_mode = torch.is_grad_enabled()
        finally:
            torch.set_grad_enabled(start_mode)
        assert_same(got, expected)
        assert compiled_end_mode == eager_end_mode, "the grad mode left after the call differs"


def torch_counts(
    fn: Callable[..., Any], make_args: Any, calls: int = 2, **settings: Any
) -> tuple[int, int]:
    import torch._dynamo
    import torch._dynamo.testing

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    _run_all(torch.compile(fn, backend=counter, **settings), fn, make_args, calls)
    torch._dynamo.reset()
    return counter.frame_count, counter.op_count


def check_like_torch(
    fn: Callable[..., Any],
    make_args: Callable[[], tuple[Any, ...]],
    *,
    calls: int = 2,
    ops: bool = True,
    **settings: Any,
) -> CountingBackend:
    """Ember's results equal eager's; its graph (and op) counts equal torch.compile's.
    `settings` (`dynamic=True`, say) go to both compilers."""
    counter = check_like_eager(fn, make_args, calls=calls, seeded=True, **settings).backend
    try:
        frames, op_count = torch_counts(fn, make_args, calls, **settings)
    except AssertionError as error:  # the reference itself differs from eager here
        pytest.skip(f"torch.compile {torch.__version__} differs from eager: {error}")
    same = counter.frame_count == frames and (not ops or counter.op_count == op_count)
    if not same and torch.__version__ < REFERENCE_TORCH:
        # NOTE: counts are compared with the torch the project pins; other versions'
        # torch.compile breaks and counts differently on some constructs.
        pytest.skip(f"torch.compile {torch.__version__} counts differently from {REFERENCE_TORCH}")
    assert counter.frame_count == frames, f"graphs: ember {counter.frame_count}, torch {frames}"
    if ops:
        assert counter.op_count == op_count, f"ops: ember {counter.op_count}, torch {op_count}"
    return counter


REFERENCE_TORCH = "2.13"


def check_like_eager(
    fn: Callable[..., Any],
    make_args: Callable[[], tuple[Any, ...]],
    *,
    calls: int = 2,
    seeded: bool = False,
    **settings: Any,
) -> dynamo_capture.CompiledCallable:
    """Ember's results (or exception) equal eager's, `calls` times on fresh arguments,
    with no torch.compile counts to compare (`seeded`: each side from manual_seed(0), as
    `check_like_torch` runs them). `settings` go to dynamo_capture.optimize; the
    compiled callable is returned, its `backend` the CountingBackend of its graphs."""
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend(), **settings)
    _run_all(compiled, fn, make_args, calls, seeded)
    return compiled


def check_captured_whole(
    fn: Callable[..., Any], make_args: Callable[[], tuple[Any, ...]], **settings: Any
) -> dynamo_capture.CompiledCallable:
    """`check_like_eager`, and the frame is one graph with no break (where torch.compile
    breaks or runs it eagerly)."""
    compiled = check_like_eager(fn, make_args, **settings)
    assert compiled.backend.frame_count == 1, f"{compiled.backend.frame_count} graphs"
    assert not compiled.graph_breaks, f"breaks: {compiled.graph_breaks}"
    return compiled


def program_registry() -> tuple[dict[str, Any], Callable[..., Any]]:
    """A corpus's table of programs and the decorator registering one in it:
    `@program(make_a, make_b)` makes its arguments with the makers (one tensor of 3 when
    none are given)."""
    programs: dict[str, Any] = {}

    def program(*argument_makers: Callable[[], Any]) -> Callable[..., Any]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            if argument_makers:
                programs[fn.__name__] = (fn, lambda: tuple(make() for make in argument_makers))
            else:
                programs[fn.__name__] = (fn, lambda: (torch.randn(3),))
            return fn

        return register

    return programs, program
