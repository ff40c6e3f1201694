"""Convolutions on the CPU (codegen/cpp/convolution.py): channels-last data flows
between convolutions, with batch norm, activation, pooling and residual additions fused
into the kernels between them. Results against eager (values, and gradients in
training); a parameter written between calls is seen.

Footguns, worst first:
  silent wrong result  a weight or batch-norm statistic written in place between calls
                       (optimizer step, copy_, a write through .data, a new tensor) must
                       be seen: nothing derived from a parameter is cached across calls
  silent wrong result  a returned convolution output in another layout than eager's
  slowdown             a value with two readers copied to channels-last per reader
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_helpers import trace

from inductor_codegen import compile_graph
from inductor_codegen.lowering.graph import USER_VISIBLE_OUTPUTS

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN"
)

TOL = {"rtol": 1e-4, "atol": 1e-4}


def _inference_graph(fn, *args):
    """fn traced as aot_autograd hands over an inference graph (its output node marked)."""
    with torch.no_grad():
        gm = trace(fn, *args)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    output.meta[USER_VISIBLE_OUTPUTS] = (0,)
    return gm


def _compile_inference(fn, *args):
    compiled = compile_graph(_inference_graph(fn, *args), list(args))
    return compiled


def _bn_params(channels: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    mean = torch.rand(channels, generator=g) - 0.5
    var = torch.rand(channels, generator=g) + 0.5
    gamma = torch.rand(channels, generator=g) + 0.5
    beta = torch.rand(channels, generator=g) - 0.5
    return mean, var, gamma, beta


def conv_bn_relu(x, w, mean, var, gamma, beta):
    y = F.conv2d(x, w, None, 1, 1)
    y = F.batch_norm(y, mean, var, gamma, beta, training=False, eps=1e-5)
    return F.max_pool2d(F.relu(y), 2)


def _conv_bn_relu_args():
    torch.manual_seed(0)
    return (torch.randn(2, 3, 12, 12), torch.randn(8, 3, 3, 3), *_bn_params(8))


def _kernel_of(compiled, marker: str) -> str:
    kernels = compiled.artifact("codegen").split('extern "C"')
    return next(k for k in kernels if marker in k)


def test_conv_bn_relu_runs_channels_last():
    args = _conv_bn_relu_args()
    compiled = _compile_inference(conv_bn_relu, *args)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), conv_bn_relu(*args), **TOL)
    wrapper = compiled.artifact("wrapper")
    # the convolution's output is NHWC; batch norm, ReLU and pooling are one kernel
    assert "(1152, 1, 96, 8)" in wrapper, wrapper
    pooling = _kernel_of(compiled, "ember_maximum")
    assert "std::sqrt" in pooling and "ember_relu" in pooling


def test_a_write_through_data_between_calls_is_seen():
    args = _conv_bn_relu_args()
    compiled = _compile_inference(conv_bn_relu, *args)
    with torch.no_grad():
        compiled(*args)
    args[1].data.mul_(-1.0)  # its own version counter: nothing keyed on versions sees it
    args[3].data.add_(1.0)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), conv_bn_relu(*args), **TOL)


def test_parameter_written_in_place_between_calls_is_seen():
    args = _conv_bn_relu_args()
    compiled = _compile_inference(conv_bn_relu, *args)
    x, w, mean, var, gamma, beta = args
    with torch.no_grad():
        compiled(*args)
        w.add_(0.25)  # an optimizer step
        var.mul_(2.0)  # a batch norm's running statistic
        beta.copy_(torch.randn(8))
        torch.testing.assert_close(compiled(*args), conv_bn_relu(*args), **TOL)
        gamma.zero_()
        torch.testing.assert_close(compiled(*args), conv_bn_relu(*args), **TOL)


def test_new_parameter_tensors_are_read():
    args = _conv_bn_relu_args()
    compiled = _compile_inference(conv_bn_relu, *args)
    with torch.no_grad():
        compiled(*args)
        other = (args[0], torch.randn(8, 3, 3, 3), *_bn_params(8, seed=1))
        torch.testing.assert_close(compiled(*other), conv_bn_relu(*other), **TOL)
        torch.testing.assert_close(compiled(*args), conv_bn_relu(*args), **TOL)


def test_inference_mode_tensors_written_between_calls_are_seen():
    args = _conv_bn_relu_args()
    compiled = _compile_inference(conv_bn_relu, *args)
    with torch.inference_mode():
        x = args[0].clone()
        w = args[1].clone()  # an inference tensor: no version counter
        params = (x, w, *args[2:])
        torch.testing.assert_close(compiled(*params), conv_bn_relu(*params), **TOL)
        w.mul_(-1.0)
        torch.testing.assert_close(compiled(*params), conv_bn_relu(*params), **TOL)


@pytest.mark.parametrize(
    "stride,padding,dilation,groups,bias",
    [
        (1, 1, 1, 1, True),
        (2, 0, 1, 1, False),
        (1, 2, 2, 1, True),
        (1, 1, 1, 2, True),
        (2, 1, 1, 4, False),
    ],
)
def test_convolution_shapes_match_eager(stride, padding, dilation, groups, bias):
    torch.manual_seed(0)
    x = torch.randn(2, 8, 11, 13)
    w = torch.randn(16, 8 // groups, 3, 3)
    b = torch.randn(16) if bias else None

    def fn(x, w, b, mean, var, gamma, beta):
        y = F.conv2d(x, w, b, stride, padding, dilation, groups)
        y = F.batch_norm(y, mean, var, gamma, beta, training=False, eps=1e-3)
        return F.relu(y) * 2.0

    args = (x, w, b, *_bn_params(16))
    compiled = _compile_inference(fn, *args)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), fn(*args), **TOL)
        if b is not None:
            b.add_(1.0)
            torch.testing.assert_close(compiled(*args), fn(*args), **TOL)


def test_affine_steps_on_either_side_fold():
    def fn(x, w, scale, shift):
        y = F.conv2d(x, w, None, 1, 1)
        y = 1.5 - y  # rsub
        y = scale.view(1, -1, 1, 1) * y
        y = y / 4.0
        return torch.relu(shift.view(-1, 1, 1) + y).sum((2, 3))

    torch.manual_seed(0)
    args = (torch.randn(2, 4, 9, 9), torch.randn(6, 4, 3, 3), torch.randn(6), torch.randn(6))
    compiled = _compile_inference(fn, *args)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), fn(*args), **TOL)
        args[2].neg_()
        torch.testing.assert_close(compiled(*args), fn(*args), **TOL)


def test_chain_with_a_second_reader_stays_unfolded_there():
    def fn(x, w, shift):
        y = F.conv2d(x, w, None, 1, 1)
        z = y + shift.view(-1, 1, 1)
        return torch.relu(z), y  # y is read twice: the chain stops at the convolution

    torch.manual_seed(0)
    args = (torch.randn(2, 3, 8, 8), torch.randn(5, 3, 3, 3), torch.randn(5))
    compiled = _compile_inference(fn, *args)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), fn(*args), **TOL)


def test_residual_block_output_is_stored_channels_last_once():
    def fn(x, w1, w2, shift):
        y = torch.relu(F.conv2d(x, w1, None, 1, 1) + shift.view(-1, 1, 1))
        z = torch.relu(F.conv2d(y, w2, None, 1, 1) + y)  # y: two readers, stored once
        return F.adaptive_avg_pool2d(z, 1).flatten(1)

    torch.manual_seed(0)
    args = (torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4, 4, 3, 3))
    args = (*args, torch.randn(4))
    compiled = _compile_inference(fn, *args)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), fn(*args), **TOL)
    wrapper = compiled.artifact("wrapper")
    # the graph input and the weights are copied to channels-last; no activation is
    assert wrapper.count("cpp_fused") <= 5, wrapper
    assert "(256, 1, 32, 4)" in wrapper  # y, allocated NHWC


def test_convolution_output_returned_keeps_its_layout():
    def fn(x, w, b):
        return torch.relu(F.conv2d(x, w, b, 1, 1))

    torch.manual_seed(0)
    args = (torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4))
    compiled = _compile_inference(fn, *args)
    with torch.no_grad():
        out = compiled(*args)
        expected = fn(*args)
    torch.testing.assert_close(out, expected, **TOL)
    assert out.stride() == expected.stride()


def test_stacked_convolutions_with_a_residual_match_eager():
    def fn(x, w1, w2, w3, mean, var, gamma, beta):
        y = torch.relu(F.batch_norm(F.conv2d(x, w1, None, 1, 1), mean, var, gamma, beta))
        z = F.batch_norm(F.conv2d(y, w2, None, 1, 1), mean, var, gamma, beta)
        z = torch.relu(z + y)
        z = F.conv2d(F.max_pool2d(z, 2), w3, None, 1, 1)
        return F.adaptive_avg_pool2d(z, 1).flatten(1)

    torch.manual_seed(0)
    args = (
        torch.randn(2, 3, 16, 16),
        torch.randn(8, 3, 3, 3),
        torch.randn(8, 8, 3, 3),
        torch.randn(16, 8, 3, 3),
        *_bn_params(8),
    )
    compiled = _compile_inference(fn, *args)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), fn(*args), **TOL)
        args[2].mul_(0.5)
        torch.testing.assert_close(compiled(*args), fn(*args), **TOL)
    assert "x1_tile" in compiled.artifact("codegen")  # the NHWC average pool reads in order


def test_training_graph_gradients_match_eager():
    def step(x, w1, b1, w2, gamma, beta):
        y = F.conv2d(x, w1, b1, 1, 1)
        y = F.batch_norm(y, None, None, gamma, beta, training=True)
        y = F.max_pool2d(torch.relu(y), 2)
        loss = F.conv2d(y, w2, None, 1, 1).square().mean()
        return (loss, *torch.autograd.grad(loss, [x, w1, b1, w2, gamma, beta]))

    torch.manual_seed(0)
    args = [
        torch.randn(2, 3, 12, 12),
        torch.randn(8, 3, 3, 3),
        torch.randn(8),
        torch.randn(4, 8, 3, 3),
        torch.rand(8) + 0.5,
        torch.randn(8),
    ]
    args = [a.requires_grad_(True) for a in args]
    gm = trace(step, *args)
    compiled = compile_graph(gm, list(args))
    torch.testing.assert_close(compiled(*args), step(*args), **TOL)
    with torch.no_grad():
        args[1].add_(0.5)  # an optimizer step
    torch.testing.assert_close(compiled(*args), step(*args), **TOL)


def test_module_constants_written_between_calls_are_seen():
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    bn = torch.nn.BatchNorm2d(4).eval()
    bn.running_mean.uniform_(-0.5, 0.5)
    bn.running_var.uniform_(0.5, 2.0)
    model = torch.nn.Sequential(conv, bn, torch.nn.ReLU(), torch.nn.MaxPool2d(2)).eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        gm = trace(lambda inp: model(inp), x)
        compiled = compile_graph(gm, [x])
        torch.testing.assert_close(compiled(x), model(x), **TOL)
        conv.weight.add_(1.0)
        bn.running_mean.add_(0.5)
        torch.testing.assert_close(compiled(x), model(x), **TOL)


def test_bfloat16_convolutions_run_channels_last():
    args = [a.to(torch.bfloat16) for a in _conv_bn_relu_args()]
    compiled = _compile_inference(conv_bn_relu, *args)
    with torch.no_grad():
        actual = compiled(*args)
        expected = conv_bn_relu(*[a.float() for a in args])
    torch.testing.assert_close(actual.float(), expected, rtol=5e-2, atol=5e-2)
    assert "(1152, 1, 96, 8)" in compiled.artifact("wrapper")
