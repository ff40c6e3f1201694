"""Everything callable torch.compile takes: partials, builtins and torch functions and ops,
C methods, bound methods of any object, callable instances; modules compiled in place."""

import copy
import functools
import pickle

import pytest
import torch

import ember
from dynamo_capture.testing import CountingBackend


def scale(x, y, *, k=1.0):
    return torch.sin(x) * y * k


class Slotted:
    __slots__ = ("k",)

    def __init__(self):
        self.k = 3.0

    def run(self, x):
        return x.cos() * self.k

    @classmethod
    def shifted(cls, x):
        return x + 1


class Affine:
    def __init__(self):
        self.w = torch.randn(4)

    def __call__(self, x):
        return x * self.w + 1


_TENSOR = torch.randn(4)

CALLABLES = {
    "partial": (functools.partial(scale, k=2.0), 2),
    "partial_positional": (functools.partial(scale, torch.ones(4)), 1),
    "partial_of_partial": (functools.partial(functools.partial(scale, k=2.0), k=3.0), 2),
    "partial_of_torch_function": (functools.partial(torch.add, other=1.5), 1),
    "torch_function": (torch.sin, 1),
    "torch_special_function": (torch.special.erf, 1),
    "functional": (torch.nn.functional.gelu, 1),
    "builtin": (abs, 1),
    "aten_op": (torch.ops.aten.cos.default, 1),
    "unbound_tensor_method": (torch.Tensor.add, 2),
    "bound_tensor_method": (_TENSOR.mul, 1),
    "slotted_bound_method": (Slotted().run, 1),
    "classmethod": (Slotted.shifted, 1),
    "callable_instance": (Affine(), 1),
}


@pytest.mark.parametrize("name", list(CALLABLES))
def test_callable_compiles_to_one_graph_and_matches_eager(name):
    fn, arity = CALLABLES[name]
    backend = CountingBackend()
    compiled = ember.compile(fn, backend=backend)
    for _ in range(2):
        args = [torch.randn(4) for _ in range(arity)]
        torch.testing.assert_close(compiled(*args), fn(*args))
    assert len(backend.graphs) == 1
    runner = ember.api.compiled_callable_of(compiled)
    assert not runner.graph_breaks and not runner.entries[0].eager


def test_callables_compile_under_fullgraph_with_the_inductor_backend():
    for fn in (functools.partial(scale, k=2.0), torch.sin, Slotted().run):
        compiled = ember.compile(fn, fullgraph=True)
        args = [torch.randn(4) for _ in range(2 if fn is not torch.sin else 1)]
        if isinstance(fn, functools.partial):
            args = args[:2]
        elif fn is not torch.sin:
            args = args[:1]
        torch.testing.assert_close(compiled(*args), fn(*args))


def test_bound_tensor_method_reads_the_tensor_each_call():
    t = torch.randn(3)
    compiled = ember.compile(t.add, backend="eager")
    torch.testing.assert_close(compiled(torch.ones(3)), t + 1)
    t.mul_(2)  # the same tensor, new values
    torch.testing.assert_close(compiled(torch.ones(3)), t + 1)
    in_place = torch.randn(3)
    expected = in_place.clone().add_(1)
    ember.compile(in_place.add_, backend="eager")(torch.ones(3))
    torch.testing.assert_close(in_place, expected)


def test_partial_names_its_function():
    compiled = ember.compile(functools.partial(scale, k=2.0), backend="eager")
    assert ember.api.compiled_callable_of(compiled).frame.name == "scale"


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).relu() * 2


def test_inplace_module_compile_keeps_the_module_and_runs_compiled():
    net = Net()
    names = list(net.state_dict())
    backend = CountingBackend()
    net.register_forward_hook(lambda mod, args, out: out + 100)
    assert ember.compile(net, backend=backend, inplace=True) is net
    assert type(net) is Net and list(net.state_dict()) == names
    x = torch.randn(3, 4)
    expected = net.linear(x).relu() * 2 + 100  # the hook runs
    torch.testing.assert_close(net(x), expected)
    torch.testing.assert_close(net(x), expected)
    assert len(backend.graphs) == 2  # forward and the hook, as module.compile() in torch
    assert ember.api.compiled_callable_of(net).entries
    net._compiled_call_impl = None  # undone: eager again
    torch.testing.assert_close(net(x), expected)
    assert len(backend.graphs) == 2


class Printing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        y = self.linear(x)
        print("between graphs")
        self.calls += 1
        return y.sigmoid()


def test_inplace_module_with_a_graph_break_does_not_recurse(capsys):
    net = Printing()
    ember.compile(net, backend="eager", inplace=True)
    x = torch.randn(2, 4)
    for _ in range(3):
        torch.testing.assert_close(net(x), net.linear(x).sigmoid())
    assert net.calls == 3
    assert capsys.readouterr().out.count("between graphs") == 3


def test_inplace_compiled_module_copies_run_their_own_parameters_eagerly():
    # as with nn.Module.compile(): copies and pickles drop the compiled call
    net = Net()
    reference = Net()
    reference.compile(backend="eager")
    ember.compile(net, backend="eager", inplace=True)
    x = torch.randn(2, 4)
    net(x)
    for copier in (copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))):
        copied = copier(net)
        with torch.no_grad():
            copied.linear.weight.add_(1.0)  # the copy runs its own parameters
        torch.testing.assert_close(copied(x), copied.linear(x).relu() * 2)
        assert copied._compiled_call_impl is None
        assert copier(reference)._compiled_call_impl is None


def test_inplace_is_for_modules_only():
    with pytest.raises(ember.InvalidArgumentError, match="inplace=True compiles an nn.Module"):
        ember.compile(scale, inplace=True)
    with pytest.raises(ember.InvalidArgumentError, match="inplace must be True or False"):
        ember.compile(Net(), inplace="yes")
