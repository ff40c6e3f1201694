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
ONLINE = "_ref_new = tl.minimum"  # the running reference of the one-loop form


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
    assert ONLINE in compiled.artifact("codegen")


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


def loop_body(source):
    """The lines of the (first) loop over the row."""
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\s+for r\d+offset", line))
    indent = len(lines[start + 1]) - len(lines[start + 1].lstrip())
    body = []
    for line in lines[start + 1 :]:
        if len(line) - len(line.lstrip()) < indent:
            break
        body.append(line)
    return body


@pytest.mark.parametrize("fn", [logsumexp, log_softmax], ids=lambda f: f.__name__)
def test_online_loop_takes_one_exp_per_element_and_keeps_no_flags(fn):
    # per element: one exp and one multiply-add; the rescale's exp is one per row (its
    # argument is the [XBLOCK, 1] reference); no NaN/inf flags, no second maximum
    x = torch.randn(3, LONG, device=DEVICE)
    compiled, _ = compiled_and_loops(fn, x)
    body = "\n".join(loop_body(compiled.artifact("codegen")))
    assert body.count("libdevice.exp(") == 2
    assert re.search(r"libdevice\.exp\((acc\d+)_ref - \1_ref_new\)", body)
    assert "tl.int8" not in body and "ember_max_combine" not in body


def test_non_finite_classes_in_one_row_match_eager():
    x = torch.randn(8, LONG, device=DEVICE)
    x[0, 10] = float("inf")
    x[0, 4000] = float("nan")  # NaN after +inf: NaN
    x[1, 10] = float("nan")
    x[1, 4000] = float("inf")  # +inf after NaN: NaN
    x[2, 5] = float("inf")
    x[2, 4500] = float("inf")  # two +inf, the second in a later block
    x[3, :] = float("inf")  # only +inf
    x[4, :] = float("-inf")
    x[4, 4999] = float("inf")  # -inf then +inf at the end
    x[5, :] = float("-inf")
    x[5, 3] = float("nan")  # a NaN among -inf
    x[6, :] = float("-inf")
    x[6, 4990] = -3.0e38  # one finite element at the bottom of the range
    x[7] = torch.linspace(3.0e38, -3.0e38, LONG)  # huge magnitudes, finite
    for fn in (logsumexp, log_softmax):
        compiled, _ = compiled_and_loops(fn, x)
        torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)


def test_shift_that_may_be_minus_inf_keeps_the_minus_inf_flag():
    # sum(exp(x - c)) with c = -inf where the row's maximum is not positive: eager gives
    # inf, or NaN where the row holds a -inf (exp(-inf - -inf)); the flag tells them apart
    def shifted_sum(x):
        m = x.amax(-1, keepdim=True)
        c = torch.where(m > 0, m, float("-inf"))
        return torch.exp(x - c).sum(-1)

    x = torch.randn(4, LONG, device=DEVICE)
    x[1] = -x[1].abs() - 1  # maximum negative: c = -inf, sum inf
    x[2] = -x[2].abs() - 1
    x[2, 4321] = float("-inf")  # and a -inf element: NaN
    x[3, :] = float("-inf")  # only -inf: NaN
    compiled, _ = compiled_and_loops(shifted_sum, x)
    torch.testing.assert_close(compiled(x), shifted_sum(x), equal_nan=True)
    assert ONLINE in compiled.artifact("codegen")
    assert "tl.int8" in "\n".join(loop_body(compiled.artifact("codegen")))


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
    assert ONLINE in compiled[0].artifact("codegen")
    # the backward: the one-hot rows from the target (no scatter, nothing stored), the
    # saved [tokens, vocab] value read once, the gradient written once
    backward = compiled[-1].artifact("codegen")
    assert compiled[-1].kernel_count == 1
    # (rows are the tile's y, or its x in a row kernel)
    assert len(re.findall(rf"tl\.load\(\w+ \+ \({LONG} \* [xy]index", backward)) == 1
    assert len(re.findall(rf"tl\.store\(\w+ \+ \({LONG} \* [xy]index", backward)) == 1
