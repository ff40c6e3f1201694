"""Online logsumexp: max(v) and sum(exp(v - max)) over a long row in one loop.

Rows longer than a block (a 50k vocabulary) loop; the max and the sum of exponentials
that softmax, log_softmax, logsumexp and cross-entropy need are read in one pass with a
running maximum and a sum rescaled to it. Results against eager, non-finite rows
included; without a GPU the kernels run under the Triton interpreter.
"""

from __future__ import annotations

import re

import pytest
import torch
from graph_helpers import trace

from inductor_codegen import compile_graph

pytest.importorskip("triton")
pytest.importorskip("aot_autograd")  # (packages of the pipeline: tests run alone without)
pytest.importorskip("prim_decomp")
from aot_autograd import aot_graph  # noqa: E402
from aot_autograd.partitioners import min_cut_rematerialization_partition  # noqa: E402
from prim_decomp import inductor_default  # noqa: E402

pytestmark = pytest.mark.triton_interpret

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OPTIONS = {"device_codegen": "triton"}
LONG = 5001  # longer than a persistent block (4096), not a multiple of any block


def tolerance(dtype):
    return dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)


def compiled_and_loops(fn, *args):
    compiled = compile_graph(trace(fn, *args), list(args), options=OPTIONS)
    loops = re.findall(r"^\s+for r\d+offset in range", compiled.artifact("codegen"), re.M)
    return compiled, len(loops)


def logsumexp(x):
    return torch.logsumexp(x.float(), dim=-1)


def log_softmax(x):
    return torch.log_softmax(x.float(), dim=-1)


def softmax(x):
    return torch.softmax(x.float(), dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "fn, loops",
    [(logsumexp, 1), (log_softmax, 2)],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_long_rows_read_once_for_max_and_sum(fn, loops, dtype):
    x = (torch.randn(3, LONG, device=DEVICE) * 8).to(dtype)
    compiled, found = compiled_and_loops(fn, x)
    torch.testing.assert_close(compiled(x), fn(x), **tolerance(dtype))
    assert found == loops  # max and sum in one loop (plus the pointwise pass, if any)
    assert "_s_scale = tl.where" in compiled.artifact("codegen")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_over_long_rows(dtype):
    # exp(x - max) is stored for the sum and the division (the realize rule), so the
    # max and the sum stay apart here
    x = (torch.randn(3, LONG, device=DEVICE) * 8).to(dtype)
    compiled, _ = compiled_and_loops(softmax, x)
    torch.testing.assert_close(compiled(x), softmax(x), **tolerance(dtype))


def test_growing_maximum_rescales_the_sum():
    # the maximum grows along the row: every step rescales what came before
    x = torch.linspace(-50, 50, 2 * LONG, device=DEVICE).reshape(2, LONG)
    compiled, _ = compiled_and_loops(log_softmax, x)
    torch.testing.assert_close(compiled(x), log_softmax(x))


def test_non_finite_rows_match_eager():
    x = torch.randn(5, LONG, device=DEVICE)
    x[0] = float("-inf")  # a fully masked row: NaN, as eager
    x[1, 100:] = float("-inf")  # masked past the first block
    x[2, 4500] = float("inf")
    x[3, 17] = float("nan")
    x[4, :3000] = float("-inf")  # the first blocks hold nothing
    for fn in (logsumexp, log_softmax):
        compiled, _ = compiled_and_loops(fn, x)
        torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)


def test_short_rows_keep_their_persistent_form():
    x = torch.randn(4, 1000, device=DEVICE)
    compiled, found = compiled_and_loops(log_softmax, x)
    torch.testing.assert_close(compiled(x), log_softmax(x))
    assert found == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_training_over_a_long_vocabulary(dtype):
    torch.manual_seed(0)

    def loss_fn(logits, target):
        return torch.nn.functional.cross_entropy(logits.float(), target)

    from torch.fx.experimental.proxy_tensor import make_fx  # the reference front end

    logits = torch.randn(6, LONG, device=DEVICE).to(dtype).requires_grad_()
    target = torch.randint(0, LONG, (6,), device=DEVICE)
    target[2] = -100  # ignored
    compiled = []

    def part(g, inputs):
        made = compile_graph(g, inputs, options=OPTIONS)
        compiled.append(made)
        return made

    gm = make_fx(loss_fn)(logits, target)
    fn = aot_graph(
        gm,
        [logits, target],
        fw_compiler=part,
        bw_compiler=part,
        inference_compiler=part,
        decompositions=inductor_default,
        partition_fn=min_cut_rematerialization_partition,  # the inductor backend's
    )
    loss = fn(logits, target)
    loss.backward()
    grad = logits.grad.clone()
    logits.grad = None
    expected = loss_fn(logits, target)
    expected.backward()
    torch.testing.assert_close(loss, expected, **tolerance(dtype))
    torch.testing.assert_close(grad, logits.grad, **tolerance(dtype))
    assert "_s_scale = tl.where" in compiled[0].artifact("codegen")
    # the backward: the one-hot rows from the target (no scatter, nothing stored), the
    # saved [tokens, vocab] value read once, the gradient written once
    backward = compiled[-1].artifact("codegen")
    assert compiled[-1].kernel_count == 1
    assert len(re.findall(rf"tl\.load\(\w+ \+ \({LONG} \* [xy]index", backward)) == 1
    assert len(re.findall(rf"tl\.store\(\w+ \+ \({LONG} \* [xy]index", backward)) == 1
