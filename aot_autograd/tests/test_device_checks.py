"""An op given tensors on two devices raises eager's error while tracing (fakes on a
"cuda" device stand for CUDA tensors where no GPU is present).

Each family of the rule (device_checks' docstring) is checked with eager's message
for a CUDA kernel; then whole programs whose CPU tensors are made in the graph by
factories (`torch.linspace(...)` without a device, the fuzzer's CUDA findings) are
traced on the inference path and compiled from a captured graph.
"""

from __future__ import annotations

import re

import pytest
import torch

import guards
from aot_autograd import DeviceMismatchError
from aot_autograd.device_checks import check_devices_agree, device_family

aten = torch.ops.aten
F = torch.nn.functional
_MODE = guards.FakeTensorMode()


def _fake(shape, device, dtype=torch.float32):
    return guards.FakeTensor(
        _MODE, torch.empty(shape, device="meta", dtype=dtype), torch.device(device)
    )


def _cuda(*shape, dtype=torch.float32):
    return _fake(shape, "cuda:0", dtype)


def _cpu(*shape, dtype=torch.float32):
    return _fake(shape, "cpu", dtype)


_TWO_DEVICES = "Expected all tensors to be on the same device, but found at least two devices, "
_ONE_DEVICE = "Expected all tensors to be on the same device, but got "

# (op, arguments, the start of eager's message): eager's CUDA kernels refuse these.
REFUSED = {
    "add_cpu_vector": (aten.add.Tensor, lambda: (_cuda(4, 5), _cpu(5)), _TWO_DEVICES + "cuda:0 and cpu!"),
    "cpu_vector_times_cuda_scalar": (aten.mul.Tensor, lambda: (_cpu(3), _cuda()), _TWO_DEVICES + "cuda:0 and cpu!"),
    "where_cpu_condition": (
        aten.where.self,
        lambda: (_cpu(3, dtype=torch.bool), _cuda(3), _cuda(3)),
        _TWO_DEVICES + "cuda:0 and cpu!",
    ),
    "masked_fill_cpu_mask": (
        aten.masked_fill.Tensor,
        lambda: (_cuda(3), _cpu(3, dtype=torch.bool), _cpu()),
        _TWO_DEVICES + "cuda:0 and cpu!",
    ),
    "conv_cpu_weight": (
        aten.convolution.default,
        lambda: (_cuda(1, 1, 4), _cpu(2, 1, 3), None, [1], [0], [1], False, [0], 1),
        "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same",
    ),
    "conv_cpu_bias": (
        aten.convolution.default,
        lambda: (_cuda(1, 1, 4), _cuda(2, 1, 3), _cpu(2), [1], [0], [1], False, [0], 1),
        "Input type (torch.cuda.FloatTensor) and bias type (torch.FloatTensor) should be the same",
    ),
    "conv_half_cpu_weight": (
        aten.convolution.default,
        lambda: (_cuda(1, 1, 4, dtype=torch.half), _cpu(2, 1, 3, dtype=torch.half), None,
                 [1], [0], [1], False, [0], 1),
        "Input type (torch.cuda.HalfTensor) and weight type (torch.HalfTensor) should be the same",
    ),
    "conv_bfloat16_cpu_weight": (
        aten.convolution.default,
        lambda: (_cuda(1, 1, 4, dtype=torch.bfloat16), _cpu(2, 1, 3, dtype=torch.bfloat16),
                 None, [1], [0], [1], False, [0], 1),
        "Input type (CUDABFloat16Type) and weight type (CPUBFloat16Type) should be the same",
    ),
    "batch_norm_cpu_running_stats": (
        aten.native_batch_norm.default,
        lambda: (_cuda(4, 3, 5), None, None, _cpu(3), _cpu(3), True, 0.1, 1e-5),
        _ONE_DEVICE + "running_mean is on cpu, different from other tensors on cuda:0 "
        "(when checking argument in method wrapper_CUDA__native_batch_norm)",
    ),
    "batch_norm_cpu_weight": (
        aten.native_batch_norm.default,
        lambda: (_cuda(4, 3, 5), _cpu(3), _cpu(3), _cpu(3), _cpu(3), True, 0.1, 1e-5),
        _ONE_DEVICE + "weight is on cpu, different from other tensors on cuda:0",
    ),
    "index_select_cpu_index": (
        aten.index_select.default,
        lambda: (_cuda(4, 5), 0, _cpu(2, dtype=torch.long)),
        _ONE_DEVICE + "index is on cpu, different from other tensors on cuda:0 "
        "(when checking argument in method wrapper_CUDA__index_select)",
    ),
    "embedding_cpu_indices": (
        aten.embedding.default,
        lambda: (_cuda(4, 5), _cpu(2, dtype=torch.long)),
        _ONE_DEVICE + "index is on cpu, different from other tensors on cuda:0 "
        "(when checking argument in method wrapper_CUDA__index_select)",
    ),
    "mm_cpu_weight": (
        aten.mm.default,
        lambda: (_cuda(3, 3), _cpu(3, 3)),
        _ONE_DEVICE + "mat2 is on cpu, different from other tensors on cuda:0 (when checking "
        "argument in method wrapper_CUDA_mm)",
    ),
    "clamp_cpu_scalar_bound": (
        aten.clamp.Tensor,
        lambda: (_cuda(3), _cpu()),
        _ONE_DEVICE + "min is on cpu, different from other tensors on cuda:0 (when checking "
        "argument in method wrapper_CUDA_clamp_Tensor)",
    ),
    "mm_cpu_scalar_is_no_number": (aten.mm.default, lambda: (_cuda(3, 3), _cpu()), _ONE_DEVICE + "mat2"),
    "cat_of_two_devices": (aten.cat.default, lambda: ([_cuda(3), _cpu(3)],), _ONE_DEVICE + "tensors is on cpu"),
    "layer_norm_cpu_weight": (
        aten.native_layer_norm.default,
        lambda: (_cuda(2, 8), [8], _cpu(8), None, 1e-5),
        _ONE_DEVICE + "weight is on cpu",
    ),
    "index_cuda_indices_of_cpu_tensor": (
        aten.index.Tensor,
        lambda: (_cpu(4, 5), [_cuda(2, dtype=torch.long)]),
        "indices should be either on cpu or on the same device as the indexed tensor (cpu)",
    ),
    "index_put_cpu_values": (
        aten.index_put.default,
        lambda: (_cuda(4, 5), [_cpu(2, dtype=torch.long)], _cpu(2, 5)),
        _TWO_DEVICES + "cuda:0 and cpu!",
    ),
}  # fmt: skip
# ... and take these: CPU scalars where elementwise kernels read numbers, CPU indices,
# copies between devices, one device, and other libraries' ops.
ACCEPTED = {
    "add_cpu_scalar": (aten.add.Tensor, lambda: (_cuda(4, 5), _cpu())),
    "where_cpu_scalar": (aten.where.self, lambda: (_cuda(3, dtype=torch.bool), _cuda(3), _cpu())),
    "masked_fill_cpu_value": (
        aten.masked_fill.Tensor,
        lambda: (_cuda(3), _cuda(3, dtype=torch.bool), _cpu()),
    ),
    "fill_cpu_value": (aten.fill_.Tensor, lambda: (_cuda(3), _cpu())),
    "floor_divide_cpu_scalar": (aten.floor_divide.default, lambda: (_cuda(3), _cpu())),
    "eq_in_place_cpu_scalar": (aten.eq_.Tensor, lambda: (_cuda(3), _cpu())),
    "index_cpu_indices": (aten.index.Tensor, lambda: (_cuda(4, 5), [_cpu(2, dtype=torch.long)])),
    "index_put_cpu_indices": (
        aten.index_put.default,
        lambda: (_cuda(4, 5), [_cpu(2, dtype=torch.long)], _cuda(2, 5)),
    ),
    "index_put_cpu_scalar_value": (
        aten.index_put.default,
        lambda: (_cuda(4, 5), [_cpu(2, dtype=torch.long)], _cpu()),
    ),
    "copy_between_devices": (aten.copy_.default, lambda: (_cuda(3, 3), _cpu(3, 3))),
    "to_copy": (aten._to_copy.default, lambda: (_cpu(3),)),
    "foreach_with_cpu_step": (aten._foreach_add.List, lambda: ([_cuda(3)], [_cuda(3)])),
    "all_cpu": (aten.mm.default, lambda: (_cpu(3, 3), _cpu(3, 3))),
    "all_cuda": (aten.mm.default, lambda: (_cuda(3, 3), _cuda(3, 3))),
    "conv_one_device": (
        aten.convolution.default,
        lambda: (_cuda(1, 1, 4), _cuda(2, 1, 3), None, [1], [0], [1], False, [0], 1),
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_op_given_tensors_on_two_devices_raises_eager_error(case):
    op, make_args, message = REFUSED[case]
    with pytest.raises(RuntimeError, match="^" + re.escape(message)) as raised:
        check_devices_agree(op, make_args(), {})
    assert isinstance(raised.value, DeviceMismatchError)


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_op_eager_takes_on_two_devices_passes(case):
    op, make_args = ACCEPTED[case]
    check_devices_agree(op, make_args(), {})


def test_keyword_arguments_are_checked():
    with pytest.raises(DeviceMismatchError, match="running_var is on cpu"):
        check_devices_agree(
            aten.native_batch_norm.default,
            (_cuda(4, 3, 5), None, None),
            {"running_mean": _cuda(3), "running_var": _cpu(3), "training": True,
             "momentum": 0.1, "eps": 1e-5},
        )  # fmt: skip


@pytest.mark.parametrize(
    "op, family",
    [
        (aten.add.Tensor, "elementwise"),
        (aten.addcmul.default, "elementwise"),
        (aten.masked_fill_.Scalar, "elementwise"),
        (aten.floor_divide.default, "elementwise"),
        (aten.clamp.Tensor, "one device"),
        (aten.mm.default, "one device"),
        (aten.convolution.default, "convolution"),
        (aten.index_put_.default, "indexing"),
        (aten._to_copy.default, "device copy"),
        (aten._fused_adam_.default, "device copy"),
        (aten.native_batch_norm.default, "one device"),
        (torch.ops.prims.add.default, "other library"),
    ],
)
def test_each_op_has_a_family(op, family):
    assert device_family(op) == family


def test_families_are_read_from_eager_op_declarations():
    from aot_autograd.device_checks import _declarations

    declared = _declarations()
    if declared is None:
        pytest.skip("this torch ships no native_functions.yaml")
    assert "add.Tensor" in declared.unchecked and "where.self" in declared.unchecked
    assert "index_select" not in declared.unchecked and "clamp.Tensor" not in declared.unchecked
    assert "mm" in declared.structured and "index_select" not in declared.structured


def test_meta_tensors_are_not_compared():
    meta = torch.empty(3, 3, device="meta")
    check_devices_agree(aten.mm.default, (meta, torch.empty(3, 3)), {})


# -- whole programs: CPU tensors made in the graph beside CUDA inputs -------------------------


def _conv_with_cpu_weight(x):
    w = torch.linspace(-1, 1, 6 * x.shape[-2], dtype=x.dtype).reshape(2, x.shape[-2], 3)
    return F.conv1d(x, w, padding=1)


def _batch_norm_with_cpu_stats(x):
    mean, var = torch.zeros(x.shape[1]), torch.ones(x.shape[1])
    F.batch_norm(x, mean, var, training=True, momentum=0.1)
    return (mean,)


def _embedding_with_cpu_indices(x):
    return F.embedding((torch.arange(5) * 3).remainder(x.shape[0]), x) * 2


def _add_cpu_vector(x):
    return (x + torch.ones(x.shape[-1])).sin()


PROGRAMS = {
    "conv_weight": (_conv_with_cpu_weight, (1, 1, 4), "and weight type (torch.FloatTensor)"),
    "batch_norm_stats": (_batch_norm_with_cpu_stats, (2, 3, 4), "running_mean is on cpu"),
    "embedding_indices": (_embedding_with_cpu_indices, (4, 3), "index is on cpu"),
    "add_vector": (_add_cpu_vector, (2, 3), "found at least two devices, cuda:0 and cpu!"),
}


@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_program_making_cpu_tensors_beside_cuda_inputs_raises_on_the_inference_path(case):
    from aot_autograd.program import trace_program
    from prim_decomp import inductor_default

    fn, shape, message = PROGRAMS[case]
    with pytest.raises(DeviceMismatchError, match=re.escape(message)):
        trace_program(fn, [_cuda(*shape)], decompositions=inductor_default, joint=False)


@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_captured_graph_compiled_for_cuda_inputs_raises_eager_error(case):
    """Capture (on CPU inputs: it needs real ones) gives the graph its factories as
    nodes; the inductor backend's AOT stage then meets them beside fake CUDA inputs."""
    ember = pytest.importorskip("ember")
    from ember.backends import lookup_backend

    fn, shape, message = PROGRAMS[case]
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    ember.compile(fn, backend=keep, fullgraph=True)(torch.randn(shape))
    (gm,) = graphs
    inductor = lookup_backend("inductor", {"warm_start": False})  # (it reads the GPU name)
    with pytest.raises(DeviceMismatchError, match=re.escape(message)):
        inductor(gm, [_cuda(*shape)])(_cuda(*shape))


def test_captured_graph_making_a_cpu_tensor_beside_cuda_inputs_returns_it_on_the_cpu():
    """No op mixes devices (eager computes): the graph's CPU tensor comes back on the
    CPU, computed through ATen (the Triton driver's kernels run on the GPU alone)."""
    ember = pytest.importorskip("ember")
    from ember.backends import lookup_backend

    def fn(x):
        return x * 2, torch.linspace(0, 1, x.shape[1])

    graphs = []
    ember.compile(fn, backend=lambda gm, _: graphs.append(gm) or gm.forward, fullgraph=True)(
        torch.randn(2, 3)
    )
    x = _cuda(2, 3)
    doubled, made = lookup_backend("inductor", {"warm_start": False})(graphs[0], [x])(x)
    assert doubled.device == x.device
    assert made.device.type == "cpu"
    torch.testing.assert_close(made, torch.linspace(0, 1, 3))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_program_mixing_devices_raises_as_eager_on_the_gpu(backend, case):
    import ember

    fn, shape, _ = PROGRAMS[case]
    x = torch.randn(shape, device="cuda")
    with pytest.raises(RuntimeError) as eager:
        fn(x)
    with pytest.raises(RuntimeError) as compiled:
        ember.compile(fn, backend=backend)(x)
    assert str(compiled.value).splitlines()[0] == str(eager.value).splitlines()[0]


def test_tracer_checks_devices_of_each_traced_op(monkeypatch):
    from aot_autograd import tracer
    from aot_autograd.program import trace_program

    seen = []
    monkeypatch.setattr(tracer, "check_devices_agree", lambda op, a, k: seen.append(op))
    trace_program(lambda x, w: F.batch_norm(x @ w, None, None, training=True), [
        torch.randn(4, 3), torch.randn(3, 3)
    ], joint=False)  # fmt: skip
    assert aten.mm.default in seen
    assert any("batch_norm" in str(op) for op in seen)
