"""A compiled function raises where eager's kernel rejects its arguments.

Fake tensors run meta functions, which skip checks eager kernels make (dtypes a
kernel lacks, index dtypes, in-place casts, full reductions of empty tensors);
decomposed or dead, the op would never reach its kernel. Each case compiles with
the prim_decomp table the C++ backend uses, so nothing of the op's kernel runs.
"""

from __future__ import annotations

import pytest
import torch

from aot_autograd import aot_function

prim_decomp = pytest.importorskip("prim_decomp")

B = torch.tensor([True, False, True])
I = torch.tensor([1, 2, 3])
F = torch.tensor([1.0, 2.0, 3.0])

REJECTED = {
    "argmax_of_bool": (lambda a, b: a.argmax(), (B, None)),
    "argmin_of_bool_over_a_dim": (lambda a, b: a.argmin(0), (B, None)),
    "sub_of_bool_and_int": (lambda a, b: a - b, (B, I)),
    "std_of_int": (lambda a, b: a.std(), (I, None)),
    "softmax_of_int": (lambda a, b: a.softmax(0), (I, None)),
    "lerp_of_int": (lambda a, b: torch.lerp(a, b, 0.5), (I, I)),
    "abs_of_bool": (lambda a, b: a.abs(), (B, None)),
    "remainder_of_bool": (lambda a, b: a % b, (B, B)),
    "bitwise_and_of_float": (lambda a, b: a & b, (F, F)),
    "index_select_with_float_index": (lambda a, b: a.index_select(0, b), (F, F[:1] * 0)),
    "max_of_empty": (lambda a, b: a.max(), (F[:0], None)),
    "in_place_result_not_castable": (lambda a, b: a.mul_(1.5), (I, None)),
    "dead_argmax_of_bool": (lambda a, b: (a.argmax(), a.int())[1], (B, None)),
    "dead_max_of_empty": (lambda a, b: (a.max(), a + 1)[1], (F[:0], None)),
    "dead_in_place_on_intermediate": (lambda a, b: ((a * 2).add_(0.5), a)[1], (I, None)),
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
    "floor_divide_of_int": (lambda a, b: (a // b, a % b), (I, I + 1)),
    "gather_of_index": (lambda a, b: a.gather(0, b), (F, I - 1)),
    "masked_fill_of_int": (lambda a, b: a.masked_fill(b, 7), (I, B)),
    "embedding": (lambda a, b: torch.nn.functional.embedding(b, a.reshape(3, 1)), (F, I - 1)),
    "max_of_empty_over_kept_dim": (lambda a, b: a.reshape(0, 1).amax(1), (F[:0], None)),
}


@pytest.mark.parametrize("fn, args", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_compiled_function_accepts_what_eager_kernel_accepts(fn, args):
    compiled = aot_function(fn, lambda gm, _: gm, decompositions=prim_decomp.inductor_default)
    torch.testing.assert_close(_call(compiled, args), _call(fn, args))
