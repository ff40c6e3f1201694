"""More small programs: control flow on shapes and flags, helpers, mixed containers, Size math."""

from __future__ import annotations

import enum
import functools
import itertools
import math
import operator

import pytest
import torch
import torch.nn.functional as F

torch.manual_seed(3)


def r(*shape):
    return torch.randn(*shape)


def _shape_branch(x):
    if x.dim() == 2 and x.shape[-1] % 2 == 0:
        return x.view(x.shape[0], 2, -1).sum(1)
    return x


def _loop_over_shape(x):
    out = x
    for _ in range(x.shape[0]):
        out = out.cumsum(-1) / 2
    return out


def _while_with_break(x):
    steps = 0
    while True:
        x = x * 0.5
        steps += 1
        if steps >= 4:
            break
    return x, steps


def _nested_functions(x):
    def square(v):
        return v * v

    def apply_twice(fn, v):
        return fn(fn(v))

    return apply_twice(square, x) + apply_twice(lambda v: v + 1, x)


def _higher_order(x):
    fns = [torch.sin, torch.cos, lambda t: t * 2]
    return [fn(x) for fn in fns]


def _dict_of_fns(x):
    acts = {"relu": F.relu, "tanh": torch.tanh, "gelu": F.gelu}
    return sum(acts[name](x) for name in sorted(acts))


def _accumulate_in_dict(xs):
    stats = {}
    for i, x in enumerate(xs):
        stats.setdefault("sum", 0)
        stats["sum"] = stats["sum"] + x
        stats[f"x{i}"] = x.mean()
    return stats


def _list_of_lists(x):
    grid = [[x * (i + j) for j in range(2)] for i in range(2)]
    flat = [cell for row in grid for cell in row]
    return torch.stack(flat).sum(0)


def _zip_strict(a, b):
    return [p * q for p, q in zip(a.unbind(0), b.unbind(0), strict=True)]


def _itertools_product(x):
    total = x
    for i, j in itertools.product(range(2), range(2)):
        total = total + i * j
    return total


def _reduce_mul(x):
    return functools.reduce(operator.mul, [x, x + 1, x + 2])


def _size_math(x):
    b, *rest = x.shape
    new_shape = (b, math.prod(rest))
    return x.reshape(new_shape), torch.Size([b]) + x.shape[1:], x.shape.numel()


def _size_compare(x, y):
    if x.shape == y.shape:
        return x + y
    return x


def _size_index(x):
    return x.new_zeros(x.size()[::-1]), x.size(-1), x.size()[-2:]


def _dtype_logic(x):
    if x.dtype in (torch.float16, torch.bfloat16):
        return x.float()
    if x.is_floating_point():
        return x.to(torch.float64) * 2
    return x


def _device_logic(x):
    y = torch.ones(3, device=x.device, dtype=x.dtype)
    return x + y if x.device.type == "cpu" else x


def _contiguity(x):
    y = x.t()
    if not y.is_contiguous():
        y = y.contiguous()
    return y, y.stride()


def _clamp_helpers(x, lo=-1.0, hi=1.0):
    return torch.clamp(x, min=lo, max=hi), x.clamp_min(0), x.clamp_max(0)


def _tuple_return_unpack(x):
    def split(v):
        return v[:2], v[2:]

    head, tail = split(x)
    return tail.sum() - head.sum()


def _early_return(x, flag):
    if flag:
        return x * 2
    y = x + 1
    return y * y


def _default_mutable_not_mutated(x, extra=(1, 2)):
    return x * sum(extra)


def _keyword_only_defaults(x, *, power=2, eps=1e-6):
    return (x.abs() + eps) ** power


def _star_args_forward(*tensors):
    return torch.cat(tensors, dim=0)


def _kwargs_forward(**named):
    return {key: value * 2 for key, value in sorted(named.items())}


def _string_format(x):
    label = "{}-{}".format("a", x.shape[0])
    return x * len(label), label, "%d items" % x.numel()  # noqa: UP031 - exercises %-formatting


def _enumerate_start(x):
    return [x * i for i, _ in enumerate(range(3), start=1)]


def _reversed_sorted_key(x):
    items = [("b", 2), ("a", 1), ("c", 3)]
    ordered = sorted(items, key=lambda kv: kv[1], reverse=True)
    return x * ordered[0][1], [k for k, _ in reversed(ordered)]


def _min_max_key(x):
    lengths = {"short": 1, "medium": 5, "long": 9}
    return x * max(lengths, key=lambda k: lengths[k]).__len__(), min(lengths.values())


def _any_all_generators(x):
    dims = list(x.shape)
    return x * (2 if all(d > 1 for d in dims) else 1) * (3 if any(d == 4 for d in dims) else 1)


def _in_and_not_in(x):
    names = ["q", "k", "v"]
    return x * (("k" in names) + ("z" not in names))


def _bool_ops_constants(x):
    a, b = True, False
    return x * int(a and not b) + x * int(a or b)


def _integer_ops(x):
    n = 17
    return x * (n // 4) + (n % 4) + (n**2 >> 3) + (n & 3) + (n | 8) + (n ^ 5) + (-n) + abs(-n)


def _float_ops(x):
    v = 2.5
    return x * round(v * 3.3, 1) + math.floor(v) + math.ceil(v) + float(int(v))


def _complex_slices(x):
    return x.flip(0)[1:-1:2], x[..., ::2], x[None, 1:, None], x[-3:]


def _setitem_loop(x):
    y = torch.zeros_like(x)
    for i in range(x.shape[0]):
        y[i] = x[i] * i
    return y


def _chunked_attention(q, k, v):
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    weights = scores.softmax(-1)
    return weights @ v


def _gated_mlp(x, w1, w2, w3):
    return F.linear(F.silu(F.linear(x, w1)) * F.linear(x, w3), w2)


def _rotary(x):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    freqs = torch.arange(half, dtype=x.dtype) / half
    cos, sin = freqs.cos(), freqs.sin()
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def _causal_mask(x):
    t = x.shape[-1]
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    return x.masked_fill(~mask, float("-inf")).softmax(-1)


def _loss_functions(x, y):
    return (
        F.mse_loss(x, y),
        F.l1_loss(x, y),
        F.smooth_l1_loss(x, y),
        F.kl_div(x.log_softmax(-1), y.softmax(-1), reduction="batchmean"),
    )


def _conv_block(x, w, b):
    return F.max_pool2d(F.relu(F.conv2d(x, w, b, padding=1)), 2)


def _grad_context_inside(x):
    with torch.no_grad():
        frozen = x * 2
    return x * frozen, frozen.requires_grad


def _inplace_on_input(x):
    x.add_(1)
    x.mul_(2)
    return x


def _inplace_index_on_input(x):
    x[0] = 0.0
    return x.sum()


def _return_int_and_shape(x):
    return x.shape, x.ndim, x.dtype, x.device


def _tensor_method_chain(x):
    return x.abs().sqrt().log1p().exp().neg().sigmoid().mean(dim=0, keepdim=True)


def _where_scalar(x):
    return torch.where(x > 0, 1.0, -1.0) * x


def _type_promotion(a, b):
    return a + b, (a * b).dtype


def _torch_functional_math(x):
    return torch.addmm(torch.zeros(2, 2), x, x.t()), torch.baddbmm(
        torch.zeros(1, 2, 2), x[None], x.t()[None]
    )


def _lambda_in_loop(x):
    scalers = [lambda v, k=k: v * k for k in range(3)]
    return sum(fn(x) for fn in scalers)


def _partial_application(x):
    add = functools.partial(torch.add, alpha=2)
    return add(x, x)


def _closure_over_tensor(x):
    bias = x.mean()

    def shift(v):
        return v - bias

    return shift(x) + shift(2 * x)


def _getattr_dynamic(x):
    op = "relu"
    return getattr(F, op)(x) + torch.sigmoid(x)


def _isinstance_tensor_list(xs):
    if isinstance(xs, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in xs):
        return torch.stack(list(xs)).sum(0)
    return xs


def _dict_comprehension_filter(x):
    params = {"a": 1, "b": 2, "c": 3}
    kept = {k: v for k, v in params.items() if v % 2}
    return x * sum(kept.values()), tuple(kept)


def _generator_with_return(x):
    def gen(n):
        for i in range(n):
            yield i * x
        return

    return list(gen(3))


def _yield_from(x):
    def inner():
        yield x
        yield x + 1

    def outer():
        yield from inner()
        yield x + 2

    return sum(outer())


def _next_default(x):
    it = iter([])
    return x * next(it, 5)


def _set_membership_constants(x):
    allowed = {"sum", "mean"}
    mode = "mean"
    return x.mean() if mode in allowed else x


def _chain_comparisons_shape(x):
    return x * (1 < x.shape[0] <= 4 < x.shape[1])


def _tensor_size_unpack(x):
    n, c, h, w = x.size()
    return x.view(n, c, h * w).mean(-1), (n, c, h, w)


def _walrus_loop(x):
    out = []
    i = 0
    while (i := i + 1) < 4:
        out.append(x * i)
    return out


def _try_finally_with(x):
    try:
        with torch.no_grad():
            y = x + 1
    finally:
        z = 2
    return y * z


def _multiple_assign(x):
    a = b = x * 2
    a = a + 1
    return a, b


def _augmented_containers(x):
    items = [x]
    items += [x * 2]
    items *= 2
    text = "a"
    text += "b"
    return items, text


def _star_unpacking(x, y):
    parts = [x, y]
    both = (*parts, x + y)
    merged = {**{"a": x}, **{"b": y}}
    listed = [*both, *parts]
    unique = {*("p", "q"), "r"}
    return both, merged, listed[-1], len(unique)


def _del_items(x):
    items = [x, x + 1, x + 2]
    del items[0]
    table = {"a": x, "b": x * 2}
    del table["a"]
    return items, table


def _match_literals(x, mode):
    match mode:
        case "double":
            return x * 2
        case "half":
            return x / 2
        case _:
            return x


class Mode(str, enum.Enum):  # noqa: UP042 - like transformers ExplicitEnum
    SUM = "sum"
    MEAN = "mean"


class Level(enum.Enum):
    LOW = 1
    HIGH = 2


def _enums(x, mode, level=Level.HIGH):
    y = x.sum() if mode == Mode.SUM else x.mean()
    if level is Level.HIGH:
        y = y * 2
    return y, mode, level.value


PROGRAMS = {
    "enum_members": (_enums, (r(3), Mode.MEAN)),
    "enum_members_other": (_enums, (r(3), Mode.SUM, Level.LOW)),
    "star_unpacking": (_star_unpacking, (r(2), r(2))),
    "del_items": (_del_items, (r(2),)),
    "match_literals": (_match_literals, (r(2), "half")),
    "shape_branch": (_shape_branch, (r(3, 4),)),
    "shape_branch_other": (_shape_branch, (r(3, 5),)),
    "loop_over_shape": (_loop_over_shape, (r(3, 4),)),
    "while_with_break": (_while_with_break, (r(3),)),
    "nested_functions": (_nested_functions, (r(3),)),
    "higher_order": (_higher_order, (r(3),)),
    "dict_of_fns": (_dict_of_fns, (r(4),)),
    "accumulate_in_dict": (_accumulate_in_dict, ([r(2), r(2)],)),
    "list_of_lists": (_list_of_lists, (r(3),)),
    "zip_strict": (_zip_strict, (r(3, 2), r(3, 2))),
    "itertools_product": (_itertools_product, (r(2),)),
    "reduce_mul": (_reduce_mul, (r(3),)),
    "size_math": (_size_math, (r(2, 3, 4),)),
    "size_compare_equal": (_size_compare, (r(2, 3), r(2, 3))),
    "size_compare_differ": (_size_compare, (r(2, 3), r(3, 2))),
    "size_index": (_size_index, (r(2, 3),)),
    "dtype_logic": (_dtype_logic, (r(3),)),
    "dtype_logic_int": (_dtype_logic, (torch.arange(3),)),
    "device_logic": (_device_logic, (r(3),)),
    "contiguity": (_contiguity, (r(3, 4),)),
    "clamp_helpers": (_clamp_helpers, (r(5),)),
    "tuple_return_unpack": (_tuple_return_unpack, (r(5),)),
    "early_return_true": (_early_return, (r(3), True)),
    "early_return_false": (_early_return, (r(3), False)),
    "default_tuple": (_default_mutable_not_mutated, (r(3),)),
    "keyword_only_defaults": (_keyword_only_defaults, (r(3),)),
    "star_args_forward": (_star_args_forward, (r(2), r(3), r(1))),
    "kwargs_forward": (lambda x: _kwargs_forward(b=x, a=x + 1), (r(2),)),
    "string_format": (_string_format, (r(3),)),
    "enumerate_start": (_enumerate_start, (r(2),)),
    "reversed_sorted_key": (_reversed_sorted_key, (r(2),)),
    "min_max_key": (_min_max_key, (r(2),)),
    "any_all_generators": (_any_all_generators, (r(2, 4),)),
    "in_and_not_in": (_in_and_not_in, (r(2),)),
    "bool_ops_constants": (_bool_ops_constants, (r(2),)),
    "integer_ops": (_integer_ops, (r(2),)),
    "float_ops": (_float_ops, (r(2),)),
    "complex_slices": (_complex_slices, (r(6, 4),)),
    "setitem_loop": (_setitem_loop, (r(4, 2),)),
    "chunked_attention": (_chunked_attention, (r(2, 4, 8), r(2, 4, 8), r(2, 4, 8))),
    "gated_mlp": (_gated_mlp, (r(2, 8), r(16, 8), r(8, 16), r(16, 8))),
    "rotary": (_rotary, (r(2, 4, 8),)),
    "causal_mask": (_causal_mask, (r(2, 5, 5),)),
    "loss_functions": (_loss_functions, (r(4, 5), r(4, 5))),
    "conv_block": (_conv_block, (r(1, 2, 6, 6), r(4, 2, 3, 3), r(4))),
    "grad_context_inside": (_grad_context_inside, (torch.randn(3, requires_grad=True),)),
    "inplace_on_input": (_inplace_on_input, (r(3),)),
    "inplace_index_on_input": (_inplace_index_on_input, (r(3),)),
    "return_int_and_shape": (_return_int_and_shape, (r(2, 3),)),
    "tensor_method_chain": (_tensor_method_chain, (r(3, 4),)),
    "where_scalar": (_where_scalar, (r(5),)),
    "type_promotion": (_type_promotion, (torch.arange(3), r(3))),
    "torch_functional_math": (_torch_functional_math, (r(2, 3),)),
    "lambda_in_loop": (_lambda_in_loop, (r(2),)),
    "partial_application": (_partial_application, (r(2),)),
    "closure_over_tensor": (_closure_over_tensor, (r(4),)),
    "getattr_dynamic": (_getattr_dynamic, (r(3),)),
    "isinstance_tensor_list": (_isinstance_tensor_list, ([r(2), r(2)],)),
    "dict_comprehension_filter": (_dict_comprehension_filter, (r(2),)),
    "generator_with_return": (_generator_with_return, (r(2),)),
    "yield_from": (_yield_from, (r(2),)),
    "next_default": (_next_default, (r(2),)),
    "set_membership_constants": (_set_membership_constants, (r(3),)),
    "chain_comparisons_shape": (_chain_comparisons_shape, (r(2, 5),)),
    "tensor_size_unpack": (_tensor_size_unpack, (r(2, 3, 4, 5),)),
    "walrus_loop": (_walrus_loop, (r(2),)),
    "try_finally_with": (_try_finally_with, (r(2),)),
    "multiple_assign": (_multiple_assign, (r(2),)),
    "augmented_containers": (_augmented_containers, (r(2),)),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_more_programs(name, check):
    fn, args = PROGRAMS[name]
    check(fn, *args)
