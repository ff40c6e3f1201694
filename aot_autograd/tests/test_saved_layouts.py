"""The backward compiled against the layouts its compiled forward saves (saved_layouts).

Footguns, worst first:
  silent wrong result  a backward compiled for eager's strides reading a saved value the
                       forward returned in another layout (or the reverse)
  silent wrong result  a gradient the user gets in another layout than eager's
  slowdown             each saved value copied back to eager's strides at every call
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import fx

import guards
from aot_autograd import aot_function
from aot_autograd.saved_layouts import SAVED_OUTPUTS, with_saved_strides


def _nhwc_strides(shape):
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


class ChannelsLastSaving:
    """A forward "compiler": runs the graph, returning its 4-d saved values channels-last
    and reporting their strides as a code generator does (`output_strides`)."""

    def __init__(self, gm: fx.GraphModule, example_inputs):
        self.gm = gm
        output = next(n for n in gm.graph.nodes if n.op == "output")
        self.saved = set(output.meta[SAVED_OUTPUTS])
        vals = [n.meta.get("val") if isinstance(n, fx.Node) else None for n in output.args[0]]
        self.output_strides = tuple(
            _nhwc_strides(v.shape)
            if i in self.saved and isinstance(v, torch.Tensor) and v.dim() == 4
            else (tuple(v.stride()) if isinstance(v, torch.Tensor) else None)
            for i, v in enumerate(vals)
        )

    def __call__(self, *args):
        outs = list(self.gm(*args))
        for i in self.saved:
            if isinstance(outs[i], torch.Tensor) and outs[i].dim() == 4:
                outs[i] = outs[i].contiguous(memory_format=torch.channels_last)
        return outs


def _conv_net(x, w1, w2):
    y = F.relu(F.conv2d(x, w1, padding=1))
    z = F.conv2d(y, w2, padding=1, groups=4)
    return (z.sigmoid() + y).sum((2, 3))


def test_backward_gets_the_saved_values_in_the_forward_strides():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 6, 6)
    w1 = torch.randn(4, 4, 3, 3, requires_grad=True)
    w2 = torch.randn(4, 1, 3, 3, requires_grad=True)
    backward_inputs = []

    def bw_compiler(gm, example_inputs):
        backward_inputs.extend(v for v in example_inputs if isinstance(v, torch.Tensor))
        return gm

    compiled = aot_function(_conv_net, fw_compiler=ChannelsLastSaving, bw_compiler=bw_compiler)
    for _ in range(2):
        out = compiled(x, w1, w2)
        grads = torch.autograd.grad(out.square().sum(), (w1, w2))
    expected = torch.autograd.grad(_conv_net(x, w1, w2).square().sum(), (w1, w2))
    torch.testing.assert_close(grads, expected)
    # activations (2, 4, 6, 6) come to the backward channels-last
    activations = [t for t in backward_inputs if tuple(t.shape) == (2, 4, 6, 6)]
    assert activations
    assert any(t.stride() == _nhwc_strides(t.shape) for t in activations)
    # the gradients the user gets keep eager's strides
    for g, e in zip(grads, expected):
        assert all(n == 1 or a == b for n, a, b in zip(g.shape, g.stride(), e.stride()))


def test_backward_that_cannot_take_the_new_strides_is_left_as_traced():
    mode = guards.FakeTensorMode()
    fake = mode.from_real(torch.randn(2, 3, 4, 4))
    graph = fx.Graph()
    saved = graph.placeholder("saved")
    saved.meta["val"] = fake
    tangent = graph.placeholder("tangents_1")
    with mode:
        tangent.meta["val"] = torch.empty(2, 48)
        flat = graph.call_function(torch.ops.aten.view.default, (saved, [2, 48]))
        flat.meta["val"] = torch.ops.aten.view.default(fake, [2, 48])
    product = graph.call_function(torch.ops.aten.mul.Tensor, (flat, tangent))
    graph.output((product,))
    backward = fx.GraphModule({}, graph)
    # a view of an NHWC tensor as (2, 48) is not possible: the traced graph stays
    assert with_saved_strides(backward, {0: _nhwc_strides((2, 3, 4, 4))}) is None
    assert with_saved_strides(backward, {}) is None  # nothing to change
