"""test_misc.py-style programs under dynamic=True, counted as torch.compile counts them.

torch's test/dynamo/test_dynamic_shapes.py reruns test_misc.py with every size symbolic;
these probes follow it: sizes used in Python arithmetic, loops over `x.shape[0]`
(unrolled, so the size is guarded), sizes passed to factories and views, size-dependent
branches, `x.size()` tuples compared, hashed and used as keys, `torch.Size` operations,
symbolic floats made from sizes (`/`, `math.sqrt`, `**`), `//` and `%`, `.numel()`,
`math.prod`, `range(x.size(0))` unrolled against `torch.arange(x.size(0))` symbolic.

Each program runs on a sequence of calls of new sizes (every size 2 or more, so no size
is specialized for being 0 or 1) under eager, ember and torch.compile, both compiled
with `dynamic=True` and a counting backend: values equal eager's, graphs and ops equal
torch.compile's (`torchcheck.check_like_torch`).
"""

from __future__ import annotations

import itertools
import math
import operator

import pytest
import torch
import torch.nn.functional as F
from torchcheck import _run_all, check_like_torch, torch_counts

import dynamo_capture
from dynamo_capture.testing import CountingBackend

PROGRAMS: dict[str, tuple] = {}


def program(*calls):
    """Register a program run once for each of `calls`; a call is a tuple of shapes, one
    random tensor of each shape an argument (a plain shape: one argument)."""
    calls = [call if isinstance(call[0], tuple) else (call,) for call in calls]

    def register(fn):
        PROGRAMS[fn.__name__] = (fn, calls)
        return fn

    return register


def _maker(calls):
    cycle = itertools.cycle(calls)
    return lambda: tuple(torch.randn(shape) for shape in next(cycle))


ROWS = ((4, 3), (6, 5), (8, 7))
EVEN = ((4,), (6,), (10,))
VECTORS = ((3,), (5,), (7,))
PAIRS = (((4, 3), (3, 2)), ((6, 5), (5, 4)), ((8, 7), (7, 3)))


# ----- sizes in Python arithmetic ------------------------------------------------------------
@program(*ROWS)
def size_plus_one_scales(x):
    n = x.shape[0]
    return x * (n + 1)


@program(*ROWS)
def sizes_multiplied_and_subtracted(x):
    n, m = x.shape
    return x + (n * m - n)


@program(*ROWS)
def size_squared(x):
    return x + x.size(0) ** 2


@program(*ROWS)
def size_negated_and_absolute(x):
    n = x.size(1)
    return x * abs(-n), -n


@program(*ROWS)
def size_min_max_with_constants(x):
    n = x.size(0)
    return x[: min(n, 5)] * max(n, 2)


@program(*PAIRS)
def sizes_of_two_inputs_added(x, w):
    return (x @ w) * (x.size(0) + w.size(1))


@program(*ROWS)
def size_returned_as_int(x):
    return x.sum(), x.size(0), x.shape[1] * 2


@program(*ROWS)
def size_divmod(x):
    q, r = divmod(x.size(1), 2)
    return x * q + r


@program(*ROWS)
def size_in_tensor_arithmetic_both_sides(x):
    n = x.shape[0]
    return n - x, n * x / (n + 1)


# ----- loops over sizes: unrolled (the size guarded) or symbolic ------------------------------
@program(*VECTORS)
def loop_over_range_of_size(x):
    total = x.new_zeros(())
    for i in range(x.shape[0]):
        total = total + x[i] * i
    return total


@program(*ROWS)
def comprehension_over_size_rows(x):
    return torch.stack([x[i] * 2 for i in range(x.size(0))])


@program(*ROWS)
def arange_of_size_is_symbolic(x):
    return x * torch.arange(x.size(1))


@program(*ROWS)
def loop_over_rows_directly(x):
    out = []
    for row in x:
        out.append(row.sum())
    return torch.stack(out)


@program(*VECTORS)
def while_loop_halving_size(x):
    n = x.size(0)
    steps = 0
    while n > 1:
        n = n // 2
        steps += 1
    return x * steps


@program(*ROWS)
def len_of_range_of_size(x):
    return x * len(range(0, x.size(0), 2))


# ----- sizes passed to operations -------------------------------------------------------------
@program(*ROWS)
def zeros_of_sizes(x):
    n, m = x.shape
    return x + torch.zeros(n, m)


@program(*ROWS)
def ones_of_size_tuple(x):
    return x + torch.ones(x.size())


@program(*ROWS)
def new_full_with_size_value(x):
    return x.new_full((x.size(0),), x.size(1))


@program(*VECTORS)
def eye_of_size(x):
    return torch.eye(x.size(0)) @ x


@program(*VECTORS)
def expand_to_square(x):
    n = x.size(0)
    return x.expand(n, n) + x.unsqueeze(1)


@program(*ROWS)
def full_filled_with_numel(x):
    return torch.full((2,), x.numel()) + 1


@program(*ROWS)
def linspace_of_size(x):
    return torch.linspace(0, 1, x.size(1)) * x


@program(*ROWS)
def narrow_by_size(x):
    return x.narrow(0, 1, x.size(0) - 1)


@program(*EVEN)
def split_in_halves_by_size(x):
    a, b = x.split(x.size(0) // 2)
    return a * b


@program(*EVEN)
def roll_by_half(x):
    return x.roll(x.size(0) // 2)


@program(*ROWS)
def pad_by_size_remainder(x):
    return F.pad(x, (0, x.size(0) % 3))


@program(*ROWS)
def cat_with_a_slice_by_size(x):
    return torch.cat([x, x[: x.size(0) // 2]])


@program(*ROWS)
def index_last_row_by_size(x):
    return x[x.size(0) - 1] + x[-1]


@program(*ROWS)
def repeat_by_size(x):
    return x.repeat(x.size(0) // 2, 1)


@program(*ROWS)
def tensor_of_sizes(x):
    return torch.tensor([x.size(0), x.size(1)]) * 2


# ----- views and reshapes with symbolic sizes ------------------------------------------------
@program(*ROWS)
def view_flattened_by_product(x):
    return x.view(x.size(0) * x.size(1))


@program(*ROWS)
def reshape_with_minus_one(x):
    return x.reshape(-1, x.shape[-1]).t()


@program(*EVEN)
def view_halves(x):
    return x.view(2, x.size(0) // 2).sum(0)


@program(*ROWS)
def unflatten_rows(x):
    return x.flatten().unflatten(0, (x.size(0), x.size(1)))


@program(*ROWS)
def view_by_math_prod(x):
    return x.view(math.prod(x.shape))


@program(*ROWS)
def view_as_a_size_tuple(x):
    y = x * 2
    return y.view(x.size()) + y.reshape(*x.shape)


@program(*ROWS)
def view_with_shape_slice(x):
    return x.unsqueeze(0).view(*x.shape[:-1], x.shape[-1])


# ----- size-dependent branches ----------------------------------------------------------------
@program(*ROWS)
def branch_on_size_greater(x):
    if x.shape[0] > 5:
        return x * 2
    return x - 1


@program(*ROWS)
def branch_on_size_parity(x):
    if x.size(0) % 2 == 0:
        return x.sum(0)
    return x.sum(1)


@program(*ROWS)
def branch_on_numel(x):
    if x.numel() > 20:
        return x.mean()
    return x.sum()


@program(*ROWS)
def branch_on_two_sizes_compared(x):
    return x * 2 if x.size(0) > x.size(1) else x * 3


@program(*PAIRS)
def branch_on_sizes_of_two_inputs(x, w):
    if x.size(1) == w.size(0):
        return x @ w
    return x


@program(*ROWS)
def size_in_tuple_membership(x):
    if x.size(0) in (4, 8):
        return x + 1
    return x - 1


# ----- x.size() tuples compared, hashed and used as keys ----------------------------------------
@program(*ROWS)
def sizes_compared_with_size(x):
    y = x * 2
    return y.size() == x.size(), y + 1


@program(*ROWS)
def size_compared_with_a_torch_size(x):
    return x.size() == torch.Size([x.size(0), x.size(1)]), x * 2


@program(*ROWS)
def size_compared_with_a_constant_tuple(x):
    if x.shape == (4, 3):
        return x + 1
    return x * 2


@program(*ROWS)
def size_as_dict_key(x):
    table = {x.shape: x * 2}
    return table[x.shape] + 1


@program(*ROWS)
def hash_of_size(x):
    return x * (hash(x.size()) == hash(tuple(x.size())))


@program(*ROWS)
def size_in_a_set(x):
    seen = {x.shape, (x * 2).shape}
    return x * len(seen)


# ----- torch.Size operations --------------------------------------------------------------------
@program(*ROWS)
def size_concatenated_with_a_tuple(x):
    return x.new_ones(x.shape + (2,)).sum(-1)


@program(*ROWS)
def size_sliced_and_indexed(x):
    return x.new_zeros(x.shape[1:]) + x.shape[-1]


@program(*ROWS)
def torch_size_built_from_sizes(x):
    return x.new_ones(torch.Size([x.size(0), 2]))


@program(*ROWS)
def size_numel_method(x):
    return x.sum() / x.shape.numel()


@program(*ROWS)
def list_of_size_and_sum(x):
    return x * sum(x.shape), list(x.shape)


@program(*ROWS)
def size_max_and_len(x):
    return x * max(x.shape) + len(x.shape)


@program(*ROWS)
def size_unpacked_into_view(x):
    *lead, last = x.shape
    return x.reshape(*lead, last, 1).squeeze(-1)


# ----- symbolic floats made from sizes ----------------------------------------------------------
@program(*ROWS)
def scaled_by_sqrt_of_size(x):
    return x / math.sqrt(x.size(-1))


@program(*ROWS)
def size_true_divided(x):
    return x * (x.size(0) / 2)


@program(*ROWS)
def size_to_the_half_power(x):
    return x * x.size(1) ** 0.5


@program(*ROWS)
def reciprocal_of_size(x):
    return x * (1.0 / x.size(0))


@program(*ROWS)
def float_of_size(x):
    return x + float(x.size(1))


@program(*ROWS)
def ceil_and_floor_of_size_ratio(x):
    return x * math.ceil(x.size(0) / 3) + math.floor(x.size(1) / 2)


@program(*ROWS)
def int_of_size_ratio(x):
    return x[: int(x.size(0) / 2)]


# ----- // and % on sizes ---------------------------------------------------------------------
@program(*ROWS)
def floor_division_slices(x):
    half = x.size(0) // 2
    return x[:half] + x[half : 2 * half]


@program(*ROWS)
def modulo_of_size_in_arithmetic(x):
    return x * (x.size(1) % 4 + 1)


@program(*ROWS)
def operator_floordiv_and_mod(x):
    n = x.size(0)
    return x * operator.floordiv(n, 3) + operator.mod(n, 3)


# ----- .numel() -------------------------------------------------------------------------------
@program(*ROWS)
def mean_by_numel(x):
    return x.sum() / x.numel()


@program(*ROWS)
def numel_times_two_returned(x):
    return x.numel() * 2, x.nelement()


@program(*ROWS)
def numel_matches_size_product(x):
    return x * (x.numel() == x.size(0) * x.size(1))


# ----- strides and dims under symbolic sizes -----------------------------------------------------
@program(*ROWS)
def stride_in_arithmetic(x):
    return x * x.stride(0)


@program(*ROWS)
def transposed_contiguous_strides(x):
    y = x.t().contiguous()
    return y, y.stride()


@program(*ROWS)
def dim_and_ndim(x):
    return x * x.dim() + x.ndim


@program(*PAIRS)
def matmul_output_size(x, w):
    y = x @ w
    return y.new_zeros(y.size(0), w.size(1)) + y.shape[-1]


# ----- more size reads: reversed, sorted, Size methods, iteration --------------------------------
@program(*ROWS)
def size_reversed_into_new_zeros(x):
    return x.new_zeros(x.size()[::-1]) + x.t()


@program(*ROWS)
def sizes_sorted(x):
    small, large = sorted(x.shape)
    return x[:small, :small] * large


@program(*ROWS)
def size_index_and_count_methods(x):
    return x * (x.shape.index(x.size(1)) + x.shape.count(x.size(0)))


@program(*ROWS)
def len_of_tensor(x):
    return x * len(x), len(x)


@program(*ROWS)
def arange_with_a_step_and_symbolic_end(x):
    return torch.arange(0, x.size(0), 2) * 1.5


@program(*ROWS)
def chunk_count_from_size(x):
    return torch.cat([c * i for i, c in enumerate(x.chunk(x.size(0) // 2))])


@program(*ROWS)
def zip_range_and_rows(x):
    out = x.new_zeros(x.size(1))
    for i, row in zip(range(x.size(0)), x):
        out = out + row * i
    return out


@program(*ROWS)
def sizes_unequal(x):
    if x.size(0) != x.size(1):
        return x.sum(0)
    return x.sum(1)


@program(*ROWS)
def log2_of_size(x):
    return x * math.log2(x.size(0))


@program(*ROWS)
def size_times_float_in_a_factory(x):
    return torch.full((x.size(0),), x.size(1) * 0.5)


@program(*ROWS)
def flattened_view_sliced_by_size(x):
    return x.view(-1)[: x.size(1)] + x[0]


@program(*ROWS)
def range_last_item_of_size(x):
    return x * range(x.size(0))[-1]


@program(*ROWS)
def new_empty_filled(x):
    return x.new_empty(x.size(0), 2).fill_(x.size(1))


@program(*ROWS)
def size_as_an_index_clamped(x):
    i = min(x.size(1), x.size(0)) - 1
    return x[i, i], x[:, i]


@program(*ROWS)
def size_compared_with_a_float(x):
    return x * (x.size(0) > 3.5), x.size(0) / x.size(1) > 1.1


@program(*ROWS)
def expand_as_new_shape(x):
    return x[:1].expand(x.size(0), -1) + x


@program(*ROWS)
def permute_by_dims_and_shape_of_result(x):
    y = x.unsqueeze(-1).permute(2, 1, 0)
    return y.reshape(y.shape[1], -1), y.shape


@program(*ROWS)
def sizes_in_an_fstring_read_later(x):
    name = f"{x.size(0)}x{x.size(1)}"
    return x * len(name)


@program(*ROWS)
def max_over_sizes_of_a_list(x):
    parts = [x, x[1:], x[:, 1:]]
    return x * max(p.numel() for p in parts)


@program(*ROWS)
def interpolate_to_double_size(x):
    return F.interpolate(x[None], size=x.size(-1) * 2)[0]


# ----- sizes at the edges: past the end, negative, not divisible (eager's errors) ---------------
@program(*ROWS)
def slice_past_end(x):
    return x[x.size(0) + 2 :], x[-x.size(0) - 3 :]


@program(*ROWS)
def zeros_of_negative_size(x):
    return torch.zeros(x.size(1) - 6)


@program(*ROWS)
def view_not_divisible(x):
    return x.view(x.size(0) // 3 + 1, -1)


@program(*ROWS)
def reshape_with_remainder(x):
    return x.reshape(-1, 2) if x.numel() % 2 == 0 else x.reshape(-1)


@program(*ROWS)
def expand_wrong(x):
    return x.expand(x.size(0) + 1, -1)


@program(*ROWS)
def negative_index_by_size(x):
    return x[-x.size(0)], x[:, -1]


@program(*ROWS)
def index_out_of_range_by_size(x):
    return x[x.size(0)]


@program(*ROWS)
def size_sub_then_slice_step(x):
    return x[:: x.size(1) - 1]


@program(*ROWS)
def arange_float_step_of_size(x):
    return torch.arange(0, x.size(0), 0.5)


@program(*ROWS)
def size_bool_and_or(x):
    n = x.size(0)
    return x * (n and 3), (n > 5 or n < 3)


@program(*ROWS)
def size_power_negative(x):
    return x * x.size(0) ** -1


@program(*ROWS)
def size_int_div_float_floor(x):
    return x[: int(x.size(0) // 2.5)]


@program(*ROWS)
def sizes_min_of_three(x):
    return torch.ones(min(x.size(0), x.size(1), 4))


@program(*ROWS)
def size_round_division(x):
    return x[: round(x.size(0) / 3)]


@program(*ROWS)
def size_used_as_a_dim_argument(x):
    return x.sum(dim=x.dim() - 1), x.size(-1)


@program(*ROWS)
def new_tensor_of_sizes(x):
    return x.new_tensor([x.size(0), x.size(1)])


@program(*ROWS)
def topk_by_size(x):
    return x.topk(x.size(1) // 2, dim=1).values


@program(*ROWS)
def unfold_by_size(x):
    return x.unfold(0, 2, x.size(0) // 2)


@program(*ROWS)
def scatter_into_size_zeros(x):
    return torch.zeros(x.size(0) * 2, x.size(1)).index_copy(0, torch.arange(x.size(0)) * 2, x)


@program(*ROWS)
def cumsum_then_view_by_sizes(x):
    return x.cumsum(0).view(x.size(1), x.size(0))


# ----- sizes through lists, splits, factories and functional ops ---------------------------------
@program(*ROWS)
def split_sizes_list(x):
    n = x.size(0)
    a, b = x.split([n // 2, n - n // 2])
    return a.sum(0) + b.sum(0)


@program(*ROWS)
def tril_of_ones_by_size(x):
    n = x.size(0)
    return torch.tril(torch.ones(n, n)) @ x


@program(*ROWS)
def triu_indices_by_size(x):
    return torch.triu_indices(x.size(1), x.size(1))


@program(*ROWS)
def flatten_then_view_back(x):
    return x.flatten(0, 1).view(x.size(0), x.size(1)) * 2


@program(*ROWS)
def mean_by_hand_float(x):
    n = x.size(0)
    return x.sum(0) * (n - 1) / n


@program(*ROWS)
def full_like_with_size(x):
    return torch.full_like(x, x.size(0))


@program(*ROWS)
def einsum_then_size(x):
    return torch.einsum("ij,kj->ik", x, x) / x.size(1)


@program(*ROWS)
def conv1d_padding_by_size(x):
    w = torch.ones(1, 1, 3)
    return F.conv1d(x[:, None], w, padding=1)[:, 0] * x.size(1)


@program(*ROWS)
def one_hot_of_arange(x):
    return F.one_hot(torch.arange(x.size(0)), num_classes=x.size(0) + 1)


@program(*ROWS)
def where_with_size_scalar(x):
    return torch.where(x > 0, x, x.size(1))


@program(*ROWS)
def masked_fill_by_size(x):
    return x.masked_fill(x < 0, -x.size(0))


@program(*ROWS)
def pad_by_symbolic_amounts(x):
    return F.pad(x, (x.size(1) // 2, 1))


@program(*ROWS)
def avg_pool_kernel_of_size(x):
    return F.avg_pool1d(x[None], kernel_size=x.size(1))


@program(*ROWS)
def view_minus_one_by_size(x):
    return x.reshape(-1, x.size(1) * x.size(0))


@program(*ROWS)
def sizes_into_a_list_and_back(x):
    sizes = list(x.shape)
    sizes[0] = sizes[0] * 2
    return x.repeat(2, 1).view(sizes)


@program(*ROWS)
def size_tuple_slicing_and_mul(x):
    return x.new_zeros(x.shape[:1] * 2)


@program(*ROWS)
def sizes_zip_dims(x):
    total = 0
    for d, n in enumerate(x.shape):
        total = total + d * n
    return x * total


@program(*ROWS)
def size_is_compared_with_is(x):
    return x * (x.size(0) is x.size(0)), x.dim() == 2


@program(*ROWS)
def batch_matmul_expand(x):
    b = x.size(0)
    return torch.bmm(x[None].expand(b, -1, -1), x.t()[None].expand(b, -1, -1)).sum(0)


@program(*ROWS)
def softmax_dim_from_ndim(x):
    return torch.softmax(x / math.sqrt(x.size(-1)), dim=x.ndim - 1)


# ----- tests -------------------------------------------------------------------------------------
# Programs whose counts differ from torch.compile's, values equal eager's: name ->
# ((ember graphs, ops), (torch.compile graphs, ops), why). Capture keeps a symbolic int
# as its sympy expression and emits its nodes from that when an operation takes it, so
# it neither keeps torch's node for each Python operation on sizes nor its nodes for
# results known statically.
KNOWN_DIFFERENCES = {
    "sizes_multiplied_and_subtracted": (
        (1, 4), (1, 3), "n * m - n is emitted from its expression -s0 + s0*s1 (one op more)",
    ),
    "size_divmod": (
        (1, 4), (0, 0), "torch.compile runs the frame eagerly at divmod of a SymInt; "
        "capture computes it as (n // 2, n % 2), both symbolic",
    ),
    "linspace_of_size": (
        (3, 6), (3, 9), "both recompile for each size (linspace's steps are specialized); "
        "torch keeps the `x.size(1)` node it read them from",
    ),
    "branch_on_numel": ((2, 2), (2, 4), "torch keeps an unused `x.numel()` node a graph"),
    "sizes_compared_with_size": (
        (1, 2), (1, 5), "the sizes are equal symbols: capture folds the comparison to True, "
        "torch returns `s0 == s0 & s1 == s1` computed in the graph",
    ),
    "size_compared_with_a_torch_size": ((1, 1), (1, 4), "as above"),
    "floor_division_slices": (
        (1, 6), (1, 5), "`2 * half` is emitted from 2*(s0 // 2), its own floordiv node",
    ),
    "numel_times_two_returned": (
        (1, 3), (1, 2), "torch reads numel once as a node; capture emits s0*s1 from sizes",
    ),
    "numel_matches_size_product": (
        (1, 1), (1, 3), "the equality is statically True: capture folds it, torch computes it",
    ),
    "sizes_sorted": (
        (1, 2), (2, 2), "torch.compile breaks at sorted() of SymInts (an empty graph, then "
        "the rest); capture sorts them under guards on their order",
    ),
    "size_index_and_count_methods": (
        (1, 1), (1, 10), "capture folds Size.index / count (the symbols' equalities are "
        "static); torch traces each `is` and `==` on them",
    ),
    "size_as_an_index_clamped": (
        (1, 4), (3, 12), "torch.compile recompiles for every size (its graphs equal); "
        "capture indexes by the symbolic int in one graph",
    ),
    "max_over_sizes_of_a_list": (
        (1, 2), (1, 8), "the largest numel is known from the ranges: capture folds the max, "
        "torch keeps sym_max of the three",
    ),
    "reshape_with_remainder": ((1, 1), (1, 2), "torch keeps an unused `x.numel()` node"),
    "split_sizes_list": (
        (1, 10), (1, 8), "`n - n // 2` is emitted from its expression (a second floordiv)",
    ),
    "triu_indices_by_size": (
        (3, 3), (3, 9), "both specialize the size (a compile each); torch keeps the "
        "`x.size(1)` nodes it read it from",
    ),
    "one_hot_of_arange": ((3, 9), (3, 15), "as above"),
    "avg_pool_kernel_of_size": ((3, 6), (3, 9), "as above"),
}  # fmt: skip

# where eager raises (a negative size, a view not dividing the sizes, an index past the
# end): torch.compile raises another error or message, so these are held to eager alone;
# and `x.size(0) is x.size(0)`, eagerly True for ints up to 256 (CPython's cache) and
# False past them: capture breaks there, torch.compile traces `is` on the SymInts and
# returns False (x * 0 where eager gives x * 1)
EAGER_ONLY = {
    "size_is_compared_with_is",
    "zeros_of_negative_size",
    "view_not_divisible",
    "expand_wrong",
    "index_out_of_range_by_size",
}


@pytest.mark.parametrize("name", sorted(EAGER_ONLY))
def test_dynamic_program_like_eager(name):
    fn, calls = PROGRAMS[name]
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=counter, dynamic=True)
    _run_all(compiled, fn, _maker(calls), len(calls))


@pytest.mark.parametrize(
    "name", [name for name in PROGRAMS if name not in KNOWN_DIFFERENCES and name not in EAGER_ONLY]
)
def test_dynamic_program_like_torch(name):
    fn, calls = PROGRAMS[name]
    check_like_torch(fn, _maker(calls), calls=len(calls), dynamic=True)


@pytest.mark.parametrize("name", list(KNOWN_DIFFERENCES))
def test_dynamic_program_values_like_eager_counts_known(name):
    fn, calls = PROGRAMS[name]
    counter = CountingBackend()
    compiled = dynamo_capture.optimize(fn, backend=counter, dynamic=True)
    _run_all(compiled, fn, _maker(calls), len(calls))
    ember, reference, _ = KNOWN_DIFFERENCES[name]
    assert (counter.frame_count, counter.op_count) == ember
    assert torch_counts(fn, _maker(calls), len(calls), dynamic=True) == reference


# ----- recompile reasons name the user's line that made the failing guard --------------------
def _size_branch(x):
    n = x.shape[0]
    if n > 4:  # the guarded line
        return x + 1
    return x * 2


def _size_parity(x):
    if x.size(0) % 2 == 0:  # the guarded line
        return x.view(2, -1)
    return x


def _size_equals(x, y):
    if x.size(0) == 4:  # the guarded line
        return x + y
    return x - y


@pytest.mark.parametrize(
    ("fn", "first", "second"),
    [
        (_size_branch, ((4,),), ((5,),)),
        (_size_parity, ((4,),), ((5,),)),
        (_size_equals, ((4,), (4,)), ((5,), (5,))),
    ],
    ids=["range", "relation", "equals"],
)
def test_recompile_reason_names_the_line_of_the_guard(fn, first, second):
    """As torch.compile's recompile reasons do (`... # if n > 4:  # file.py:12 in f`)."""
    compiled = dynamo_capture.optimize(fn, backend=CountingBackend(), dynamic=True)
    compiled(*(torch.randn(shape) for shape in first))
    f_locals = compiled.frame.bind(tuple(torch.randn(shape) for shape in second), {})
    reason = compiled.why_entries_failed(f_locals, compiled.frame.globals)
    line = next(n for n, text in enumerate(open(__file__), 1) if f"def {fn.__name__}(" in text)
    line += 2 if fn is _size_branch else 1
    assert f"# the guarded line  # {__file__}:{line} in {fn.__name__}" in reason
