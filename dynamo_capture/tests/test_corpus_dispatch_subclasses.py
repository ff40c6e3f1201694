"""Tensor subclasses with their own `__torch_dispatch__` (test/dynamo/test_subclasses.py
and test/test_subclass.py style): TwoTensor, a one-tensor wrapper scaling every result
with a constant of its flatten context, passed in, made in the frame, returned, held as
module parameters.

A traceable subclass (`__tensor_flatten__` / `__tensor_unflatten__`) is captured in one
graph, as torch.compile captures it: its fake is the subclass over inner fakes, so each
operation runs its own dispatch while capturing; inputs are guarded on their class,
flatten context and inner metadata. Each program gives eager's results and
torch.compile's graph and op counts (two calls each, fresh arguments). A subclass
without the protocol runs eagerly, and fullgraph=True says why.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tensor_subclasses import Opaque, ScaledTensor, TwoTensor, scaled, two
from torch import nn
from torchcheck import check_like_torch, program_registry

import dynamo_capture
from dynamo_capture.errors import Unsupported
from dynamo_capture.testing import CountingBackend, assert_same

PROGRAMS, program = program_registry()


def r(*shape):
    return torch.randn(*shape)


@program(lambda: two(3), lambda: r(3))
def two_add_sin(x, y):
    return (x * 2 + y).sin()


@program(lambda: two(3), lambda: two(3))
def two_with_two(x, y):
    return x * y - y.exp()


@program(lambda: two(4, 3), lambda: r(3, 5))
def two_matmul(x, w):
    return torch.relu(x @ w)


@program(lambda: two(4, 3))
def two_reductions(x):
    return x.sum(dim=0), x.mean()


@program(lambda: two(4, 3))
def two_views(x):
    return x.t() * 2, x.view(-1)


@program(lambda: two(4, 3))
def two_functional(x):
    return F.gelu(x) + F.softmax(x, dim=-1)


@program(lambda: two(4, 3))
def two_sizes(x):
    return x.reshape(x.shape[0], 1, -1) * x.size(0)


@program(lambda: two(3))
def two_in_place(x):
    x.add_(1)
    return x * 2


@program(lambda: two(3))
def two_returned(x):
    return x


@program(lambda: two(3))
def two_data_dependent(x):
    return x * 2 if x.sum() > 0 else x * 3


@program(lambda: scaled(3), lambda: r(3))
def scaled_add(x, y):
    return x + y


@program(lambda: scaled(3), lambda: r(3))
def scaled_chain(x, y):
    return (x * y).sin().sum()


@program(lambda: two(3), lambda: r(3))
def made_two_in_frame(x, y):
    return TwoTensor(y, y * 2) + x


@program(lambda: r(3), lambda: r(3))
def made_from_plain_inputs(x, y):
    return TwoTensor(x, y * 2).sin()


@program(lambda: r(3))
def made_scaled(x):
    return ScaledTensor(x, 2.0) * 3 + 1


@program(lambda: two(3))
def two_inner_of_intermediate(x):
    return (x * 2).a + 1


@program(lambda: two(3))
def two_printed_between(x):
    y = x * 2
    print("between")
    return y + 1


@program(lambda: two(3))
def two_isinstance(x):
    return x * 2 if isinstance(x, TwoTensor) else x


@program(lambda: two(3))
def two_type_is(x):
    return (x + 1) if type(x) is TwoTensor else x


@program(lambda: two(3))
def two_factories_and_dtype(x):
    return x.new_zeros(x.shape) + x.dtype.itemsize


@program(lambda: two(2, 3))
def two_cat_stack(x):
    return torch.cat([x, x * 2]), torch.stack([x, x])


@program(lambda: two(2, 3), lambda: r(2, 3))
def two_where_with_plain(x, y):
    return torch.where(y > 0, x, y)


@program(lambda: two(3))
def two_nested_in_frame(x):
    return TwoTensor(x, x * 2) + 1


@program(lambda: scaled(3))
def scaled_inner_and_context(x):
    return x.elem * x.scale


@program(lambda: two(4, 3))
def two_split(x):
    return [t * 2 for t in x.split(2)]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin.weight = nn.Parameter(TwoTensor(torch.randn(4, 4), torch.randn(4, 4)))

    def forward(self, x):
        return torch.relu(self.lin(x)) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x.sum()


def test_module_with_subclass_parameters_like_torch():
    torch.manual_seed(0)
    net = Net()
    check_like_torch(net, lambda: (torch.randn(2, 4),))


def add(x, y):
    return x + y


def test_flatten_context_change_recompiles_like_torch():
    import torch._dynamo
    import torch._dynamo.testing

    def calls(compiled):
        for scale in (1.5, 1.5, 2.0):
            compiled(scaled(3, scale=scale), torch.randn(3))

    counter = CountingBackend()
    calls(dynamo_capture.optimize(add, backend=counter))
    torch._dynamo.reset()
    reference = torch._dynamo.testing.CompileCounter()
    calls(torch.compile(add, backend=reference))
    torch._dynamo.reset()
    assert counter.frame_count == reference.frame_count == 2


def test_subclass_output_keeps_its_context():
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(add, backend=counter)
    x, y = scaled(3, scale=2.5), torch.randn(3)
    got = compiled(x, y)  # (a clone would go through its dispatch, scaled)
    assert_same(got, add(x, y))
    assert type(got) is ScaledTensor and got.scale == 2.5


def test_opaque_subclass_runs_eagerly():
    counter = CountingBackend()
    x = Opaque(torch.randn(3))
    with pytest.warns(UserWarning, match="defines its own __torch_dispatch__"):
        got = dynamo_capture.optimize(add, backend=counter)(x, torch.ones(3))
    assert counter.frame_count == 0
    assert type(got) is Opaque and torch.equal(got.elem, x.elem + 1)


def test_opaque_subclass_under_fullgraph_says_why():
    compiled = dynamo_capture.optimize(add, backend=CountingBackend(), fullgraph=True)
    with pytest.raises(
        Unsupported, match="Opaque, which defines its own __torch_dispatch__ but not"
    ):
        compiled(Opaque(torch.randn(3)), torch.ones(3))
