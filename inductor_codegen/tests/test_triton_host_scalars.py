"""A 0-dim CPU tensor beside CUDA tensors, as eager allows (`x_cuda * torch.tensor(2.0)`).

A Triton kernel given the CPU tensor would read host memory through a device
pointer. The wrapper copies such an input to the device before kernels read it,
and the graph's device is the CUDA tensors'. Without a GPU the decision is tested
on the wrapper's text (generated as for a CUDA graph) and the interpreter runs the
same graph on the CPU.
"""

from __future__ import annotations

import pytest
import torch
from graph_helpers import trace

from inductor_codegen import compile_graph
from inductor_codegen.codegen.triton.compile import GPU_FUSION_POLICY, _renamed, graph_device
from inductor_codegen.codegen.triton.kernel import generate_triton_kernel
from inductor_codegen.codegen.triton.random import TRITON_LOWERINGS
from inductor_codegen.codegen.triton.wrapper import generate_triton_wrapper, host_scalars
from inductor_codegen.pipeline import PassRecorder, lower_and_schedule
from inductor_codegen.scheduler import FusedKernel

pytestmark = pytest.mark.triton_interpret


def _fn(x, scale):
    return (x * scale).sin() + scale


def _lowered(fn, example_inputs):
    graph, plan = lower_and_schedule(
        trace(fn, *example_inputs),
        example_inputs,
        TRITON_LOWERINGS,
        PassRecorder(),
        GPU_FUSION_POLICY,
    )
    plan = _renamed(plan)
    kernels = {
        k.name: generate_triton_kernel(k, graph.buffer_by_name)
        for k in plan.steps
        if isinstance(k, FusedKernel)
    }
    return graph, plan, kernels


def test_graph_device_is_not_decided_by_a_cpu_scalar():
    meta = torch.empty(3, device="meta")
    assert graph_device([torch.tensor(2.0), meta]) == meta.device
    assert graph_device([meta, torch.tensor(2.0)]) == meta.device
    assert graph_device([torch.tensor(2.0), torch.ones(3)]).type == "cpu"
    assert graph_device([torch.tensor(2.0)]).type == "cpu"


def test_cpu_scalar_input_is_copied_to_the_device_before_kernels_read_it():
    pytest.importorskip("triton")
    x, scale = torch.randn(4, 3), torch.tensor(2.0)
    graph, plan, kernels = _lowered(_fn, [x, scale])
    scale_name = graph.inputs[1].name
    assert host_scalars(graph, torch.device("cuda")) == ([scale_name], [])
    assert host_scalars(graph, torch.device("cpu")) == ([], [])
    text = generate_triton_wrapper(graph, plan, kernels, torch.device("cuda")).text
    assert f"{scale_name}_t = {scale_name}.to(device0)" in text
    launches = [line for line in text.splitlines() if ".launch(" in line]
    assert launches
    for line in launches:  # kernels read the device copy, never the CPU tensor
        arguments = line.split("(", 1)[1].rstrip(")").split(", ")
        assert scale_name not in arguments
    assert any(f"{scale_name}_t" in line for line in launches)
    cpu_text = generate_triton_wrapper(graph, plan, kernels, torch.device("cpu")).text
    assert ".to(device0)" not in cpu_text


def test_cpu_scalar_constant_is_found_for_a_device_graph():
    pytest.importorskip("triton")
    x = torch.randn(4, 3)
    graph, _, _ = _lowered(lambda x: x * torch.tensor(2.0), [x])
    inputs, constants = host_scalars(graph, torch.device("cuda"))
    assert inputs == [] and len(constants) == 1
    assert graph.constants[constants[0]].dim() == 0


def test_tensor_inputs_with_dims_stay_where_they_are():
    pytest.importorskip("triton")
    x, bias = torch.randn(4, 3), torch.randn(3)
    graph, _, _ = _lowered(_fn, [x, bias])
    assert host_scalars(graph, torch.device("cuda")) == ([], [])


def test_cpu_scalar_with_triton_interpreter_matches_eager(tmp_path):
    """On a GPU machine the tensor is on the GPU and the scalar on the CPU, as users mix them."""
    pytest.importorskip("triton")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, scale = torch.randn(4, 3, device=device), torch.tensor(2.0)
    options = {"device_codegen": "triton", "cache_dir": str(tmp_path)}
    compiled = compile_graph(trace(_fn, x, scale), [x, scale], options=options)
    torch.testing.assert_close(compiled(x, scale), _fn(x, scale))
