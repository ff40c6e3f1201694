"""A graph holding tensors on another device than its kernels runs through ATen.

The lowering is device-blind: a kernel reads and writes its buffers on the graph's
device. A CPU tensor made in a CUDA graph (`torch.linspace(...)` without a device,
beside CUDA inputs) was computed by a Triton kernel into host memory ("Pointer
argument cannot be accessed from Triton") or allocated on the GPU and returned there
(a later eager op then took it where eager raises). Fakes on a "cuda" device stand
for CUDA inputs where no GPU is present; the deciding pass runs before any kernel is
built, so the Triton driver's choice is tested without one.
"""

from __future__ import annotations

import pytest
import torch
from graph_helpers import trace

import guards
from inductor_codegen import compile_graph
from inductor_codegen.errors import MixedDeviceGraphError, UnsupportedGraphError
from inductor_codegen.pipeline import EagerGraph, check_one_device

_CUDA = torch.device("cuda", 0)


def _fake_cuda(*shape, dtype=torch.float32):
    return guards.FakeTensor(
        guards.FakeTensorMode(), torch.empty(shape, device="meta", dtype=dtype), _CUDA
    )


def _with_cpu_weight(x):
    return x + torch.linspace(-1.0, 1.0, x.shape[-1])


def test_cpu_tensor_made_in_a_cuda_graph_is_refused_by_the_kernels():
    gm = trace(_with_cpu_weight, torch.randn(2, 3))
    with pytest.raises(MixedDeviceGraphError, match=r"linspace.* on cpu .* run on cuda:0"):
        check_one_device(gm, [_fake_cuda(2, 3)], _CUDA)
    check_one_device(gm, [torch.randn(2, 3)], torch.device("cpu"))


def test_cuda_graph_with_a_cpu_tensor_is_compiled_as_an_aten_graph():
    gm = trace(_with_cpu_weight, torch.randn(2, 3))
    compiled = compile_graph(gm, [_fake_cuda(2, 3)])
    assert isinstance(compiled, EagerGraph)
    assert "on cpu" in compiled.artifacts[0].text


def test_mixed_device_graph_is_never_recorded_into_a_cuda_graph():
    # (a replay would skip the ATen graph's CPU ops)
    gm = trace(_with_cpu_weight, torch.randn(2, 3))
    compiled = compile_graph(gm, [_fake_cuda(2, 3)], options={"cudagraphs": True})
    assert isinstance(compiled, EagerGraph)
    assert issubclass(MixedDeviceGraphError, UnsupportedGraphError)


def test_cpu_graph_making_a_tensor_elsewhere_returns_it_on_its_device():
    # (the C++ driver allocated the factory's output in host memory)
    def fn(x):
        return x.sin(), torch.zeros(3, device="meta")

    x = torch.randn(3)
    gm = trace(fn, x)
    compiled = compile_graph(gm, [x])
    assert isinstance(compiled, EagerGraph)
    out, made = compiled(x)
    torch.testing.assert_close(out, x.sin())
    assert made.device.type == "meta"


def test_host_scalar_inputs_and_device_copies_stay_compiled():
    def fn(x, scale, y):
        return x * scale, y.to("cpu")

    gm = trace(fn, torch.randn(3), torch.tensor(2.0), torch.randn(3))
    # the CPU copy's node is the only one on the CPU; a 0-dim CPU input is a host scalar
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is not torch.ops.aten._to_copy.default:
            node.meta["val"] = _fake_cuda(3)
    check_one_device(gm, [_fake_cuda(3), torch.tensor(2.0), _fake_cuda(3)], _CUDA)


def test_cpu_input_read_by_a_kernel_of_a_cuda_graph_is_refused():
    def fn(x, idx):
        return x[idx]

    gm = trace(fn, torch.randn(4), torch.tensor([0, 2]))
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.meta["val"] = _fake_cuda(2)
    with pytest.raises(MixedDeviceGraphError, match="on cpu"):
        check_one_device(gm, [_fake_cuda(4), torch.tensor([0, 2])], _CUDA)


def _host_scalar_graph(fn):
    """fn(x, scale) traced on the CPU, its non-scalar values relabelled as CUDA ones."""
    gm = trace(fn, torch.randn(3), torch.tensor(2.0))
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "call_function" and isinstance(val, torch.Tensor) and val.dim() > 0:
            node.meta["val"] = _fake_cuda(*val.shape)
    return gm


def test_number_computed_from_a_host_scalar_stays_compiled_unless_given_back():
    inputs = [_fake_cuda(3), torch.tensor(2.0)]
    check_one_device(_host_scalar_graph(lambda x, s: x * (s + 1)), inputs, _CUDA)
    with pytest.raises(MixedDeviceGraphError, match="on cpu"):
        check_one_device(_host_scalar_graph(lambda x, s: (x * s, s + 1)), inputs, _CUDA)
