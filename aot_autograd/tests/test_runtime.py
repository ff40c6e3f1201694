"""The run time: autograd.Function behaviour, inference graphs, randomness, logging, entry points."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from aot_checks import RecordingCompiler, assert_functional

import guards
from aot_autograd import (
    aot_function,
    aot_graph,
    aot_module,
    default_partition,
    is_recomputable,
    min_cut_rematerialization_partition,
    saved_bytes,
)
from aot_autograd.partitioners import MAX_RECOMPUTE_READS

aten = torch.ops.aten


def identity_compiler(gm, example_inputs):
    return gm


def test_non_differentiable_outputs():
    def fn(x):
        return x.sin(), x.argmax(), x > 0

    x = torch.randn(5, requires_grad=True)
    values, index, mask = aot_function(fn, identity_compiler)(x)
    assert index.grad_fn is None and not index.requires_grad
    assert mask.dtype == torch.bool and not mask.requires_grad
    (grad,) = torch.autograd.grad(values.sum(), x)
    torch.testing.assert_close(grad, x.detach().cos())


def test_none_grads_for_unused_inputs():
    def fn(x, y):
        return x * 2

    x, y = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    out = aot_function(fn, identity_compiler)(x, y)
    gx, gy = torch.autograd.grad(out.sum(), [x, y], allow_unused=True)
    torch.testing.assert_close(gx, torch.full((3,), 2.0))
    assert gy is None


def test_inference_graph_when_grad_is_off():
    compiler = RecordingCompiler()
    f = aot_function(lambda x: x.exp().sum(0), compiler)
    x = torch.randn(4, 3, requires_grad=True)
    with torch.no_grad():
        out = f(x)
    assert out.grad_fn is None
    assert set(f.last.graphs) == {"inference"}
    names = [n.name for n in compiler.graphs[0].graph.nodes if n.op == "placeholder"]
    assert not any(name.startswith("tangents") for name in names)
    torch.testing.assert_close(out, x.detach().exp().sum(0))


def test_inference_compiler_used_for_inputs_without_grad():
    calls = []

    def inference(gm, example_inputs):
        calls.append(gm)
        return gm

    f = aot_function(lambda x: x + 1, identity_compiler, inference_compiler=inference)
    f(torch.randn(2))
    assert len(calls) == 1


def test_inference_graph_marks_the_outputs_the_user_gets_as_they_are():
    from aot_autograd.program import USER_VISIBLE_OUTPUTS

    compiler = RecordingCompiler()

    def fn(x, buf):
        y = x.exp()
        z = x * 2
        buf.add_(1)  # a mutated input's new value is a graph output too
        return y, z, z[0], x.view(-1)  # z has a view among the outputs: its base

    f = aot_function(fn, compiler)
    x, buf = torch.randn(3, 4), torch.zeros(2)
    with torch.no_grad():
        y, z, row, flat = f(x, buf)
    torch.testing.assert_close(row, x[0] * 2)
    outputs = [n for n in compiler.graphs[0].graph.nodes if n.op == "output"][0]
    visible = outputs.meta[USER_VISIBLE_OUTPUTS]
    graph_outputs = outputs.args[0]
    # y alone: z is the base of z[0], x.view(-1) is an input alias, buf's value is copied back
    assert [graph_outputs[i].meta["val"].shape for i in visible] == [torch.Size([3, 4])]
    assert len(visible) == 1 and len(graph_outputs) >= 3


def test_forward_graphs_mark_no_output_as_the_users():
    from aot_autograd.program import USER_VISIBLE_OUTPUTS

    compiler = RecordingCompiler()
    f = aot_function(lambda x: x.exp() * 2, compiler)
    f(torch.randn(3, requires_grad=True)).sum().backward()
    for gm in compiler.graphs:
        output = [n for n in gm.graph.nodes if n.op == "output"][0]
        assert USER_VISIBLE_OUTPUTS not in output.meta


def test_dropout_reproducible_under_a_seed_and_matches_eager_in_distribution():
    f = aot_function(lambda x: F.dropout(x, p=0.3, training=True) * 2, identity_compiler)
    x = torch.ones(200_000, requires_grad=True)
    torch.manual_seed(7)
    first = f(x)
    torch.manual_seed(7)
    second = f(x)
    torch.testing.assert_close(first, second)
    kept = first != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.01
    torch.testing.assert_close(first[kept], torch.full_like(first[kept], 2 / 0.7))
    (grad,) = torch.autograd.grad(first.sum(), x)
    torch.testing.assert_close(grad, kept.float() * 2 / 0.7)


def test_dropout_min_cut_saves_the_mask_rather_than_redrawing_it():
    f = aot_function(
        lambda x: F.dropout(x.sin(), p=0.5, training=True).cos(),
        identity_compiler,
        partition_fn=min_cut_rematerialization_partition,
    )
    x = torch.randn(1000, requires_grad=True)
    out = f(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    mask = (out != 1.0).float()  # cos(0) == 1 where dropped
    expected = -torch.sin(x.detach().sin() * mask * 2) * mask * 2 * x.detach().cos()
    torch.testing.assert_close(grad, expected)


def test_aot_graphs_log(capsys):
    guards.set_logs(aot_graphs=logging.INFO)
    try:
        aot_function(lambda x: x.relu() * 3, identity_compiler)(torch.randn(3, requires_grad=True))
    finally:
        guards.set_logs(aot_graphs=False)
    err = capsys.readouterr().err
    assert "joint graph" in err and "forward graph" in err and "backward graph" in err
    assert "aten.relu.default" in err


def _pointwise_chain(x, w):
    h = x @ w
    return (h.sin() * h.cos() + h.exp()).tanh().sum()


def test_min_cut_saves_no_more_than_default_and_never_recomputes_heavy_ops():
    x = torch.randn(32, 64, requires_grad=True)
    w = torch.randn(64, 64, requires_grad=True)
    sizes = {}
    for partition in (default_partition, min_cut_rematerialization_partition):
        compiler = RecordingCompiler()
        f = aot_function(_pointwise_chain, compiler, partition_fn=partition)
        out = f(x, w)
        grads = torch.autograd.grad(out, [x, w])
        x2, w2 = x.detach().requires_grad_(), w.detach().requires_grad_()
        torch.testing.assert_close(grads, torch.autograd.grad(_pointwise_chain(x2, w2), [x2, w2]))
        backward = f.last.graphs["backward"]
        sizes[partition.__name__] = saved_bytes(backward)
        if partition is min_cut_rematerialization_partition:
            _assert_only_cheap_recompute(backward)
    assert sizes["min_cut_rematerialization_partition"] < sizes["default_partition"]


def _assert_only_cheap_recompute(backward):
    tangent_dependent = set()
    for node in backward.graph.nodes:
        if node.op == "placeholder" and node.name.startswith("tangents"):
            tangent_dependent.add(node)
        elif any(a in tangent_dependent for a in node.all_input_nodes):
            tangent_dependent.add(node)
        elif node.op == "call_function":
            assert is_recomputable(node), f"min-cut recomputed {node.target}"


def _mlp(x, w2, w3):
    return ((x.sin() @ w2).sigmoid() @ w3).sum()


def test_recomputed_values_come_just_before_their_first_use():
    # sin(x) is recomputed from x (saved for cos(x)) for w2's gradient, which the
    # backward reaches after the products through w3: it must not open the backward
    args = [torch.randn(16, 16, requires_grad=True) for _ in range(3)]
    compiler = RecordingCompiler()
    f = aot_function(_mlp, compiler, partition_fn=min_cut_rematerialization_partition)
    grads = torch.autograd.grad(f(*args), args)
    plain = [a.detach().requires_grad_() for a in args]
    torch.testing.assert_close(grads, torch.autograd.grad(_mlp(*plain), plain))
    nodes = list(f.last.graphs["backward"].graph.nodes)
    (sin,) = [n for n in nodes if n.target == aten.sin.default]
    first_mm = min(k for k, n in enumerate(nodes) if n.target == aten.mm.default)
    assert nodes.index(sin) > first_mm
    assert min(nodes.index(u) for u in sin.users) == nodes.index(sin) + 1


def _residual_stack(x, *ws):
    h = x
    for w in ws:
        h = h + torch.tanh(h @ w)
    return h.sum()


def test_a_long_residual_chain_is_saved_along_the_way_not_rebuilt_from_its_start():
    # Min-cut alone saves only x and the products, and rebuilds every h from x and all
    # the products at the start of the backward (one fused chain reading 60 tensors);
    # an h is saved once a recomputation would read more than MAX_RECOMPUTE_READS.
    args = [torch.randn(8, 8, requires_grad=True)]
    args += [(torch.randn(8, 8) * 0.1).requires_grad_() for _ in range(60)]
    compiler = RecordingCompiler()
    f = aot_function(_residual_stack, compiler, partition_fn=min_cut_rematerialization_partition)
    grads = torch.autograd.grad(f(*args), args)
    plain = [a.detach().requires_grad_() for a in args]
    torch.testing.assert_close(grads, torch.autograd.grad(_residual_stack(*plain), plain))
    backward = f.last.graphs["backward"]
    saved = [n for n in backward.graph.nodes if n.op == "placeholder"]
    saved_sums = [n for n in saved if n.meta["val"].shape == (8, 8) and "add" in n.name]
    assert 60 // (MAX_RECOMPUTE_READS + 1) <= len(saved_sums) < 60  # some sums saved
    # no recomputed chain of adds (of values, not gradients) nearly as long as the stack
    depth, gradients = {}, set()
    for node in backward.graph.nodes:
        if node.name.startswith("tangents") or gradients & set(node.all_input_nodes):
            gradients.add(node)
        elif node.target == aten.add.Tensor:
            depth[node] = 1 + max((depth.get(a, 0) for a in node.all_input_nodes), default=0)
    assert 0 < max(depth.values(), default=0) <= MAX_RECOMPUTE_READS


def test_custom_decomposition_table_applies_recursively():
    def gelu(x, approximate="none"):
        return x * 0.5 * (1 + torch.erf(x / 2**0.5))

    def erf(x):  # decomposed again: the decomposition's own ops are traced
        return torch.tanh(x * 1.2025)

    table = {aten.gelu.default: gelu, aten.erf.default: erf}
    compiler = RecordingCompiler()
    f = aot_function(F.gelu, compiler, decompositions=table)
    x = torch.randn(8, requires_grad=True)
    out = f(x)
    # The forward is decomposed; autograd still differentiates gelu (gelu_backward).
    targets = {n.target for n in compiler.graphs[0].graph.nodes}
    assert aten.gelu.default not in targets and aten.erf.default not in targets
    assert aten.tanh.default in targets
    torch.testing.assert_close(out, x * 0.5 * (1 + torch.tanh(x / 2**0.5 * 1.2025)))


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.fc(x)).relu()


def test_aot_graph_on_a_captured_graph_lifts_parameters_and_buffers():
    torch.manual_seed(0)
    net = _Net()
    gm = torch.fx.symbolic_trace(net)
    reference = _Net()
    reference.load_state_dict(net.state_dict())
    x = torch.randn(5, 6)
    compiler = RecordingCompiler()
    compiled = aot_graph(gm, [x], fw_compiler=compiler)
    out, expected = compiled(x), reference(x)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    for p, q in zip(gm.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    for b, c in zip(gm.buffers(), reference.buffers()):
        torch.testing.assert_close(b, c)  # running statistics were copied back
    assert len(compiler.graphs) == 2


def test_aot_module_shares_parameters():
    net = _Net()
    compiled = aot_module(net, identity_compiler)
    assert list(compiled.parameters()) == list(net.parameters())
    compiled(torch.randn(3, 6)).sum().backward()
    assert net.fc.weight.grad is not None


def test_aot_function_recompiles_for_new_shapes():
    f = aot_function(lambda x: x.sum(0), identity_compiler)
    torch.testing.assert_close(f(torch.ones(2, 3)), torch.full((3,), 2.0))
    torch.testing.assert_close(f(torch.ones(4, 5)), torch.full((5,), 4.0))


def test_every_graph_is_functional_with_values():
    compiler = RecordingCompiler()
    f = aot_function(lambda x, b: (x.relu_() * b.add_(1)).sum(), compiler)
    f(torch.randn(3), torch.randn(3))
    for gm in compiler.graphs:
        assert_functional(gm)


def test_aot_graph_with_fake_example_inputs_gives_compilers_fakes():
    mode = guards.FakeTensorMode()
    torch.manual_seed(0)
    net = _Net()
    gm = torch.fx.symbolic_trace(net)
    x = torch.randn(5, 6)
    seen = []

    def compiler(graph, example_inputs):
        seen.append(example_inputs)
        assert_functional(graph)
        return graph

    compiled = aot_graph(gm, [mode.from_real(x)], fw_compiler=compiler)
    reference = _Net()
    reference.load_state_dict(net.state_dict())
    torch.testing.assert_close(compiled(x), reference(x))
    assert all(guards.is_fake(v) for v in seen[0] if isinstance(v, torch.Tensor))


def test_aot_module_takes_keyword_arguments():
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3))

        def forward(self, x, *, scale=1.0, bias=None):
            out = x * self.w * scale
            return out if bias is None else out + bias

    net = Scale()
    compiled = aot_module(net, identity_compiler)
    x, bias = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(compiled(x, scale=2.0, bias=bias), net(x, scale=2.0, bias=bias))
    torch.testing.assert_close(compiled(x), net(x))


def test_backward_twice_with_retain_graph():
    f = aot_function(lambda x: (x.sin() * x).sum(), identity_compiler)
    x = torch.randn(4, requires_grad=True)
    y = f(x)
    (first,) = torch.autograd.grad(y, x, retain_graph=True)
    (second,) = torch.autograd.grad(y, x)
    torch.testing.assert_close(first, second)
    torch.testing.assert_close(first, x.detach().cos() * x.detach() + x.detach().sin())


def test_aot_graph_as_a_torch_compile_backend():
    """docs/ARCHITECTURE.md contract 1: a backend built on aot_graph works under torch.compile."""

    def backend(gm, example_inputs):
        return aot_graph(gm, example_inputs, fw_compiler=RecordingCompiler())

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU())
    reference = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU())
    reference.load_state_dict(model.state_dict())
    x = torch.randn(8, 4)
    out, expected = torch.compile(model, backend=backend)(x), reference(x)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(model[0].weight.grad, reference[0].weight.grad)
    torch.testing.assert_close(model[1].running_mean, reference[1].running_mean)


class _TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 4)
        self.used = torch.nn.Linear(4, 2)
        self.unused = torch.nn.Linear(4, 2)

    def forward(self, x):
        h = torch.tanh(self.body(x))
        return self.used(h), self.unused(h)


def test_parameters_feeding_only_unused_outputs_get_no_grad_as_in_eager():
    # Eager leaves .grad None for them; zeros would change what optimizers do
    # (weight decay and momentum still update a parameter whose grad is zero).
    net = _TwoHeads()
    x = torch.randn(3, 4)
    net(x)[0].sum().backward()
    expected = {n: p.grad for n, p in net.named_parameters()}
    net.zero_grad(set_to_none=True)
    for partition in (default_partition, min_cut_rematerialization_partition):
        compiled = aot_module(net, identity_compiler, partition_fn=partition)
        compiled(x)[0].sum().backward()
        for name, parameter in net.named_parameters():
            if expected[name] is None:
                assert parameter.grad is None, name
            else:
                torch.testing.assert_close(parameter.grad, expected[name], msg=name)
        net.zero_grad(set_to_none=True)


def test_input_no_gradient_reaches_is_not_an_autograd_edge():
    # `unused` requires grad through an op without a derivative; eager's backward of the
    # output never reaches it, so the compiled backward must not either (it would raise)
    def fn(unused, x, mask):
        return (x * 3) ** 2, unused > 0

    compiled = aot_function(fn, identity_compiler)
    grads = []
    for run in (fn, compiled):
        a = torch.tensor([1.0, 2.0], requires_grad=True)
        x = torch.tensor([0.5, -1.5], requires_grad=True)
        unused = a // a
        out, flags = run(unused, x, torch.tensor([True, False]))
        assert out.requires_grad and not flags.requires_grad
        out.sum().backward()
        grads.append((x.grad, a.grad))
    torch.testing.assert_close(grads[1], grads[0])


def test_saved_tensor_in_other_strides_is_copied_into_those_the_backward_expects():
    # A compiled forward may give a saved view as a dense buffer; a compiled backward
    # indexes its inputs with the strides it was compiled for (here: emulated by
    # reading each input through `as_strided` with its traced strides).
    def fn(x):
        y = (x + x)[:, 1:]
        return torch.nn.functional.normalize(y, dim=0)

    def dense_forward(gm, _):
        def run(*args):
            return [o.contiguous() if isinstance(o, torch.Tensor) else o for o in gm(*args)]

        return run

    def stride_assuming_backward(gm, example_inputs):
        def run(*args):
            read = [
                a.as_strided(e.shape, e.stride()) if isinstance(a, torch.Tensor) else a
                for a, e in zip(args, example_inputs)
            ]
            return gm(*read)

        return run

    compiled = aot_function(fn, dense_forward, bw_compiler=stride_assuming_backward)
    x = torch.tensor([[-0.5, -0.25, 0.75], [0.5, 1.0, -2.0]], dtype=torch.float64)
    grads = []
    for run in (fn, compiled):
        leaf = x.clone().requires_grad_()
        out = run(leaf)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)).sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1], grads[0])


def _write_after_reading(x):
    """The backward reads two masks (`x > 0`, `out < 0`) min-cut would recompute from
    `x`, the smaller value to save; `x` is then written in place under no_grad."""
    flat = x.reshape(-1)
    out = torch.where(flat > 0, flat, x)
    with torch.no_grad():
        x.sub_(flat.sum() / flat.shape[0])
    return out.masked_fill_(out < 0, 0)


def _write_through_a_view_after_reading(x):
    out = torch.where(x.t() > 0, x.t(), 0.5) * 3
    with torch.no_grad():
        x[0].mul_(2)
    return out


@pytest.mark.parametrize("fn", [_write_after_reading, _write_through_a_view_after_reading])
@pytest.mark.parametrize(
    "partition",
    [default_partition, min_cut_rematerialization_partition],
    ids=["default", "min_cut"],
)
def test_input_written_after_the_forward_reads_it_keeps_eager_gradient(fn, partition):
    """A partitioner saves no input the graph writes (nor a view of it) where it can
    save what the backward computes from it: the run time copies the input's new value
    in after the forward, which the backward would read (autograd's version check
    raises, where eager's backward runs)."""
    compiled = aot_function(fn, identity_compiler, partition_fn=partition)
    results = []
    for f in (fn, compiled):
        shape = (2, 3, 1) if fn is _write_after_reading else (2, 3)
        x = torch.linspace(-1, 1, 6).reshape(shape).requires_grad_()
        out = f(x)
        out.sum().backward()
        results.append((out.detach(), x.detach(), x.grad))
    torch.testing.assert_close(results[1], results[0])


def _views_of_pooled_memory(gm, example_inputs):
    """A forward compiler whose outputs are views of larger buffers, as a generated
    wrapper gives an output that took over a freed intermediate of another shape."""

    def run(*args):
        results = gm(*args)
        viewed = []
        for value in results:
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                pooled = torch.empty(value.numel() * 2, dtype=value.dtype, device=value.device)
                view = pooled[: value.numel()].view(value.shape)
                view.copy_(value)
                value = view
            viewed.append(value)
        return type(results)(viewed) if isinstance(results, tuple) else viewed

    return run


def test_outputs_the_compiled_forward_gives_as_views_take_in_place_writes():
    # two outputs, each a view of memory the forward reused, then a residual add into
    # one of them (a graph cut between the two halves of a ResNet block)
    def fn(x, w):
        return (x * w).sin(), (x + w).cos()

    x = torch.randn(4, 5, requires_grad=True)
    w = torch.randn(5, requires_grad=True)
    gm = torch.fx.symbolic_trace(fn)
    compiled = aot_graph(gm, [x, w], fw_compiler=_views_of_pooled_memory)
    for _ in range(2):
        a, b = compiled(x, w)
        assert not a._is_view() and not b._is_view()
        a += b
        a.relu_().sum().backward()
        got = (x.grad.clone(), w.grad.clone())
        x.grad = w.grad = None
        ea, eb = fn(x, w)
        ea += eb
        ea.relu_().sum().backward()
        torch.testing.assert_close(a, ea)
        torch.testing.assert_close(got, (x.grad, w.grad))
        x.grad = w.grad = None
