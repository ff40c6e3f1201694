"""The backend contract as torch.compile's: every backend gets symbolic graphs (SymInt
sizes as graph inputs, called with ints); `supports_dynamic_shapes = False` opts out."""

import torch

import ember


def _symint_placeholders(gm):
    return [
        n
        for n in gm.graph.find_nodes(op="placeholder")
        if isinstance(n.meta.get("val"), torch.SymInt)
    ]


class WrappingBackend:
    """A custom backend that wraps the graph (not `gm.forward` itself) and records calls."""

    def __init__(self):
        self.graphs = []
        self.example_inputs = []
        self.call_arguments = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))

        def run(*args):
            self.call_arguments.append(args)
            return gm(*args)

        return run


class StaticOnlyBackend(WrappingBackend):
    supports_dynamic_shapes = False


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def test_custom_backend_gets_symbolic_sizes_by_default():
    model = _model()
    backend = WrappingBackend()
    compiled = ember.compile(model, backend=backend)
    with torch.no_grad():
        for batch in (1, 2, 3, 4, 5, 8, 13, 32):
            x = torch.randn(batch, 6)
            torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) <= 2  # a static first graph, then one symbolic for all sizes
    symbolic = _symint_placeholders(backend.graphs[-1])
    assert symbolic
    positions = [
        list(backend.graphs[-1].graph.find_nodes(op="placeholder")).index(n) for n in symbolic
    ]
    for position in positions:
        assert type(backend.example_inputs[-1][position]) is int
        assert all(type(args[position]) is int for args in backend.call_arguments[-3:])


def test_custom_backend_gets_a_symbolic_graph_first_under_dynamic_true():
    backend = WrappingBackend()
    compiled = ember.compile(lambda x: x.reshape(-1) * x.shape[0], backend=backend, dynamic=True)
    for rows in (3, 4, 7):
        x = torch.randn(rows, 2)
        torch.testing.assert_close(compiled(x), x.reshape(-1) * rows)
    assert len(backend.graphs) == 1 and _symint_placeholders(backend.graphs[0])


def test_backend_opting_out_gets_a_static_graph_per_size():
    model = _model()
    backend = StaticOnlyBackend()
    compiled = ember.compile(model, backend=backend, options={"recompile_limit": 20})
    with torch.no_grad():
        for batch in (1, 2, 3, 4):
            x = torch.randn(batch, 6)
            torch.testing.assert_close(compiled(x), model(x))
    assert len(backend.graphs) == 4
    assert not any(_symint_placeholders(gm) for gm in backend.graphs)


def test_function_backend_opts_out_with_an_attribute():
    graphs = []

    def static_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    static_backend.supports_dynamic_shapes = False
    compiled = ember.compile(lambda x: x * 2, backend=static_backend, dynamic=True)
    for n in (3, 4):
        torch.testing.assert_close(compiled(torch.ones(n)), torch.full((n,), 2.0))
    assert len(graphs) == 2 and not any(_symint_placeholders(gm) for gm in graphs)


def test_backend_failing_on_symbolic_graphs_still_gets_static_ones():
    graphs = []

    def tensors_only(gm, example_inputs):
        if any(not isinstance(x, torch.Tensor) for x in example_inputs):
            raise RuntimeError("tensors only")
        graphs.append(gm)
        return gm.forward

    compiled = ember.compile(lambda x: x + 1, backend=tensors_only, dynamic=True)
    for n in (3, 4):
        torch.testing.assert_close(compiled(torch.ones(n)), torch.full((n,), 2.0))
    assert len(graphs) == 2
