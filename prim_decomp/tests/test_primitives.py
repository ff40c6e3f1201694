"""ember_prims: eager kernels against meta rules, and meta rules on symbolic sizes."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from prim_decomp import PRIM_SCHEMAS, is_prim, prim_ops

P = torch.ops.ember_prims


def _meta(value):
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, list):
        return [_meta(v) for v in value]
    return value


def _same_layout(eager: torch.Tensor, meta: torch.Tensor) -> None:
    assert eager.shape == meta.shape
    assert eager.dtype == meta.dtype
    if eager.numel() > 1:
        assert eager.stride() == meta.stride(), (eager.stride(), meta.stride())


def _cases():
    torch.manual_seed(0)
    x = torch.rand(3, 4) + 0.5
    xt = x.t()  # non-contiguous input: layouts must still agree
    ints = torch.randint(1, 5, (3, 4))
    index = torch.tensor([[0, 2, 1, 0], [1, 1, 0, 2]])
    cases = {
        "exp": (xt,), "logistic": (x,), "neg": (ints,), "isnan": (x,),
        "add": (xt, xt), "div": (ints, ints), "pow": (x, x), "lt": (x, x), "where": (x > 1, x, x),
        "convert_element_type": (xt, torch.float64),
        "broadcast_in_dim": (torch.rand(4), [3, 4], [1]),
        "reshape": (xt, [2, 6]), "permute": (x, [1, 0]), "slice": (x, 1, 1, 4, 2),
        "squeeze": (torch.rand(3, 1, 4), [1]), "as_strided": (x, [2, 2], [1, 4], 1),
        "copy_strided": (x, [1, 3]), "sum": (xt, [0]), "prod": (x, [0, 1]),
        "amax": (x, [1]), "amin": (x, []), "var": (x, [1], 1.0), "argmax": (x, 1),
        "cumsum": (x, 1), "iota": (5, 2, 3, torch.int64, torch.device("cpu")),
        "full": ([2, 3], 1.5, torch.float32, torch.device("cpu")),
        "empty_strided": ([2, 3], [1, 2], torch.float32, torch.device("cpu")),
        "uniform": ([4], 0.0, 1.0, torch.float32, torch.device("cpu")),
        "cat": ([x, xt.t()], 0), "gather": (x, 1, index),
        "scatter": (x, 1, index, torch.rand(2, 4)), "scatter_add": (x, 1, index, torch.rand(2, 4)),
        "index": (x, [torch.tensor([0, 2])]),
        "index_put": (x, [torch.tensor([0, 2])], torch.rand(2, 4), True),
    }  # fmt: skip
    return cases


@pytest.mark.parametrize("name", sorted(_cases()))
def test_eager_and_meta_agree(name):
    args = _cases()[name]
    op = getattr(P, name).default
    eager = op(*args)
    meta_args = [_meta(a) for a in args]
    meta_args = [torch.device("meta") if isinstance(a, torch.device) else a for a in meta_args]
    meta = op(*meta_args)
    _same_layout(eager, meta)


def test_every_prim_is_registered_and_recognized():
    ops = prim_ops()
    assert len(ops) == len(PRIM_SCHEMAS) > 60
    assert all(is_prim(op) for op in ops)
    assert not is_prim(torch.ops.aten.add.Tensor)


def test_values_match_torch():
    x = torch.randn(5, 3)
    torch.testing.assert_close(
        P.div(torch.tensor([7, -7]), torch.tensor([2, 2])), torch.tensor([3, -3])
    )
    torch.testing.assert_close(P.var(x, [0], 1.0), x.var(0))
    torch.testing.assert_close(P.slice(x, 0, 1, 5, 2), x[1:5:2])
    torch.testing.assert_close(P.broadcast_in_dim(x[:, :1], [5, 3], [0, 1]), x[:, :1].expand(5, 3))
    torch.testing.assert_close(P.iota(4, 1, 2, torch.int64, "cpu"), torch.arange(1, 9, 2))


def test_meta_rules_take_symbolic_sizes():
    def f(x, y):
        s = P.sum(P.mul(x, x), [1])
        b = P.broadcast_in_dim(s, [x.shape[0], 3], [0])
        r = P.reshape(P.cat([b, y], 0), [(x.shape[0] + y.shape[0]) * 3])
        return P.slice(r, 0, 1, r.shape[0], 2)

    gm = make_fx(f, tracing_mode="symbolic")(torch.randn(4, 3), torch.randn(2, 3))
    out_val = [n for n in gm.graph.nodes if n.op == "output"][0].args[0].meta["val"]
    assert any(isinstance(s, torch.SymInt) for s in out_val.shape)
    x, y = torch.randn(6, 3), torch.randn(5, 3)
    torch.testing.assert_close(gm(x, y), f(x, y))
