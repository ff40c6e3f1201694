"""Turning real tensors into fakes, memoized so identity and aliasing survive.

The same real tensor always gives the same fake, and tensors that share a
storage give fakes whose meta tensors share one meta storage (with the same
offsets, sizes and strides), so that a graph traced on the fakes sees the
same aliasing as eager code would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.utils._mode_utils import no_dispatch

from guards.errors import FakeTensorError
from guards.tensor_subclasses import is_traceable_subclass

if TYPE_CHECKING:
    from guards.fake_tensor import FakeTensor, FakeTensorMode

__all__ = ["FakeTensorConverter"]


class FakeTensorConverter:
    """Memoizing real -> fake conversion for one `FakeTensorMode`."""

    def __init__(self) -> None:
        # id(real) -> (the real tensor, its fake).
        # NOTE: the real tensor is held strongly, not by a weak reference: a weak reference
        # makes `torch.utils.swap_tensors` refuse the tensor (module.to() with
        # swap_module_params_on_conversion, FSDP2-style parameter swaps). While a compile
        # runs it keeps no more user memory alive than `_storages`, which holds each real
        # storage; holding the object keeps its id from being reused, and the entry is
        # taken only for that very object (`is`). Capture drops both once its entry is
        # compiled (`forget_real_tensors`), so a compiled entry, which keeps its fakes
        # and so this converter, keeps no user tensor or storage alive through it.
        self._fakes: dict[int, tuple[torch.Tensor, FakeTensor]] = {}
        # storage key -> (the real storage, kept alive so its key stays unique; the meta storage)
        self._storages: dict[int, tuple[torch.UntypedStorage, torch.UntypedStorage]] = {}

    def __len__(self) -> int:
        return len(self._fakes)

    def forget_real_tensors(self) -> None:
        """Drop the real tensors and storages converted so far (once a compile is done
        with them), so that fakes kept by a compiled entry keep no user memory alive.

        A later `from_real` of one of them makes a new fake, on a new meta storage.
        """
        self._fakes.clear()
        self._storages.clear()

    def pairs(self) -> list[tuple[torch.Tensor, FakeTensor]]:
        """(real tensor, its fake) for each tensor converted so far."""
        return list(self._fakes.values())

    def meta_storage(self, tensor: torch.Tensor) -> torch.UntypedStorage:
        """The meta storage standing for `tensor`'s storage (one per real storage)."""
        real = tensor.untyped_storage()
        key = real._cdata
        hit = self._storages.get(key)
        if hit is None:
            with no_dispatch():
                hit = (real, torch.UntypedStorage(real.nbytes(), device="meta"))
            self._storages[key] = hit
        return hit[1]

    def from_real(
        self,
        mode: FakeTensorMode,
        tensor: torch.Tensor,
        *,
        source: Any = None,
        dynamic_dims: Any = None,
    ) -> FakeTensor:
        """The fake of `tensor` for `mode`; the same fake each time for the same tensor.

        `dynamic_dims` (dims, or dims -> DynamicRange) and the tensor's mark_dynamic /
        maybe_mark_dynamic marks get symbolic sizes from `mode.shape_env` (see
        symbolic_fakes.py); such a fake has a fresh meta storage of its own.
        """
        from guards.fake_tensor import FakeTensor
        from guards.symbolic_fakes import dynamic_dims_of, symbolic_meta

        if isinstance(tensor, FakeTensor):
            if tensor.fake_mode is not mode:
                raise FakeTensorError(
                    "from_real got a FakeTensor of another FakeTensorMode; use one mode per compile"
                )
            return tensor
        if is_traceable_subclass(tensor):
            return self._subclass_fake(mode, tensor, dynamic_dims)
        _check_convertible(tensor)
        held = self._fakes.get(id(tensor))
        hit = held[1] if held is not None and held[0] is tensor else None
        if hit is not None and hit.meta._has_symbolic_sizes_strides:
            return hit  # NOTE: comparing symbolic sizes with real ones would record guards
        if hit is not None and _same_metadata(hit, tensor):
            return hit
        dims = dynamic_dims_of(mode, tensor, dynamic_dims)
        # NOTE: inside an active FakeTensorMode, plain tensor ops would make fakes;
        # the meta tensor must stay a plain meta tensor.
        with no_dispatch(), torch.no_grad():
            if dims:
                meta = symbolic_meta(mode, tensor, source, dims)
            else:
                meta = torch.empty(0, dtype=tensor.dtype, device="meta")
                meta.set_(
                    self.meta_storage(tensor),
                    tensor.storage_offset(),
                    tensor.shape,
                    tensor.stride(),
                )
        # NOTE: made under the real tensor's inference flag, the fake is an inference
        # tensor exactly where the real one is (`is_inference()`, and the same errors
        # for in-place updates or autograd outside inference mode).
        with torch.inference_mode(tensor.is_inference()):
            fake = FakeTensor(
                mode,
                meta,
                tensor.device,
                requires_grad=tensor.requires_grad,
                is_parameter=isinstance(tensor, torch.nn.Parameter),
            )
        if tensor.requires_grad and not tensor.is_leaf:
            fake = _non_leaf(fake)
        fake.source = source
        self._fakes[id(tensor)] = (tensor, fake)
        return fake

    def _subclass_fake(
        self, mode: FakeTensorMode, tensor: torch.Tensor, dynamic_dims: Any
    ) -> torch.Tensor:
        """A traceable subclass's fake: the subclass again (`__tensor_unflatten__`), over
        fakes of its inner tensors, so that operations on it run its `__torch_dispatch__`
        on fakes (the mode hands them on: FakeTensorMode.dispatch)."""
        from guards.marks import marks_of

        marks = marks_of(tensor)
        if dynamic_dims or marks.dynamic or marks.maybe_dynamic:
            raise FakeTensorError(
                f"symbolic sizes of tensor subclass {type(tensor).__qualname__} are not "
                "supported; compile it with static sizes"
            )
        held = self._fakes.get(id(tensor))
        if held is not None and held[0] is tensor and _same_metadata(held[1], tensor):
            return held[1]
        names, ctx = tensor.__tensor_flatten__()
        inner = {name: self.from_real(mode, getattr(tensor, name)) for name in names}
        with torch.inference_mode(tensor.is_inference()):
            fake = type(tensor).__tensor_unflatten__(
                inner, ctx, tuple(tensor.shape), tuple(tensor.stride())
            )
        if tensor.requires_grad and not fake.requires_grad:
            fake.requires_grad_(True)
        self._fakes[id(tensor)] = (tensor, fake)
        return fake


_EXAMPLE_BACKWARD = "a backward through a fake of an example input (an internal error)"


def _non_leaf(fake: torch.Tensor) -> torch.Tensor:
    """`fake` as a non-leaf over the same memory, standing for a real non-leaf requiring
    grad (an activation passed into a graph after a cut), as torch's fakes do: eager
    allows an in-place write into it (`out += identity`), which a leaf refuses. Its
    node raises if a backward ever reaches it."""
    with torch.enable_grad():
        return torch._C._functions.DelayedError(_EXAMPLE_BACKWARD, 1)(fake)


def _same_metadata(fake: torch.Tensor, tensor: torch.Tensor) -> bool:
    return (
        fake.shape == tensor.shape
        and fake.stride() == tensor.stride()
        and fake.storage_offset() == tensor.storage_offset()
        and fake.dtype == tensor.dtype
        and fake.requires_grad == tensor.requires_grad
        and fake.is_leaf == tensor.is_leaf
        and fake.is_inference() == tensor.is_inference()
    )


def _check_convertible(tensor: torch.Tensor) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise FakeTensorError(f"from_real expects a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout != torch.strided:
        raise FakeTensorError(
            f"fake tensors support strided tensors only; got layout {tensor.layout} "
            "(convert with .to_dense() before compiling)"
        )
    if tensor.is_quantized or tensor.is_nested:
        raise FakeTensorError("fake tensors do not support quantized or nested tensors")
    if type(tensor) not in (torch.Tensor, torch.nn.Parameter) and not isinstance(
        tensor, torch.nn.Parameter
    ):
        cls = type(tensor)
        if cls.__torch_dispatch__ is not torch.Tensor.__torch_dispatch__:
            raise FakeTensorError(
                f"fake tensors cannot stand for tensor subclass {cls.__qualname__}, which "
                "defines its own __torch_dispatch__ but not __tensor_flatten__ and "
                "__tensor_unflatten__ (define them, as torch's TwoTensor does, to compile it)"
            )
