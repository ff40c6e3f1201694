"""Frames capture cannot handle: they warn once, run eagerly, and heal.

A frame that cannot be put in a graph (nor split) runs eagerly under the guards
capture recorded up to the failure; one `EagerFallbackWarning` per frame and reason
names the frame, the reason and the user's file and line. When what made capture
fail changes (an input of another kind), the frame is captured again. `explain`
lists the frames it ran eagerly. A module with a `with_kwargs` pre-hook is compiled
with its hook.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import dynamo_capture
import ember
from dynamo_capture.testing import CountingBackend
from ember.api import compiled_callable_of


def keep_arguments(module, args, kwargs):
    return args, kwargs


def fallback_warnings(record):
    return [w for w in record if issubclass(w.category, ember.EagerFallbackWarning)]


@pytest.fixture(autouse=True)
def _fresh_warnings():
    dynamo_capture.reset()
    yield
    dynamo_capture.reset()


def double(x):
    return x * 2


def test_uncapturable_frame_warns_once_naming_frame_reason_and_user_line():
    compiled = ember.compile(double, backend="eager")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for size in (3, 3, 4):
            sparse = torch.randn(size, 3).to_sparse()
            torch.testing.assert_close(compiled(sparse), double(sparse))
    caught = fallback_warnings(record)
    assert len(caught) == 1  # one per frame and reason, whatever the sizes
    message = str(caught[0].message)
    assert "double" in message and "sparse_coo" in message
    assert caught[0].filename == __file__


def test_eager_frame_is_compiled_again_for_an_input_of_another_kind():
    backend = CountingBackend()
    compiled = ember.compile(double, backend=backend)
    sparse, dense = torch.randn(3, 3).to_sparse(), torch.randn(3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ember.EagerFallbackWarning)
        for _ in range(2):
            torch.testing.assert_close(compiled(sparse), double(sparse))
            torch.testing.assert_close(compiled(dense), double(dense))
    assert backend.frame_count == 1
    runner = compiled_callable_of(compiled)
    assert [entry.eager for entry in runner.entries] == [True, False]


def test_eager_fallback_warning_can_be_silenced():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=ember.EagerFallbackWarning)
        ember.compile(double, backend="eager")(torch.randn(2, 4).to_sparse())
    assert not fallback_warnings(record)


def test_explain_lists_frames_run_eagerly():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ember.EagerFallbackWarning)
        report = ember.explain(double)(torch.randn(2, 4).to_sparse())
    assert len(report.eager_frames) == 1
    assert "sparse_coo" in report.eager_frames[0].reason
    assert "Eager frame: double runs eagerly" in str(report)


def test_module_with_kwargs_pre_hook_is_compiled_with_the_module():
    model = torch.nn.Linear(4, 4)

    def scale_input(module, args, kwargs):
        return (args[0] * 2,), kwargs

    handle = model.register_forward_pre_hook(scale_input, with_kwargs=True)
    backend = CountingBackend()
    compiled = ember.compile(model, backend=backend)
    x = torch.randn(2, 4)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(2):
            torch.testing.assert_close(compiled(x), model.forward(x * 2))
    assert not fallback_warnings(record)
    assert backend.frame_count == 1
    handle.remove()  # the hook's dict keys are guarded: compiled again without it
    torch.testing.assert_close(compiled(x), model.forward(x))
    assert backend.frame_count == 2
