"""A compiled function raises where eager's kernel rejects its arguments.

Fake tensors run meta functions, which skip checks eager kernels make (dtypes a
kernel lacks, index dtypes, in-place casts, full reductions of empty tensors);
decomposed or dead, the op would never reach its kernel. Each case compiles with
the prim_decomp table the C++ backend uses, so nothing of the op's kernel runs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
import torch.utils._pytree as pytree

from aot_autograd import aot_function

prim_decomp = pytest.importorskip("prim_decomp")
aten = torch.ops.aten

BOOLS = torch.tensor([True, False, True])
INTS = torch.tensor([1, 2, 3])
FLOATS = torch.tensor([1.0, 2.0, 3.0])

REJECTED = {
    "argmax_of_bool": (lambda a, b: a.argmax(), (BOOLS, None)),
    "argmin_of_bool_over_a_dim": (lambda a, b: a.argmin(0), (BOOLS, None)),
    "sub_of_bool_and_int": (lambda a, b: a - b, (BOOLS, INTS)),
    "std_of_int": (lambda a, b: a.std(), (INTS, None)),
    "softmax_of_int": (lambda a, b: a.softmax(0), (INTS, None)),
    "lerp_of_int": (lambda a, b: torch.lerp(a, b, 0.5), (INTS, INTS)),
    "abs_of_bool": (lambda a, b: a.abs(), (BOOLS, None)),
    "remainder_of_bool": (lambda a, b: a % b, (BOOLS, BOOLS)),
    "bitwise_and_of_float": (lambda a, b: a & b, (FLOATS, FLOATS)),
    "index_select_with_float_index": (lambda a, b: a.index_select(0, b), (FLOATS, FLOATS[:1] * 0)),
    "max_of_empty": (lambda a, b: a.max(), (FLOATS[:0], None)),
    "in_place_result_not_castable": (lambda a, b: a.mul_(1.5), (INTS, None)),
    "dead_argmax_of_bool": (lambda a, b: (a.argmax(), a.int())[1], (BOOLS, None)),
    "dead_max_of_empty": (lambda a, b: (a.max(), a + 1)[1], (FLOATS[:0], None)),
    "dead_in_place_on_intermediate": (lambda a, b: ((a * 2).add_(0.5), a)[1], (INTS, None)),
    "dead_sub_of_float_and_bool_scalar": (lambda a, b: (torch.sub(a, True), a)[1], (FLOATS, None)),
    "dead_rsub_of_bool_scalar": (lambda a, b: (True - a, a + 1)[1], (FLOATS, None)),
    "dead_sub_of_float_and_bool": (lambda a, b: (a - b, a + 1)[1], (FLOATS, BOOLS)),
    # a float op failing at its full (small) sizes, not only at the probe's capped ones
    "dead_interpolate_to_zero_width": (
        lambda a, b: (F.interpolate(a.reshape(1, 1, 1), scale_factor=0.5, mode="linear"), a)[1],
        (FLOATS[:1], None),
    ),
    "dead_interpolate_to_zero_width_batched": (
        lambda a, b: (F.interpolate(a.reshape(3, 1, 1), scale_factor=0.5), a + 1)[1],
        (FLOATS, None),
    ),
    "dead_max_pool_larger_than_input": (
        lambda a, b: (F.max_pool2d(a.reshape(1, 3, 1), 2), a + 1)[1],
        (FLOATS, None),
    ),
}


def _call(fn, args):
    return fn(*(None if a is None else a.clone() for a in args))


@pytest.mark.parametrize("fn, args", REJECTED.values(), ids=REJECTED.keys())
def test_compiled_function_raises_where_eager_kernel_rejects_arguments(fn, args):
    with pytest.raises(Exception) as eager:
        _call(fn, args)
    compiled = aot_function(fn, lambda gm, _: gm, decompositions=prim_decomp.inductor_default)
    with pytest.raises(type(eager.value)):
        _call(compiled, args)


ACCEPTED = {
    "floor_divide_of_int": (lambda a, b: (a // b, a % b), (INTS, INTS + 1)),
    "gather_of_index": (lambda a, b: a.gather(0, b), (FLOATS, INTS - 1)),
    "masked_fill_of_int": (lambda a, b: a.masked_fill(b, 7), (INTS, BOOLS)),
    "embedding": (
        lambda a, b: torch.nn.functional.embedding(b, a.reshape(3, 1)),
        (FLOATS, INTS - 1),
    ),
    "max_of_empty_over_kept_dim": (lambda a, b: a.reshape(0, 1).amax(1), (FLOATS[:0], None)),
    "interpolate_of_width_3_by_half": (
        lambda a, b: F.interpolate(a.reshape(1, 1, 3), scale_factor=0.5, mode="linear"),
        (FLOATS, None),
    ),
}


@pytest.mark.parametrize("fn, args", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_compiled_function_accepts_what_eager_kernel_accepts(fn, args):
    compiled = aot_function(fn, lambda gm, _: gm, decompositions=prim_decomp.inductor_default)
    torch.testing.assert_close(_call(compiled, args), _call(fn, args))


UNUSED_INDEXING = {
    "tensor_index": lambda a, b: (a[b], a + 1)[1],
    "index_select": lambda a, b: (a.index_select(0, b), a + 1)[1],
    "gather": lambda a, b: (a.gather(0, b), a + 1)[1],
    "index_add": lambda a, b: (a.index_add(0, b, a[:1]), a + 1)[1],
    "embedding": lambda a, b: (torch.nn.functional.embedding(b, a.reshape(3, 1)), a + 1)[1],
}


UNUSED_INDEXING_OF_INTS = {
    name: fn
    for name, fn in UNUSED_INDEXING.items()
    if name in ("tensor_index", "index_select", "gather")
}


@pytest.mark.parametrize("fn", UNUSED_INDEXING_OF_INTS.values(), ids=UNUSED_INDEXING_OF_INTS.keys())
def test_unused_indexing_of_integers_still_raises_on_an_index_out_of_range(fn):
    compiled = aot_function(fn, lambda gm, _: gm, decompositions=prim_decomp.inductor_default)
    torch.testing.assert_close(compiled(INTS, torch.tensor([1])), fn(INTS, torch.tensor([1])))
    with pytest.raises(Exception) as eager:
        fn(INTS, torch.tensor([5]))
    with pytest.raises(type(eager.value)):
        compiled(INTS, torch.tensor([5]))


UNUSED_INTEGER_DIVISIONS = {
    "remainder": lambda a, b: (a % b, a + 1)[1],
    "floor_divide": lambda a, b: (a // b, a + 1)[1],
    "fmod": lambda a, b: (torch.fmod(a, b), a + 1)[1],
    "div_floor": lambda a, b: (torch.div(a, b, rounding_mode="floor"), a + 1)[1],
    "div_trunc": lambda a, b: (torch.div(a, b, rounding_mode="trunc"), a + 1)[1],
    "scalar_remainder": lambda a, b: (5 % b, a + 1)[1],
    "remainder_in_place": lambda a, b: ((a * 2).remainder_(b), a + 1)[1],
    "floor_divide_in_place": lambda a, b: ((a * 2).floor_divide_(b), a + 1)[1],
    "remainder_then_view": lambda a, b: ((a % b).view(-1), a + 1)[1],
}


@pytest.mark.parametrize("divisor_dtype", [torch.int64, torch.bool])
@pytest.mark.parametrize(
    "fn", UNUSED_INTEGER_DIVISIONS.values(), ids=UNUSED_INTEGER_DIVISIONS.keys()
)
def test_unused_integer_division_still_raises_on_a_zero_divisor(fn, divisor_dtype):
    compiled = aot_function(fn, lambda gm, _: gm, decompositions=prim_decomp.inductor_default)
    nonzero, zero = torch.tensor([1]).to(divisor_dtype), torch.tensor([0]).to(divisor_dtype)
    torch.testing.assert_close(compiled(INTS, nonzero), fn(INTS, nonzero))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(INTS, zero)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        compiled(INTS, zero)


@pytest.mark.parametrize("fn", UNUSED_INDEXING.values(), ids=UNUSED_INDEXING.keys())
def test_unused_indexing_still_raises_on_an_index_out_of_range(fn):
    compiled = aot_function(fn, lambda gm, _: gm, decompositions=prim_decomp.inductor_default)
    in_range, out_of_range = torch.tensor([1]), torch.tensor([5])
    torch.testing.assert_close(compiled(FLOATS, in_range), fn(FLOATS, in_range))
    with pytest.raises(Exception) as eager:
        fn(FLOATS, out_of_range)
    with pytest.raises(type(eager.value)):
        compiled(FLOATS, out_of_range)


def test_used_indexing_gets_no_extra_check():
    graphs = []

    def compiler(gm, _):
        graphs.append(gm)
        return gm

    compiled = aot_function(lambda a, b: a.gather(0, b) + 1, compiler)
    compiled(FLOATS, torch.tensor([1]))
    (graph,) = graphs
    assert not any(n.target is torch.ops.aten.isnan.default for n in graph.graph.nodes)


UNUSED_CLASS_TARGETS = {
    "nll_loss": lambda a, b: (torch.nn.functional.nll_loss(a.view(1, 3), b), a + 1)[1],
    "cross_entropy": lambda a, b: (torch.nn.functional.cross_entropy(a.view(1, 3), b), a + 1)[1],
}


@pytest.mark.parametrize("fn", UNUSED_CLASS_TARGETS.values(), ids=UNUSED_CLASS_TARGETS.keys())
def test_unused_loss_still_raises_on_a_class_target_out_of_range(fn):
    compiled = aot_function(fn, lambda gm, _: gm, decompositions=prim_decomp.inductor_default)
    in_range, out_of_range = torch.tensor([1]), torch.tensor([5])
    torch.testing.assert_close(compiled(FLOATS, in_range), fn(FLOATS, in_range))
    with pytest.raises(IndexError):
        fn(FLOATS, out_of_range)
    # the decomposed loss reads the target through `gather`, whose error is a RuntimeError
    with pytest.raises((IndexError, RuntimeError), match="out of bounds"):
        compiled(FLOATS, out_of_range)


def test_probe_stand_ins_keep_class_targets_in_range():
    """A probe's stand-in class target is 0, a class the capped logits have: on a GPU an
    out-of-range target fails a device-side assertion that no exception handler undoes
    (every later CUDA call of the process fails)."""
    from aot_autograd.kernel_checks import _probe_arguments

    aten = torch.ops.aten
    logits, target = torch.randn(4, 50), torch.randint(0, 50, (4,))
    for capped in (True, False):
        args, _ = _probe_arguments(
            aten.nll_loss_forward.default, (logits, target, None, 1, -100), {}, capped
        )
        assert int(args[1].max()) < args[0].shape[1]


def test_probes_that_could_assert_on_a_gpu_are_not_run_there():
    from aot_autograd.kernel_checks import _may_assert_on_device

    aten = torch.ops.aten
    index = torch.zeros(2, dtype=torch.long)
    # on the CPU a probe's index error is an exception: probed as before
    args = (torch.empty(0, 3), 0, index)
    assert not _may_assert_on_device(aten.index_select.default, args, {}, [args[0], index])
    if torch.cuda.is_available():
        on_gpu = (torch.empty(0, 3, device="cuda"), 0, index.cuda())
        tensors = [on_gpu[0], on_gpu[2]]
        assert _may_assert_on_device(aten.index_select.default, on_gpu, {}, tensors)
        assert not _may_assert_on_device(aten.sin.default, on_gpu[:1], {}, tensors[:1])


def _ints(*shape):
    return torch.zeros(shape, dtype=torch.long)


INDEX_LIKE = {
    "gather": (aten.gather.default, (torch.randn(2, 3), 1, _ints(2, 3))),
    "scatter": (aten.scatter.value, (torch.randn(2, 3), 1, _ints(2, 3), 1.0)),
    "embedding": (aten.embedding.default, (torch.randn(5, 3), _ints(4))),
    "take": (aten.take.default, (torch.randn(5), _ints(4))),
    "index": (aten.index.Tensor, (torch.randn(5), [_ints(4)])),
    "index_put": (aten.index_put.default, (torch.randn(5), [_ints(2)], torch.ones(2))),
    "nll_loss_backward": (
        aten.nll_loss_backward.default,
        (torch.tensor(1.0), torch.randn(4, 3), _ints(4), None, 1, -100, torch.tensor(4.0)),
    ),
    "embedding_bag": (
        aten._embedding_bag.default,
        (torch.randn(5, 3), _ints(4), _ints(2)),
    ),
    "one_hot": (aten.one_hot.default, (_ints(4), 3)),
}
NOT_INDEX_LIKE = {
    "softmax_of_ints": (aten._softmax.default, (_ints(2, 3), 1, False)),
    "lerp_of_ints": (aten.lerp.Scalar, (_ints(3), _ints(3), 0.5)),
    "add_of_ints": (aten.add.Tensor, (_ints(3), _ints(3))),
    "sum_of_ints": (aten.sum.dim_IntList, (_ints(2, 3), [1])),
    "float_target": (aten.binary_cross_entropy.default, (torch.rand(3), torch.rand(3))),
}


@pytest.mark.parametrize("name", INDEX_LIKE)
def test_gpu_probes_skip_ops_given_index_like_integer_tensors(name, monkeypatch):
    from aot_autograd import kernel_checks

    monkeypatch.setattr(kernel_checks, "_on_gpu", lambda tensors: True)
    op, args = INDEX_LIKE[name]
    tensors = [t for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor)]
    assert kernel_checks._may_assert_on_device(op, args, {}, tensors)


@pytest.mark.parametrize("name", NOT_INDEX_LIKE)
def test_gpu_probes_run_integer_ops_without_index_like_arguments(name, monkeypatch):
    from aot_autograd import kernel_checks

    monkeypatch.setattr(kernel_checks, "_on_gpu", lambda tensors: True)
    op, args = NOT_INDEX_LIKE[name]
    tensors = [t for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor)]
    assert not kernel_checks._may_assert_on_device(op, args, {}, tensors)


def test_softmax_of_integers_raises_under_a_gpu_probe_decision(monkeypatch):
    """With the GPU's decision forced on the CPU, an integer op's dtype error is still
    raised by its probe (eager raises it on a GPU too), and an index op is not probed."""
    from aot_autograd import kernel_checks

    monkeypatch.setattr(kernel_checks, "_on_gpu", lambda tensors: True)
    ints = torch.arange(6).reshape(2, 3)
    with pytest.raises(RuntimeError, match="Long"):
        torch.softmax(ints, 1)  # eager's error
    with pytest.raises(RuntimeError, match="Long"):
        kernel_checks.check_kernel_accepts(aten._softmax.default, (ints, 1, False), {})
    out_of_range = torch.full((2, 3), 7)
    kernel_checks.check_kernel_accepts(
        aten.gather.default, (torch.empty(0, 3), 0, out_of_range), {}
    )


def test_cross_entropy_over_many_classes_compiles_and_checks_its_targets():
    import torch.nn.functional as F

    def fn(logits, target):
        return F.cross_entropy(logits.float(), target)

    logits = torch.randn(6, 500, requires_grad=True)
    target = torch.randint(0, 500, (6,))
    compiled = aot_function(fn, lambda gm, _: gm, decompositions=prim_decomp.inductor_default)
    torch.testing.assert_close(compiled(logits, target), fn(logits, target))
    with pytest.raises((IndexError, RuntimeError), match="out of bounds"):
        compiled(logits, torch.full((6,), 500))


def test_ctc_loss_grads_compile_without_probing_past_capped_lengths():
    """`_ctc_loss_backward` keeps `input_lengths` (50) while a capped probe's `log_probs`
    has one step: its CPU kernel would read past it (a crash, not an exception), so an op
    given lengths or offsets is not probed."""
    from aot_autograd.kernel_checks import _may_read_out_of_bounds

    log_probs = torch.randn(50, 3, 6).log_softmax(2).requires_grad_()
    targets = torch.randint(1, 6, (3, 10))
    lengths = ([50, 50, 50], [10, 8, 9])

    def fn(log_probs, targets):
        return F.ctc_loss(log_probs, targets, *lengths, reduction="none", zero_infinity=True)

    compiled = aot_function(fn, lambda gm, _: gm, decompositions=prim_decomp.inductor_default)
    expected, actual = fn(log_probs, targets), compiled(log_probs, targets)
    torch.testing.assert_close(actual, expected)
    grad = torch.randn_like(expected)
    torch.testing.assert_close(
        torch.autograd.grad(actual, log_probs, grad), torch.autograd.grad(expected, log_probs, grad)
    )
    assert _may_read_out_of_bounds(
        aten._ctc_loss.default, (log_probs, targets, *lengths, 0, True), {}
    )
    assert not _may_read_out_of_bounds(aten.gather.default, (log_probs, 0, targets), {})


@pytest.mark.parametrize("requires_grad", [False, True])
def test_cholesky_of_a_matrix_not_positive_definite_raises_after_compiling(requires_grad):
    """`linalg.cholesky` checks its factorization's `info` by an op with no result; a
    training graph keeps it as a value check, so a later call on a matrix that is not
    positive-definite raises as eager does, not returning garbage."""
    a = torch.randn(3, 3)
    positive_definite = (a @ a.mT + 3 * torch.eye(3)).requires_grad_(requires_grad)
    compiled = aot_function(
        torch.linalg.cholesky, lambda gm, _: gm, decompositions=prim_decomp.inductor_default
    )
    expected = torch.linalg.cholesky(positive_definite)
    actual = compiled(positive_definite)
    torch.testing.assert_close(actual, expected)
    if requires_grad:
        grad = torch.randn(3, 3)
        torch.testing.assert_close(
            torch.autograd.grad(actual, positive_definite, grad),
            torch.autograd.grad(expected, positive_definite, grad),
        )
    singular = -torch.eye(3).requires_grad_(requires_grad)
    with pytest.raises(RuntimeError, match="linalg.cholesky"):
        torch.linalg.cholesky(singular)
    with pytest.raises(RuntimeError, match="linalg.cholesky"):
        compiled(singular)
