"""Tensor attributes and their writes (grad, is_leaf, _version, data, requires_grad,
retain_grad, grad_fn, names, layout, strides and sizes, T/mT/H, real/imag), tensors made
from Python lists, numpy arrays and dtype / device objects, scaled_dot_product_attention
and torch.nn.attention (sdpa_kernel, masks, is_causal, enable_gqa, multi-head attention),
torch functions with out=, the random generator seeded in the frame, torch._check and
torch.sym_* helpers, the operator module on tensors, and print / logging of tensors.

Each program gives eager's results and torch.compile's graph and op counts
(`check_like_torch`, two calls on fresh arguments); `OPS_DIFFER` names those whose
operation counts differ from torch.compile's (graph counts alike), `GRAPHS_DIFFER` those
whose graphs differ, checked against eager alone, each with the reason.
"""

from __future__ import annotations

import logging
import operator

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torchcheck import check_like_eager, check_like_torch, program_registry

import dynamo_capture
from dynamo_capture.testing import CountingBackend, assert_same

PROGRAMS, program = program_registry()


def r(*shape):
    return lambda: torch.randn(*shape)


def leaf_with_grad():
    x = torch.randn(3, requires_grad=True)
    x.grad = torch.ones(3)
    return x


def leaf_requiring_grad():
    return torch.randn(3, requires_grad=True)


def complex_tensor():
    return torch.randn(3, dtype=torch.complex64)


# -- tensor attributes -------------------------------------------------------------------


@program(leaf_with_grad)
def a_grad_read_times_input(x):
    return x.grad * 2 + x.detach()


@program(leaf_with_grad)
def a_grad_none_after_set(x):
    x.grad = None
    return x.detach() + (1 if x.grad is None else 2)


@program(leaf_requiring_grad)
def a_grad_assigned_then_read(x):
    x.grad = torch.full_like(x, 3.0)
    return x.grad + 1


@program(leaf_with_grad)
def a_grad_zeroed_in_place(x):
    x.grad.zero_()
    return x.grad + x.detach()


@program(leaf_requiring_grad)
def a_is_leaf_of_input_and_result(x):
    y = x * 2
    return y + int(x.is_leaf) + int(y.is_leaf) * 10


@program()
def a_is_leaf_plain(x):
    y = x.sin()
    return y * int(y.is_leaf)


@program()
def a_version_after_in_place(x):
    y = x.clone()
    before = y._version
    y.add_(1)
    return y, y._version - before


@program()
def a_data_read(x):
    y = x.data
    return y * 2


@program(leaf_requiring_grad)
def a_data_read_detached(x):
    y = x.data * 3
    return y, y.requires_grad


@program()
def a_data_assignment(x):
    y = torch.zeros(3)
    y.data = x * 2
    return y + 1


@program(leaf_requiring_grad)
def a_data_in_place(x):
    x.data.mul_(2)
    return x * 1


@program()
def a_requires_grad_read(x):
    return x + int(x.requires_grad)


@program(leaf_requiring_grad)
def a_requires_grad_of_result(x):
    y = x.detach()
    return y + int(y.requires_grad) + int((x * 2).requires_grad) * 10


@program()
def a_requires_grad_underscore(x):
    y = x.clone().requires_grad_()
    return y * 2, y.requires_grad


@program()
def a_requires_grad_set_attribute(x):
    y = x.clone()
    y.requires_grad = True
    return (y * 3).sum()


@program(leaf_requiring_grad)
def a_retain_grad_of_intermediate(x):
    y = x * 2
    y.retain_grad()
    return y.sum()


@program(leaf_requiring_grad)
def a_grad_fn_none_check(x):
    y = x * 2
    z = x.detach()
    return y + (1 if y.grad_fn is None else 2) + (10 if z.grad_fn is None else 20)


@program()
def a_grad_fn_none_without_grad(x):
    y = x * 2
    return y if y.grad_fn is None else y + 1


@program()
def a_names_read(x):
    return x + len(x.names) + (1 if x.names[0] is None else 2)


@program()
def a_layout_compare(x):
    return x * (2 if x.layout == torch.strided else 3)


@program()
def a_layout_sparse_check(x):
    return x + int(x.layout is torch.sparse_coo) + int(x.is_sparse)


@program(r(3, 4))
def a_is_contiguous_of_transpose(x):
    y = x.t()
    return y.contiguous() if not y.is_contiguous() else y * 2


@program(r(3, 4))
def a_is_contiguous_memory_format(x):
    return x + int(x.is_contiguous(memory_format=torch.contiguous_format))


@program(r(6))
def a_storage_offset_of_slice(x):
    y = x[2:]
    return y * y.storage_offset()


@program()
def a_element_size(x):
    return x * x.element_size() + x.half().element_size()


@program()
def a_is_floating_point_branch(x):
    y = x.long()
    return (x * 2 if x.is_floating_point() else x) + (1 if y.is_floating_point() else 0)


@program()
def a_is_complex_and_signed(x):
    return x + int(x.is_complex()) + int(x.is_signed()) * 2


@program(r(2, 3, 4))
def a_dim_and_ndim(x):
    return x.sum() * x.dim() + x.ndim + x.ndimension()


@program(r(2, 3))
def a_T_property(x):
    return x.T @ x


@program(r(2, 3, 4))
def a_mT_property(x):
    return x.mT @ x


@program(lambda: torch.randn(3, 2, dtype=torch.complex64))
def a_H_property(x):
    return x.H @ x


@program(lambda: torch.randn(2, 3, dtype=torch.complex64))
def a_mH_property(x):
    return x @ x.mH


@program(complex_tensor)
def a_real_and_imag(x):
    return x.real * 2 + x.imag


@program(complex_tensor)
def a_real_written_in_place(x):
    y = x.clone()
    y.real.mul_(3)
    return y


@program(complex_tensor)
def a_imag_assigned(x):
    y = x.clone()
    y.imag = torch.zeros(3)
    return y


@program()
def a_real_of_real(x):
    return x.real + 1


@program()
def a_dtype_itemsize_and_nbytes(x):
    return x * x.dtype.itemsize + x.nbytes + x.itemsize


@program(r(2, 3))
def a_stride_and_numel(x):
    return x * x.stride(0) + x.stride()[1] + x.numel() + x.nelement()


@program()
def a_is_cpu_and_device_index(x):
    return x + int(x.is_cpu) + int(x.device.index is None) + int(x.is_cuda)


@program()
def a_untyped_storage_size(x):
    return x * x.untyped_storage().nbytes()


# -- tensor creation, dtype and device objects ---------------------------------------------


@program()
def c_tensor_of_mixed_list(x):
    return x + torch.tensor([1, 2.5, True])


@program()
def c_tensor_of_ints_and_bools(x):
    t = torch.tensor([1, True, 0])
    return x * t, t.dtype


@program()
def c_tensor_of_bools(x):
    t = torch.tensor([True, False, True])
    return torch.where(t, x, -x)


@program(r(2, 3))
def c_tensor_of_sizes(x):
    return torch.tensor(x.shape) + torch.tensor([x.size(0), x.size(1) * 2])


@program()
def c_tensor_of_nested_list(x):
    return torch.tensor([[1.0, 2], [3, 4]]) @ torch.stack([x[:2], x[1:]])


@program()
def c_tensor_with_dtype(x):
    return x.long() + torch.tensor([1.7, 2.2, 3.9], dtype=torch.int64)


@program()
def c_tensor_of_scalar(x):
    return x * torch.tensor(2.5) + torch.tensor(3)


@program()
def c_as_tensor_of_tensor(x):
    y = torch.as_tensor(x)
    return y * 2, y is x


@program()
def c_as_tensor_with_dtype(x):
    return torch.as_tensor(x, dtype=torch.float64) + torch.as_tensor([1, 2, 3])


@program()
def c_from_numpy_constant(x):
    return x + torch.from_numpy(np.arange(3, dtype=np.float32))


@program()
def c_get_default_dtype(x):
    return x.to(torch.get_default_dtype()) * (
        2 if torch.get_default_dtype() == torch.float32 else 3
    )


@program()
def c_dtype_compare(x):
    y = x.double()
    return y + (1 if y.dtype == torch.float64 else 0) + (1 if x.dtype != y.dtype else 0)


@program()
def c_dtype_is_floating_point(x):
    return x + x.dtype.is_floating_point + x.long().dtype.is_floating_point * 2


@program()
def c_dtype_is_complex_and_signed(x):
    return x + int(x.dtype.is_complex) + int(torch.uint8.is_signed) * 2


@program()
def c_promote_types(x):
    dtype = torch.promote_types(x.dtype, torch.int64)
    return x.to(dtype) + 1, dtype


@program()
def c_promote_types_to_double(x):
    return x.to(torch.promote_types(torch.float32, torch.float64)) * 2


@program()
def c_result_type(x):
    return x.to(torch.result_type(x, 2)) + torch.can_cast(x.dtype, torch.int32)


@program()
def c_finfo_eps(x):
    return x + torch.finfo(x.dtype).eps


@program()
def c_finfo_max_and_tiny(x):
    info = torch.finfo(torch.float16)
    return x.clamp(max=info.max) + info.tiny + torch.finfo().resolution


@program()
def c_iinfo_max(x):
    return x.long().clamp(max=torch.iinfo(torch.int8).max) + torch.iinfo(torch.int32).bits


@program()
def c_device_compare(x):
    return x * (2 if x.device == torch.device("cpu") else 3)


@program()
def c_device_from_string(x):
    dev = torch.device("cpu")
    return x.to(dev) + 1, dev.type


@program()
def c_device_type_string(x):
    return x + (1 if x.device.type == "cpu" else 2)


@program()
def c_device_in_constructor(x):
    return x + torch.ones(3, device=x.device, dtype=x.dtype)


@program()
def c_device_with_index(x):
    dev = torch.device("cpu", 0)
    return x + int(dev.index == 0) + int(str(dev) == "cpu:0")


@program()
def c_zeros_like_with_dtype(x):
    return torch.zeros_like(x, dtype=torch.int32) + torch.empty_like(x).fill_(2).long()


@program()
def c_arange_with_float_step(x):
    return x + torch.arange(0, 1.5, 0.5)


@program()
def c_full_with_bool(x):
    return torch.full((3,), True) & (x > 0)


@program()
def c_tensor_new_methods(x):
    return x.new_zeros(2) + x.new_ones(2) + x.new_tensor([1.0, 2.0]) + x.new_full((2,), 3.0)


# -- scaled_dot_product_attention and torch.nn.attention ------------------------------------


def qkv():
    return torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8)


def qkv_gqa():
    return torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)


@program(*[r(2, 2, 4, 8)] * 3)
def s_sdpa_plain(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


@program(*[r(2, 2, 4, 8)] * 3)
def s_sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@program(*[r(2, 2, 4, 8)] * 3)
def s_sdpa_bool_mask(q, k, v):
    mask = torch.ones(4, 4, dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@program(*[r(2, 2, 4, 8)] * 3, r(4, 4))
def s_sdpa_float_mask(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@program(*[r(2, 2, 4, 8)] * 3)
def s_sdpa_scale(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, scale=0.5)


@program(r(1, 4, 3, 8), r(1, 2, 3, 8), r(1, 2, 3, 8))
def s_sdpa_enable_gqa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


@program(*[r(2, 2, 4, 8)] * 3)
def s_sdpa_kernel_math(q, k, v):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v) + 1


@program(*[r(2, 2, 4, 8)] * 3)
def s_sdpa_kernel_list(q, k, v):
    with sdpa_kernel([SDPBackend.MATH, SDPBackend.FLASH_ATTENTION]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out * 2


@program(*[r(2, 2, 4, 8)] * 3)
def s_sdpa_backend_enum_compare(q, k, v):
    backend = SDPBackend.MATH
    out = F.scaled_dot_product_attention(q, k, v)
    return out + (1 if backend == SDPBackend.MATH else 2)


@program(*[r(2, 2, 4, 8)] * 3)
def s_sdpa_then_projection(q, k, v):
    out = F.scaled_dot_product_attention(q, k, v)
    return out.transpose(1, 2).reshape(2, 4, 16).sum(-1)


@program(r(2, 3, 8), r(2, 3, 8), r(2, 3, 8))
def s_sdpa_three_dims(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _mha():
    torch.manual_seed(1)
    return torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()


MHA = _mha()
MHA_KDIM = torch.nn.MultiheadAttention(8, 2, kdim=6, vdim=6).eval()


@program(r(2, 4, 8))
def s_mha_need_weights(x):
    out, weights = MHA(x, x, x, need_weights=True)
    return out, weights


@program(r(2, 4, 8))
def s_mha_no_weights(x):
    out, weights = MHA(x, x, x, need_weights=False)
    return out, weights is None


@program(r(2, 4, 8))
def s_mha_average_weights_off(x):
    return MHA(x, x, x, need_weights=True, average_attn_weights=False)


@program(r(2, 4, 8))
def s_mha_causal_mask(x):
    mask = torch.nn.Transformer.generate_square_subsequent_mask(4)
    return MHA(x, x, x, attn_mask=mask, need_weights=False)[0]


@program(r(2, 4, 8))
def s_mha_key_padding_mask(x):
    pad = torch.tensor([[False, False, False, True], [False, False, True, True]])
    return MHA(x, x, x, key_padding_mask=pad)


@program(r(4, 2, 8), r(5, 2, 6))
def s_mha_kdim(q, kv):
    return MHA_KDIM(q, kv, kv)


@program(r(4, 2, 8))
def s_multi_head_attention_forward(x):
    return F.multi_head_attention_forward(
        x,
        x,
        x,
        8,
        2,
        MHA.in_proj_weight,
        MHA.in_proj_bias,
        None,
        None,
        False,
        0.0,
        MHA.out_proj.weight,
        MHA.out_proj.bias,
        training=False,
        need_weights=True,
    )


@program(r(4, 3))
def s_fan_in_and_out_of_weight(w):
    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(w)
    return w * fan_in + fan_out


@program(r(2, 4, 8))
def s_none_or_dtype_of_mask(x):
    mask = torch.zeros(4, 4)
    dtype = F._none_or_dtype(mask)
    return x.to(dtype) + (1 if F._none_or_dtype(None) is None else 2)


# -- out= ----------------------------------------------------------------------------


@program()
def o_add_out_fresh(x):
    out = torch.empty(3)
    torch.add(x, 1, out=out)
    return out


@program()
def o_mul_out_returns_it(x):
    out = torch.empty(3)
    y = torch.mul(x, 2, out=out)
    return y, y is out


@program(r(2, 3))
def o_sum_out_resized(x):
    out = torch.empty(0)
    torch.sum(x, 0, out=out)
    return out * 2


@program(r(2, 3))
def o_max_out_pair(x):
    values, indices = torch.empty(2), torch.empty(2, dtype=torch.long)
    torch.max(x, 1, out=(values, indices))
    return values, indices


@program(r(2, 3), r(3, 2))
def o_matmul_out(a, b):
    out = torch.empty(2, 2)
    torch.matmul(a, b, out=out)
    return out + 1


@program()
def o_cat_out(x):
    out = torch.empty(6)
    torch.cat([x, x * 2], out=out)
    return out


@program()
def o_out_into_slice(x):
    buffer = torch.zeros(6)
    torch.sin(x, out=buffer[:3])
    return buffer


# -- random generator in the frame -------------------------------------------------------


@program()
def g_manual_seed_then_randn(x):
    torch.manual_seed(3)
    return x + torch.randn(3)


@program()
def g_manual_seed_twice_same_values(x):
    torch.manual_seed(5)
    a = torch.rand(3)
    torch.manual_seed(5)
    b = torch.rand(3)
    return x + a - b


@program()
def g_seed_then_dropout(x):
    torch.manual_seed(7)
    return F.dropout(x, 0.5, training=True)


@program()
def g_seed_randint_and_normal(x):
    torch.manual_seed(11)
    return x + torch.randint(0, 5, (3,)) + torch.normal(0.0, 1.0, (3,))


@program()
def g_rng_state_round_trip(x):
    state = torch.get_rng_state()
    a = torch.randn(3)
    torch.set_rng_state(state)
    b = torch.randn(3)
    return x + a - b


@program()
def g_generator_object(x):
    gen = torch.Generator().manual_seed(2)
    return x + torch.randn(3, generator=gen)


@program()
def g_bernoulli_after_seed(x):
    torch.manual_seed(4)
    return torch.bernoulli(torch.sigmoid(x))


# -- torch._check and sym helpers --------------------------------------------------------


@program()
def k_check_true(x):
    torch._check(x.shape[0] == 3)
    return x + 1


@program()
def k_check_with_message(x):
    torch._check(x.dim() == 1, lambda: "expected one dimension")
    return x * 2


@program()
def k_check_is_size_of_size(x):
    n = x.size(0)
    torch._check_is_size(n)
    return x.new_zeros(n) + x


@program()
def k_check_fails(x):
    torch._check(x.shape[0] == 4, lambda: "needs four")
    return x


@program()
def k_sym_int_of_size(x):
    return x * torch.sym_int(x.shape[0] / 2)


@program()
def k_sym_float_of_size(x):
    return x / torch.sym_float(x.shape[0])


@program(r(3, 5))
def k_sym_max_min_of_sizes(x):
    return x.sum() + torch.sym_max(x.shape[0], x.shape[1]) - torch.sym_min(x.shape[0], 4)


@program()
def k_sym_not_and_ite(x):
    return x + torch.sym_not(x.shape[0] == 2) + torch.sym_ite(x.shape[0] > 1, 5, 6)


# -- the operator module on tensors -------------------------------------------------------


@program(r(3), r(3))
def p_operator_arithmetic(a, b):
    return operator.add(a, b), operator.mul(a, 2), operator.truediv(a, b), operator.neg(a)


@program(r(3), r(3))
def p_operator_compare(a, b):
    return operator.lt(a, b), operator.ge(a, 0), operator.eq(a, a)


@program(r(3))
def p_operator_inplace(x):
    y = x.clone()
    y = operator.iadd(y, 1)
    y = operator.imul(y, 3)
    return y


@program(r(4))
def p_operator_getitem_and_setitem(x):
    y = x.clone()
    operator.setitem(y, 0, 5.0)
    return operator.getitem(y, slice(1, 3)), y


@program(r(2, 3), r(3, 2))
def p_operator_matmul_and_pow(a, b):
    return operator.matmul(a, b), operator.pow(a, 2), operator.abs(a)


@program(r(3))
def p_operator_bitwise_on_bools(x):
    a, b = x > 0, x < 0.5
    return operator.and_(a, b), operator.or_(a, b), operator.xor(a, b), operator.invert(a)


@program(r(3))
def p_operator_attrgetter_methodcaller(x):
    shape = operator.attrgetter("shape")(x)
    return operator.methodcaller("sum", 0)(x) * shape[0]


@program(r(3))
def p_operator_itemgetter_on_tensor(x):
    return operator.itemgetter(0, 2)(x)


@program(r(3))
def p_operator_truth_and_index(x):
    n = operator.index(x.shape[0])
    return x * n + operator.truth(x.shape[0])


# -- print and logging ----------------------------------------------------------------------

LOGGER = logging.getLogger("ember.tests.tensor_metadata")


@program()
def l_print_tensor_in_middle(x):
    y = x * 2
    print(y)
    return y + 1


@program()
def l_print_shape_only(x):
    print("shape", x.shape)
    return x + 1


@program()
def l_logger_info_tensor(x):
    y = x.sin()
    LOGGER.info("value %s", y)
    return y.cos()


@program()
def l_logger_debug_disabled(x):
    LOGGER.debug("x %s", x)
    return x * 3


@program()
def l_logging_module_warning(x):
    y = x + 1
    logging.getLogger("ember.tests.other").warning("shape %s", y.shape)
    return y * 2


# graphs as torch.compile's, operations not: torch keeps a node capture folds or leaves
OPS_DIFFER = {
    "c_as_tensor_of_tensor": "torch keeps an as_tensor node that returns its input",
    "k_check_is_size_of_size": "torch keeps the check of a static size as a node",
    "k_sym_int_of_size": "torch keeps sym_int of a static size as a node",
    "k_sym_float_of_size": "torch keeps sym_float of a static size as a node",
    "k_sym_max_min_of_sizes": "torch keeps sym_max / sym_min of static sizes as nodes",
    "c_result_type": "capture keeps a .to() of the tensor's own dtype, torch drops it",
    "s_mha_key_padding_mask": "capture records _canonical_mask as one node, torch traces it",
    "s_mha_causal_mask": "capture records _canonical_mask as one node, torch traces it",
    "a_data_assignment": "torch records the value assigned before its break, capture not",
    "a_imag_assigned": "torch records the value assigned before its break, capture not",
}
# checked against eager alone: the graphs differ from torch.compile's
GRAPHS_DIFFER = {
    # capture breaks where torch.compile traces
    "a_version_after_in_place": "capture breaks at Tensor._version",
    "a_untyped_storage_size": "capture breaks at untyped_storage()",
    "g_generator_object": "capture breaks at a torch.Generator made in the frame",
    "l_logging_module_warning": "capture runs the rest after the logger call eagerly",
    # torch.compile breaks where capture traces
    "a_is_complex_and_signed": "torch breaks at Tensor.is_signed() (a non-tensor result)",
    "k_sym_not_and_ite": "torch breaks at sym_not (a non-tensor result)",
    "p_operator_getitem_and_setitem": "torch breaks at operator.setitem on a tensor",
}


@pytest.mark.parametrize("name", [name for name in PROGRAMS if name not in GRAPHS_DIFFER])
def test_tensor_metadata_and_attention_program_like_torch(name):
    fn, make_args = PROGRAMS[name]
    check_like_torch(fn, make_args, ops=name not in OPS_DIFFER)


@pytest.mark.parametrize("name", list(GRAPHS_DIFFER))
def test_tensor_metadata_and_attention_program_like_eager(name):
    fn, make_args = PROGRAMS[name]
    check_like_eager(fn, make_args, seeded=True)


def test_as_tensor_of_a_tensor_is_the_tensor():
    def fn(x):
        same = torch.as_tensor(x) is x
        other = torch.as_tensor(x, dtype=torch.float64) is x
        return x + 1, same, other

    compiled = check_like_eager(fn, lambda: (torch.randn(3),))
    assert compiled.backend.frame_count == 1


def test_members_of_a_c_enum_compare_without_a_break():
    def fn(x, backend):
        return x * (2 if backend == SDPBackend.MATH else 3) + (backend != SDPBackend.MATH)

    compiled = dynamo_capture.optimize(fn, backend=CountingBackend())
    x = torch.randn(3)
    for backend in (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
        assert_same(compiled(x, backend), fn(x, backend))  # the identity guard recompiles
    assert not compiled.graph_breaks
