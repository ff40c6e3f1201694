"""Module hooks registered with with_kwargs=True are inlined; hooks capture cannot
inline run eagerly around the module's compiled forward; torch.distributed's code
never runs on fake tensors."""

from __future__ import annotations

import torch
import torch.distributed as dist

import dynamo_capture


class Affine(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, *, scale=1.0):
        return self.linear(x) * scale


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.affine = Affine()

    def forward(self, x):
        return self.affine(x, scale=2.0).relu()


def test_with_kwargs_pre_hook_is_inlined_in_the_graph(backend):
    model = Model()

    def halve_scale(module, args, kwargs):
        return (args[0] + 1,), {**kwargs, "scale": kwargs["scale"] / 2}

    model.affine.register_forward_pre_hook(halve_scale, with_kwargs=True)
    compiled = dynamo_capture.optimize(model, backend=backend, fullgraph=True)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 1


def test_with_kwargs_forward_hook_is_inlined_in_the_graph(backend):
    model = Model()

    def add_scale(module, args, kwargs, output):
        return output + kwargs["scale"]

    model.affine.register_forward_hook(add_scale, with_kwargs=True)
    compiled = dynamo_capture.optimize(model, backend=backend, fullgraph=True)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 1


def test_hook_capture_cannot_inline_runs_eagerly_around_compiled_forward(backend):
    model = Model()
    calls = []

    @dynamo_capture.disable
    def log_call(module, args):
        calls.append(args[0].shape)

    model.affine.register_forward_pre_hook(log_call)
    compiled = dynamo_capture.optimize(model, backend=backend)
    x = torch.randn(2, 4)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), model(x))
    assert len(calls) == 4  # two eager calls, two compiled ones
    codes = [graph.code for graph in backend.graphs]
    assert any("linear" in code for code in codes)  # Affine.forward compiled on its own
    assert not any("log_call" in code for code in codes)


def test_process_group_queries_fold_and_distributed_calls_break(backend):
    def f(x):
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(x)
        return x * 2

    compiled = dynamo_capture.optimize(f, backend=backend, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 2)

    def g(x):
        dist.barrier()  # no process group: raises eagerly, never runs on fakes
        return x

    compiled = dynamo_capture.optimize(g, backend=backend, fullgraph=True)
    try:
        compiled(x)
    except dynamo_capture.Unsupported as error:
        assert "runs eagerly" in str(error)
    else:
        raise AssertionError("expected a graph break on torch.distributed.barrier")
