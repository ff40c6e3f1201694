"""What a compiled module is and does, side by side with torch.compile's (modelled on
pytorch's test/dynamo/test_compile.py and test_hooks.py): its state_dict and parameter
names, torch.save / torch.load of it and of its state_dict, deepcopy and pickle, the
in-place form (torch's `Module.compile()`), a forward pre-hook on a compiled module,
hooks registered before compiling, a compiled function whose graph is empty under
fullgraph, and the errors eager raises (a name not defined, a method of None, an index
past a list's end). Each probe runs the same steps with ember.compile and torch.compile
(counting backends): the results equal eager's, the names and counts torch's."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn

import ember
from dynamo_capture.testing import CountingBackend


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(6, 6)
        self.relu = nn.ReLU()
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        return self.relu(self.linear(x))


def _both(model_factory, **settings):
    """(ember's compiled model, its backend), (torch's, its counter), and the eager model."""
    import torch._dynamo
    import torch._dynamo.testing

    torch._dynamo.reset()
    backend, counter = CountingBackend(), torch._dynamo.testing.CompileCounter()
    ours = ember.compile(model_factory(), backend=backend, **settings)
    theirs = torch.compile(model_factory(), backend=counter, **settings)
    return (ours, backend), (theirs, counter), model_factory()


def _x():
    return torch.linspace(-1.0, 1.0, 12).reshape(2, 6)


def test_state_dict_names_are_torchs():
    (ours, _), (theirs, _), _ = _both(Toy)
    assert list(ours.state_dict()) == list(theirs.state_dict())


def test_named_members_are_the_originals_where_torch_prefixes_them():
    """A known difference, by design (ember.OptimizedModule.named_modules): iterating a
    compiled module's parameters, buffers or submodules gives the original module's
    names; torch.compile's wrapper holds the original as a submodule and prefixes each
    with `_orig_mod.`. Their state_dicts agree (above)."""
    (ours, _), (theirs, _), original = _both(Toy)
    for members in ("named_parameters", "named_buffers", "named_modules"):
        names = [name for name, _ in getattr(ours, members)()]
        assert names == [name for name, _ in getattr(original, members)()]
        prefixed = [name for name, _ in getattr(theirs, members)() if name]
        assert prefixed == ["_orig_mod"] * (members == "named_modules") + [
            f"_orig_mod.{name}" for name in names if name
        ]


def test_state_dict_of_a_compiled_module_loads_into_a_compiled_one():
    (ours, _), (theirs, _), _ = _both(Toy)
    other = ember.compile(Toy(), backend="eager")
    with torch.no_grad():
        ours.linear.weight.mul_(2)
    buffer = io.BytesIO()
    torch.save(ours.state_dict(), buffer)
    buffer.seek(0)
    assert list(other.load_state_dict(torch.load(buffer))) == list(
        theirs.load_state_dict(theirs.state_dict())
    )
    torch.testing.assert_close(other(_x()), ours(_x()))


def test_in_place_compile_keeps_state_dict_names_like_module_compile():
    import torch._dynamo
    import torch._dynamo.testing

    ours, theirs = Toy(), Toy()
    backend, counter = CountingBackend(), torch._dynamo.testing.CompileCounter()
    torch._dynamo.reset()
    ember.compile(ours, backend=backend, inplace=True)
    theirs.compile(backend=counter)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    torch.testing.assert_close(ours(_x()), Toy()(_x()))
    theirs(_x())
    assert backend.frame_count == counter.frame_count
    assert backend.op_count == counter.op_count


def test_torch_save_and_load_of_a_compiled_module_runs_compiled():
    (ours, backend), (theirs, _), eager = _both(Toy)
    ours(_x())
    theirs(_x())
    for model in (ours, theirs):
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=False)
        assert isinstance(loaded, type(model))
        torch.testing.assert_close(loaded(_x()), eager(_x()))
    assert backend.frame_count == 1


@pytest.mark.parametrize("duplicate", [copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))])
def test_copies_of_a_compiled_module_are_compiled_modules_like_torchs(duplicate):
    (ours, _), (theirs, _), eager = _both(Toy)
    ours_copy, theirs_copy = duplicate(ours), duplicate(theirs)
    assert isinstance(ours_copy, type(ours)) and isinstance(theirs_copy, type(theirs))
    assert list(ours_copy.state_dict()) == list(theirs_copy.state_dict())
    assert ours_copy._orig_mod is not ours._orig_mod
    torch.testing.assert_close(ours_copy(_x()), eager(_x()))


def _pre_hooked():
    model = Toy()
    model.register_forward_pre_hook(lambda module, args: (args[0] + 1,))
    return model


def _hooked_both_ways():
    model = Toy()
    model.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    model.register_forward_hook(lambda module, args, out: out - 1)
    return model


@pytest.mark.parametrize("factory", [_pre_hooked, _hooked_both_ways])
def test_hooks_registered_before_compiling_run_like_torch(factory):
    (ours, backend), (theirs, counter), eager = _both(factory)
    for _ in range(2):
        expected = eager(_x())
        torch.testing.assert_close(ours(_x()), expected)
        torch.testing.assert_close(theirs(_x()), expected)
    assert backend.frame_count == counter.frame_count
    assert backend.op_count == counter.op_count


def _length(x):
    return len(x)


def test_fullgraph_frame_with_an_empty_graph_returns_its_value():
    assert ember.compile(_length, backend="eager", fullgraph=True)(torch.randn(5)) == 5
    assert torch.compile(_length, backend="eager", fullgraph=True)(torch.randn(5)) == 5


def _calls_a_missing_name(x):
    x = x + 1
    does_not_exist()  # noqa: F821 - eager raises NameError
    return x


def _max_of(x):
    return x.max()


def _item_past_the_end(x, i):
    return [x][i]


@pytest.mark.parametrize(
    ("fn", "args", "error"),
    [
        (_calls_a_missing_name, (torch.randn(3),), NameError),
        (_max_of, (None,), AttributeError),
        (_item_past_the_end, (torch.randn(3), 99), IndexError),
    ],
    ids=["name_error", "method_of_none", "index_error"],
)
def test_errors_are_eagers(fn, args, error):
    with pytest.raises(error) as eager_raised:
        fn(*args)
    with pytest.raises(error) as raised:
        ember.compile(fn, backend="eager")(*args)
    with pytest.raises(error):
        torch.compile(fn, backend="eager")(*args)
    assert str(raised.value) == str(eager_raised.value)
