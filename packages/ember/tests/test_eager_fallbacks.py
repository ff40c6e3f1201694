"""Frames capture cannot handle: they warn once, run eagerly, and heal.

A frame that cannot be put in a graph (nor split) runs eagerly under the guards
capture recorded up to the failure; one `EagerFallbackWarning` per frame and reason
names the frame, the reason and the user's file and line. When what made capture
fail changes (a hook removed, an input of another type), the frame is captured
again. `explain` lists the frames it ran eagerly.
"""

from __future__ import annotations

import array
import warnings

import pytest
import torch

import dynamo_capture
import ember
from ember.api import compiled_callable_of


class CountingBackend:
    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def keep_arguments(module, args, kwargs):
    return args, kwargs


def fallback_warnings(record):
    return [w for w in record if issubclass(w.category, ember.EagerFallbackWarning)]


@pytest.fixture(autouse=True)
def _fresh_warnings():
    dynamo_capture.reset()
    yield
    dynamo_capture.reset()


def test_uncapturable_frame_warns_once_naming_frame_reason_and_user_line():
    model = torch.nn.Linear(4, 4)
    model.register_forward_pre_hook(keep_arguments, with_kwargs=True)
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(2, 4)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
            compiled(torch.randn(3, 4))  # a new size: a new eager entry, the same warning
    caught = fallback_warnings(record)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "Linear" in message and "with_kwargs=True" in message
    assert caught[0].filename == __file__


def test_eager_frame_is_compiled_again_when_the_hook_is_removed():
    model = torch.nn.Linear(4, 4)
    handle = model.register_forward_pre_hook(keep_arguments, with_kwargs=True)
    backend = CountingBackend()
    compiled = ember.compile(model, backend=backend)
    x = torch.randn(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ember.EagerFallbackWarning)
        torch.testing.assert_close(compiled(x), model(x))
    assert backend.graphs == 0
    handle.remove()
    torch.testing.assert_close(compiled(x), model(x))
    assert backend.graphs == 1
    runner = compiled_callable_of(compiled)
    assert [entry.eager for entry in runner.entries] == [True, False]


class Scaled(torch.nn.Module):
    def forward(self, x, factors):
        return x * factors[0]


def test_eager_frame_is_compiled_again_for_an_input_of_another_type():
    model = Scaled()
    model.register_forward_hook(lambda module, args, out: None)  # no split of forward
    backend = CountingBackend()
    compiled = ember.compile(model, backend=backend)
    x = torch.randn(3)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        torch.testing.assert_close(compiled(x, array.array("d", [2.0])), x * 2.0)
    assert len(fallback_warnings(record)) == 1
    assert backend.graphs == 0
    torch.testing.assert_close(compiled(x, [3.0]), x * 3.0)
    assert backend.graphs == 1
    torch.testing.assert_close(compiled(x, array.array("d", [4.0])), x * 4.0)  # eager entry
    torch.testing.assert_close(compiled(x, [3.0]), x * 3.0)
    assert backend.graphs == 1


def test_eager_fallback_warning_can_be_silenced():
    model = torch.nn.Linear(4, 4)
    model.register_forward_pre_hook(keep_arguments, with_kwargs=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=ember.EagerFallbackWarning)
        ember.compile(model, backend="eager")(torch.randn(2, 4))
    assert not fallback_warnings(record)


def test_explain_lists_frames_run_eagerly():
    model = torch.nn.Linear(4, 4)
    model.register_forward_pre_hook(keep_arguments, with_kwargs=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ember.EagerFallbackWarning)
        report = ember.explain(model)(torch.randn(2, 4))
    assert len(report.eager_frames) == 1
    assert "with_kwargs=True" in report.eager_frames[0].reason
    assert "Eager frame: Linear runs eagerly" in str(report)
