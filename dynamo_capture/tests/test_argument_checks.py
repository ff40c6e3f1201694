"""Public arguments of capture checked at the call: stances, disable, what a backend returns,
and inputs outside their mark_dynamic range (an error, as in torch; never eager in silence)."""

from __future__ import annotations

import pytest
import torch

import dynamo_capture
from dynamo_capture import BackendCompilerFailed, StanceError, disable, set_stance
from guards import ConstraintViolationError, mark_dynamic


def f(x):
    return x.sin() + 1


@pytest.mark.parametrize(
    ("args", "kwargs", "words"),
    [
        ((["force_eager"],), {}, ["['force_eager']", "the stances are"]),
        ((3,), {}, ["3", "the stances are"]),
        (("default",), {"force_backend": 1.5}, ["force_backend", "1.5", "backend callable"]),
        (("default",), {"skip_guard_eval_unsafe": 1}, ["skip_guard_eval_unsafe", "1"]),
    ],
)
def test_set_stance_rejects_bad_arguments(args, kwargs, words):
    with pytest.raises(StanceError) as info:
        set_stance(*args, **kwargs)
    for word in words:
        assert word in str(info.value)
    assert dynamo_capture.current_stance().name == "default"


def test_disable_rejects_bad_arguments():
    with pytest.raises(TypeError, match="recursive must be True or False, got 'x'"):
        disable(f, recursive="x")
    with pytest.raises(TypeError, match="recursive must be True or False"):
        disable(recursive=None)
    with pytest.raises(TypeError, match="reason must be None or a str, got 3"):
        disable(f, reason=3)


def test_backend_returning_a_non_callable_is_a_clear_error():
    def gives_a_string(gm, example_inputs):
        return "compiled"

    compiled = dynamo_capture.optimize(f, backend=gives_a_string)
    with pytest.raises(BackendCompilerFailed, match=r"returned 'compiled' \(str\), not a callable"):
        compiled(torch.randn(3))


def test_input_outside_its_mark_dynamic_range_raises_every_time():
    compiled = dynamo_capture.optimize(f, backend=lambda gm, inputs: gm.forward)
    for _ in range(2):  # not turned into an eager entry after the first failure
        x = torch.randn(11, 2)
        mark_dynamic(x, 0, min=2, max=10)
        with pytest.raises(ConstraintViolationError, match=r"is 11, not in range \[2, 10\]"):
            compiled(x)
    y = torch.randn(10, 2)
    mark_dynamic(y, 0, min=2, max=10)
    torch.testing.assert_close(compiled(y), f(y))
