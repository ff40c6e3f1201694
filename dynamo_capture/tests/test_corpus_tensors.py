"""Small programs on tensors: torch functions, F.*, methods, operators, indexing, Size math."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

torch.manual_seed(0)


def r(*shape, **kw):
    return torch.randn(*shape, **kw)


PROGRAMS = {
    "add_mul": (lambda x, y: x + y * 2, (r(3, 4), r(3, 4))),
    "sub_div": (lambda x, y: (x - y) / 3.0, (r(3), r(3))),
    "floordiv_mod": (lambda x: (x // 2, x % 3), (torch.arange(10),)),
    "pow": (lambda x: x**2 + 2**x, (r(4),)),
    "matmul_op": (lambda a, b: a @ b, (r(3, 4), r(4, 5))),
    "neg_pos_abs": (lambda x: (-x, +x, abs(x)), (r(5),)),
    "invert_bool": (lambda x: ~(x > 0), (r(5),)),
    "bitwise": (
        lambda a, b: (a & b, a | b, a ^ b, a << 1, a >> 1),
        (torch.arange(8), torch.arange(8).flip(0)),
    ),
    "compare_all": (lambda a, b: (a < b, a <= b, a == b, a != b, a > b, a >= b), (r(4), r(4))),
    "inplace_ops": (lambda x: _inplace(x), (r(4),)),
    "radd_rsub": (lambda x: (1 - x, 2 / (x.abs() + 1), 3 * x), (r(4),)),
    "torch_fns": (lambda x: torch.sin(x) + torch.cos(x) * torch.exp(-x.abs()), (r(6),)),
    "torch_cat_stack": (
        lambda a, b: (torch.cat([a, b], 0), torch.stack((a, b), dim=1)),
        (r(2, 3), r(2, 3)),
    ),
    "torch_where": (lambda x: torch.where(x > 0, x, torch.zeros_like(x)), (r(6),)),
    "reductions": (
        lambda x: (x.sum(), x.mean(0), x.amax(-1), x.std(), x.var(1, keepdim=True)),
        (r(3, 4),),
    ),
    "max_dim_namedtuple": (lambda x: x.max(dim=1).values + x.max(dim=1).indices, (r(3, 4),)),
    "min_tuple_unpack": (lambda x: _min_unpack(x), (r(3, 4),)),
    "topk_sort": (lambda x: (torch.topk(x, 2).values, x.sort(descending=True)[0]), (r(3, 5),)),
    "argmax_cumsum": (lambda x: (x.argmax(), x.cumsum(0)), (r(5),)),
    "F_relu_gelu": (lambda x: F.relu(x) + F.gelu(x) + F.silu(x), (r(8),)),
    "F_softmax": (lambda x: F.softmax(x, dim=-1) + F.log_softmax(x, -1), (r(2, 5),)),
    "F_linear": (lambda x, w, b: F.linear(x, w, b), (r(2, 4), r(3, 4), r(3))),
    "F_conv2d": (lambda x, w: F.conv2d(x, w, padding=1), (r(1, 2, 5, 5), r(3, 2, 3, 3))),
    "F_layer_norm": (lambda x: F.layer_norm(x, x.shape[-1:]), (r(2, 6),)),
    "F_dropout_eval": (lambda x: F.dropout(x, 0.5, training=False), (r(5),)),
    "F_pad": (lambda x: F.pad(x, (1, 2)), (r(2, 3),)),
    "F_embedding": (lambda i, w: F.embedding(i, w), (torch.tensor([[0, 2], [1, 3]]), r(4, 3))),
    "F_cross_entropy": (lambda x, t: F.cross_entropy(x, t), (r(4, 5), torch.tensor([0, 1, 4, 2]))),
    "F_interpolate": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (r(1, 1, 2, 2),)),
    "F_sdpa": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        (r(1, 2, 4, 8), r(1, 2, 4, 8), r(1, 2, 4, 8)),
    ),
    "view_reshape": (lambda x: x.view(2, 6).reshape(3, 4).flatten(), (r(3, 4),)),
    "permute_transpose": (lambda x: x.permute(2, 0, 1).transpose(0, 1).contiguous(), (r(2, 3, 4),)),
    "unsqueeze_squeeze": (lambda x: x.unsqueeze(0).unsqueeze(-1).squeeze(0), (r(3),)),
    "expand_repeat": (lambda x: (x.expand(3, 4), x.repeat(2, 1)), (r(1, 4),)),
    "chunk_split": (lambda x: sum(x.chunk(3)) + x.split(2)[0].sum(), (r(6),)),
    "unbind_iter": (lambda x: [row * i for i, row in enumerate(x)], (r(3, 2),)),
    "shape_attrs": (lambda x: x.reshape(x.shape[0] * x.shape[1], -1) * x.ndim, (r(2, 3, 4),)),
    "size_dim": (lambda x: x.new_zeros(x.size(0), x.size()[1]) + x.dim() + x.numel(), (r(2, 3),)),
    "size_arith": (lambda x: torch.zeros(x.shape[:-1] + (2,)) + len(x.shape), (r(2, 3, 4),)),
    "dtype_device": (
        lambda x: x.to(dtype=torch.float64, device=x.device) if x.dtype == torch.float32 else x,
        (r(3),),
    ),
    "T_mT": (lambda x: (x.T, x.mT), (r(2, 3),)),
    "new_ones_full": (lambda x: x.new_ones(2) + x.new_full((2,), 3.0), (r(3),)),
    "factory": (lambda x: x + torch.ones(3) + torch.arange(3) + torch.linspace(0, 1, 3), (r(3),)),
    "factory_dtype": (lambda x: torch.zeros(2, 3, dtype=x.dtype) + torch.eye(2, 3), (r(2, 3),)),
    "tensor_literal": (lambda x: x * torch.tensor([1.0, 2.0, 3.0]), (r(3),)),
    "clamp_lerp": (lambda x, y: (x.clamp(-0.5, 0.5), torch.lerp(x, y, 0.3)), (r(4), r(4))),
    "einsum": (lambda a, b: torch.einsum("ij,jk->ik", a, b), (r(2, 3), r(3, 4))),
    "bmm_baddbmm": (lambda a, b: torch.bmm(a, b).tanh(), (r(2, 3, 4), r(2, 4, 2))),
    "masked_fill": (lambda x: x.masked_fill(x < 0, 0.0), (r(6),)),
    "type_as_float": (
        lambda x, y: x.type_as(y) + y.float() + x.double().float(),
        (torch.arange(3), r(3)),
    ),
    "to_other": (lambda x, y: x.to(y), (torch.arange(3), r(3, dtype=torch.float64))),
    "index_int": (lambda x: x[0] + x[-1], (r(3, 4),)),
    "index_slice": (lambda x: x[1:3, ::2], (r(4, 6),)),
    "index_none_ellipsis": (lambda x: x[None, ..., 1], (r(2, 3, 4),)),
    "index_tensor": (lambda x, i: x[i], (r(5, 2), torch.tensor([4, 0, 2]))),
    "index_mixed": (lambda x, i: x[:, i, None], (r(3, 5), torch.tensor([1, 3]))),
    "index_negative_slice": (lambda x: x[-2:, :-1], (r(4, 4),)),
    "setitem_slice": (lambda x: _setitem(x), (r(4, 4),)),
    "setitem_mask": (lambda x: _setitem_mask(x), (r(6),)),
    "flip_roll": (lambda x: (x.flip(0), torch.roll(x, 1)), (r(4),)),
    "gather_scatter": (lambda x, i: x.gather(1, i), (r(3, 4), torch.tensor([[0], [1], [3]]))),
    "index_select": (lambda x, i: x.index_select(0, i), (r(5, 2), torch.tensor([1, 1, 0]))),
    "tril_triu": (lambda x: x.tril() - x.triu(1), (r(4, 4),)),
    "outer_norm": (lambda a: (torch.outer(a, a), a.norm(), torch.linalg.vector_norm(a)), (r(3),)),
    "math_consts": (lambda x: x * math.pi / math.sqrt(2.0) + math.log(3), (r(3),)),
    "int_tensor_ops": (lambda x: (x * 2 + 1) // 3, (torch.arange(12).view(3, 4),)),
    "bool_ops": (lambda x: (x > 0).any() | (x < -5).all(), (r(6),)),
    "complex_chain": (
        lambda x: (x.sigmoid() * x).pow(2).mean(-1, keepdim=True).rsqrt(),
        (r(2, 8),),
    ),
    "rms_norm_manual": (
        lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
        (r(2, 8), r(8)),
    ),
    "detach_clone": (lambda x: x.detach().clone() + x.data, (r(3),)),
    "requires_grad_flow": (
        lambda x: (x * 2).sum() if x.requires_grad else x,
        (r(3, requires_grad=True),),
    ),
    "zeros_like_ones_like": (
        lambda x: torch.zeros_like(x) + torch.ones_like(x, dtype=torch.float64),
        (r(3),),
    ),
    "is_floating": (
        lambda x: x + 1 if x.is_floating_point() and torch.is_tensor(x) else x,
        (r(3),),
    ),
    "numel_branch": (lambda x: x.sum() if x.numel() > 4 else x, (r(3, 3),)),
    "scalar_tensor_mix": (lambda x: x + torch.tensor(2.0) * x.sum(), (r(3),)),
    "softplus_logsigmoid": (lambda x: F.softplus(x) - F.logsigmoid(x), (r(5),)),
    "normalize": (lambda x: F.normalize(x, dim=-1), (r(3, 4),)),
    "one_hot": (lambda i: F.one_hot(i, 5).float(), (torch.tensor([0, 4, 2]),)),
    "avg_max_pool": (lambda x: F.avg_pool2d(x, 2) + F.max_pool2d(x, 2), (r(1, 1, 4, 4),)),
    "batch_norm_eval": (
        lambda x, m, v: F.batch_norm(x, m, v, training=False),
        (r(4, 3), r(3), r(3).abs()),
    ),
    "group_norm": (lambda x: F.group_norm(x, 2), (r(2, 4, 3),)),
    "random_dropout_train": (lambda x: F.dropout(x, 0.5, training=True), (r(100),)),
    "rand_like": (lambda x: x + torch.rand_like(x) * 0, (r(4),)),
    "where_mask_instead_of_index": (lambda x: torch.where(x > 0, x, 0.0).sum(), (r(8),)),
    "index_put_mask": (lambda x, v: x.index_put((x > 0,), v), (r(6), torch.tensor(1.0))),
    "scatter_add": (
        lambda x, i: torch.zeros(3).scatter_add(0, i, x),
        (r(5), torch.tensor([0, 1, 2, 0, 1])),
    ),
    "logsumexp_amin": (lambda x: (x.logsumexp(-1), x.amin(0)), (r(3, 4),)),
}


def _inplace(x):
    y = x.clone()
    y += 1
    y *= 2
    y -= x
    y /= 3
    y.add_(1).mul_(2)
    return y


def _min_unpack(x):
    values, indices = x.min(1)
    return values * indices


def _setitem(x):
    y = x.clone()
    y[0] = 1.0
    y[1:3, ::2] = y[1:3, ::2] * 5
    y[..., -1] = torch.arange(4.0)
    return y


def _setitem_mask(x):
    y = x.clone()
    y[y < 0] = 0.0
    return y


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_tensor_program(name, check):
    fn, args = PROGRAMS[name]
    check(fn, *args)


def test_inputs_whose_names_differ_only_in_case_stay_apart(check):
    """FX names nodes in snake case (`W` and `w` would both be `w`): each input keeps its own
    value in the graph."""

    def f(W, w, Input, input, max):  # noqa: A002, N803
        return W.sum(0) + w * 100 + Input * 2 + input - max

    check(f, torch.randn(3, 4), torch.randn(4), torch.randn(4), torch.randn(4), torch.randn(4))
