"""An op given tensors on two devices raises eager's error while tracing (fakes on a
"cuda" device stand for CUDA tensors where no GPU is present)."""

from __future__ import annotations

import pytest
import torch

import guards
from aot_autograd.device_checks import check_devices_agree

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


# (op, arguments, the argument eager names): eager's CUDA kernels refuse these.
REFUSED = {
    "batch_norm_cpu_running_stats": (
        aten.native_batch_norm.default,
        lambda: (_cuda(4, 3, 5), None, None, _cpu(3), _cpu(3), True, 0.1, 1e-5),
        "running_mean",
    ),
    "add_cpu_vector": (aten.add.Tensor, lambda: (_cuda(4, 5), _cpu(5)), "other"),
    "mm_cpu_weight": (aten.mm.default, lambda: (_cuda(3, 3), _cpu(3, 3)), "mat2"),
    "cat_of_two_devices": (aten.cat.default, lambda: ([_cuda(3), _cpu(3)],), "tensors"),
    "cuda_scalar_times_cpu": (aten.mul.Tensor, lambda: (_cpu(3), _cuda()), "other"),
    "layer_norm_cpu_weight": (
        aten.native_layer_norm.default,
        lambda: (_cuda(2, 8), [8], _cpu(8), None, 1e-5),
        "weight",
    ),
}
# ... and take these: a CPU scalar, CPU indices, copies between devices, one device.
ACCEPTED = {
    "add_cpu_scalar": (aten.add.Tensor, lambda: (_cuda(4, 5), _cpu())),
    "where_cpu_scalar": (aten.where.self, lambda: (_cuda(3, dtype=torch.bool), _cuda(3), _cpu())),
    "index_cpu_indices": (aten.index.Tensor, lambda: (_cuda(4, 5), [_cpu(2, dtype=torch.long)])),
    "index_put_cpu_indices": (
        aten.index_put.default,
        lambda: (_cuda(4, 5), [_cpu(2, dtype=torch.long)], _cuda(2, 5)),
    ),
    "copy_between_devices": (aten.copy_.default, lambda: (_cuda(3, 3), _cpu(3, 3))),
    "to_copy": (aten._to_copy.default, lambda: (_cpu(3),)),
    "all_cpu": (aten.mm.default, lambda: (_cpu(3, 3), _cpu(3, 3))),
    "all_cuda": (aten.mm.default, lambda: (_cuda(3, 3), _cuda(3, 3))),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_op_given_tensors_on_two_devices_raises_eager_error(case):
    op, make_args, name = REFUSED[case]
    with pytest.raises(RuntimeError, match=f"same device, but got {name} is on"):
        check_devices_agree(op, make_args(), {})


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_op_eager_takes_on_two_devices_passes(case):
    op, make_args = ACCEPTED[case]
    check_devices_agree(op, make_args(), {})


def test_meta_tensors_are_not_compared():
    meta = torch.empty(3, 3, device="meta")
    check_devices_agree(aten.mm.default, (meta, torch.empty(3, 3)), {})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_batch_norm_of_cuda_input_with_cpu_statistics_raises_as_eager(backend):
    import ember

    def fn(x, mean, var):
        return F.batch_norm(x, mean, var, training=True) * 2

    args = (torch.randn(4, 3, 5, device="cuda"), torch.zeros(3), torch.ones(3))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        fn(*args)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        ember.compile(fn, backend=backend)(*args)


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
