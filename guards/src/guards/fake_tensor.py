"""Fake tensors: tensors with metadata (device, dtype, shape, strides) and no data.

A `FakeTensor` is a wrapper subclass: it reports the real device it stands for
(`fake.device == torch.device("cuda", 0)` on a machine without a GPU) while a
meta tensor inside it (`fake.meta`) carries the storage, so that views of one
fake share one meta storage and aliasing is visible through
`fake.untyped_storage()`. Operations on fakes run torch's meta kernels under
the python dispatcher and give fakes; autograd works on fakes as on real
tensors (requires_grad, grad_fn, torch.autograd.grad).

    >>> mode = FakeTensorMode()
    >>> x = mode.from_real(torch.randn(8, 16, device="cpu"))
    >>> with mode:
    ...     y = torch.nn.functional.linear(x, torch.zeros(4, 16))
    >>> y.shape, y.device
    (torch.Size([8, 4]), device(type='cpu'))
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch._dispatch.python import enable_python_dispatcher
from torch.utils._mode_utils import no_dispatch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from guards.errors import DataDependentError, FakeTensorError, UnsupportedOpError
from guards.fake_arguments import map_structure
from guards.fake_cache import DispatchCache, OutputSpec
from guards.fake_fallback import can_fall_back, run_fallback
from guards.fake_rules import MIXED_DEVICE_OPS, fake_rule_for
from guards.tensor_subclasses import is_traceable_subclass_type

__all__ = ["FakeTensor", "FakeTensorMode", "fake_mode_of", "is_fake"]

_META = torch.device("meta")
_CPU = torch.device("cpu")


class FakeTensor(torch.Tensor):
    """A tensor without data that keeps the real device, dtype, shape, strides and offset.

    Attributes:
        meta: the meta tensor holding this fake's metadata and (meta) storage.
        fake_mode: the `FakeTensorMode` that made it.
        fake_device: the device it stands for (the same as `.device`).
        is_parameter: whether it stands for an nn.Parameter
            (`isinstance(fake, torch.nn.Parameter)` is then True as well).
        source: the `Source` it was made for, where known (else None).
    """

    meta: torch.Tensor
    fake_mode: FakeTensorMode
    source: Any

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(
        cls,
        mode: FakeTensorMode,
        meta: torch.Tensor,
        device: torch.device,
        requires_grad: bool = False,
        is_parameter: bool = False,
    ) -> FakeTensor:
        if type(device) is not torch.device:
            device = torch.device(device)
        if device.index is None and device.type not in ("cpu", "meta"):
            device = _with_index(device)
        fake = torch.Tensor._make_wrapper_subclass(
            cls,
            meta.size(),
            strides=meta.stride(),
            storage_offset=meta.storage_offset(),
            dtype=meta.dtype,
            layout=meta.layout,
            device=device,
            requires_grad=requires_grad,
            # NOTE: the storage's size is the meta tensor's (a view's is its base's); left
            # out, it is computed from the sizes, which guards a symbolic size against 0
            storage_size=meta.untyped_storage().nbytes(),
        )
        fake.meta = meta
        fake.fake_mode = mode
        fake.source = None
        if is_parameter:
            # NOTE: nn.Parameter's metaclass answers isinstance(t, Parameter) for
            # any tensor with `_is_param` set; this keeps parameters recognisable.
            fake._is_param = True
        return fake

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @property
    def fake_device(self) -> torch.device:
        """The device this fake stands for."""
        return self.device

    @property
    def is_parameter(self) -> bool:
        """Whether this fake stands for an nn.Parameter."""
        return bool(self.__dict__.get("_is_param", False))

    def untyped_storage(self) -> torch.UntypedStorage:
        """The meta storage shared by every view of this fake (compare for aliasing)."""
        return self.meta.untyped_storage()

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        return (
            f"FakeTensor(size={tuple(self.shape)}, dtype={self.dtype}, device={self.device}{grad})"
        )

    def __deepcopy__(self, memo: dict) -> FakeTensor:
        """A new fake with the same metadata; fakes copied together keep sharing storage."""
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the "
                "deepcopy protocol at the moment (as for real tensors)"
            )
        meta = self.meta
        key = ("ember_fake_storage", meta.untyped_storage()._cdata)
        with no_dispatch():
            storage = memo.get(key)
            if storage is None:
                storage = torch.UntypedStorage(meta.untyped_storage().nbytes(), device="meta")
                memo[key] = storage
            copied = torch.empty(0, dtype=meta.dtype, device="meta")
            copied.set_(storage, meta.storage_offset(), meta.shape, meta.stride())
        fake = FakeTensor(
            self.fake_mode, copied, self.device, self.requires_grad, self.is_parameter
        )
        fake.source = self.source
        memo[id(self)] = fake
        return fake

    def tolist(self) -> Any:
        raise _needs_data("Tensor.tolist()")

    def numpy(self, *args: Any, **kwargs: Any) -> Any:
        raise _needs_data("Tensor.numpy()")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise _needs_data("Tensor.__array__()")

    def data_ptr(self) -> int:
        raise _needs_data("Tensor.data_ptr()")

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: Any = None) -> Any:
        if _other_dispatch_subclass(types):
            return NotImplemented  # that subclass's own handler takes the op apart first
        mode = _mode_of(args, kwargs)
        return mode.dispatch(func, args, kwargs or {})


def _other_dispatch_subclass(types: Any) -> bool:
    """Whether an op's `types` hold a traceable tensor subclass (its own
    `__torch_dispatch__` and the flatten protocol: one over fakes, see fake_converter)."""
    return any(kind is not FakeTensor and is_traceable_subclass_type(kind) for kind in types)


def _needs_data(what: str) -> DataDependentError:
    return DataDependentError(
        f"{what} needs tensor values, which fake tensors do not have; capture breaks the "
        "graph here (keep the values as tensors to stay in one graph)",
        op=what,
    )


def _mode_of(args: tuple, kwargs: Any) -> FakeTensorMode:
    for value in tree_flatten((args, kwargs))[0]:
        if isinstance(value, FakeTensor):
            return value.fake_mode
    raise FakeTensorError("FakeTensor.__torch_dispatch__ called without a FakeTensor argument")


def is_fake(value: Any) -> bool:
    """Whether `value` is a FakeTensor."""
    return isinstance(value, FakeTensor)


def fake_mode_of(values: Any) -> FakeTensorMode | None:
    """The FakeTensorMode of the fakes in `values` (any pytree), or None if there are none.

    Fakes of two different modes are an error.
    """
    found = None
    for value in tree_flatten(values)[0]:
        if isinstance(value, FakeTensor):
            if found is None:
                found = value.fake_mode
            elif value.fake_mode is not found:
                raise FakeTensorError("values hold fakes of two different FakeTensorModes")
    return found


class FakeTensorMode(TorchDispatchMode):
    """Inside `with FakeTensorMode() as mode:`, tensor operations make fakes instead of data.

    Factory calls (`torch.zeros(2, device="cuda")`) give fakes on the requested
    device; an op on fakes gives fakes. A real tensor mixed with fakes is
    converted to a fake (a constant) when `allow_non_fake_inputs` is True (the
    default) and is an error otherwise. An op without a meta kernel runs for
    real on zero-filled CPU tensors when `allow_fallback_kernels` is True (the
    default), its inputs are small CPU tensors and its output shape does not
    depend on values (see fake_fallback.py). With `cache_dispatch` (the
    default), output metadata of ops that make fresh tensors is cached by the
    inputs' metadata (see fake_cache.py); `mode.cache.hits` counts the reuse. `mode.from_real(t)` makes the fake of a
    real tensor, memoized: the same tensor gives the same fake, and views of
    one storage give views of one fake storage.

    Errors: `UnsupportedOpError` for an op without a meta kernel,
    `DataDependentError` for ops whose result depends on values (`.item()`,
    `nonzero`, ...), `FakeTensorError` for other misuse.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # NOTE: TorchDispatchMode's documented opt-out. Left True, torch wraps
        # `__torch_dispatch__` in its compiler-disabling wrapper, which imports torch's compiler
        # (about 1 s) at the mode's first dispatch; this mode never runs under
        # torch.compile, so there is nothing to disable.
        return False

    def __init__(
        self,
        *,
        allow_non_fake_inputs: bool = True,
        allow_fallback_kernels: bool = True,
        cache_dispatch: bool = True,
        shape_env: Any = None,
    ) -> None:
        super().__init__()
        from guards.fake_converter import FakeTensorConverter

        self.allow_non_fake_inputs = allow_non_fake_inputs
        self.allow_fallback_kernels = allow_fallback_kernels
        self.converter = FakeTensorConverter()
        self.shape_env = shape_env
        self._device_args: dict[Any, bool] = {}
        self.cache: DispatchCache | None = DispatchCache() if cache_dispatch else None
        self._dispatchers: list[contextlib.AbstractContextManager | None] = []

    def __enter__(self) -> FakeTensorMode:
        # Composite ops (matmul, ...) decompose before they reach __torch_dispatch__; some
        # torch versions do that in C++ code that reads sizes as ints, which would
        # specialize every symbolic size. The Python dispatcher runs torch's SymInt-aware
        # versions of those ops instead, as it does for every other compiler on torch.
        dispatcher = enable_python_dispatcher() if self.shape_env is not None else None
        if dispatcher is not None:
            dispatcher.__enter__()
        self._dispatchers.append(dispatcher)
        try:
            return super().__enter__()
        except BaseException:
            self._exit_dispatcher(None, None, None)
            raise

    def __exit__(self, *exc_info: Any) -> None:
        try:
            super().__exit__(*exc_info)
        finally:
            self._exit_dispatcher(*exc_info)

    def _exit_dispatcher(self, *exc_info: Any) -> None:
        dispatcher = self._dispatchers.pop()
        if dispatcher is not None:
            dispatcher.__exit__(*exc_info)

    def from_real(
        self, tensor: torch.Tensor, source: Any = None, dynamic_dims: Any = None
    ) -> FakeTensor:
        """The fake of real tensor `tensor` (memoized); `source` is recorded on a new fake.

        With a `shape_env` (`FakeTensorMode(shape_env=ShapeEnv())`), the dims in
        `dynamic_dims` and those marked with mark_dynamic / maybe_mark_dynamic get
        symbolic sizes (SymInts over the ShapeEnv's symbols, read at `source`).
        """
        return self.converter.from_real(self, tensor, source=source, dynamic_dims=dynamic_dims)

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: Any = None
    ) -> Any:
        if _other_dispatch_subclass(types):
            # NOTE: a traceable subclass over fakes (its fake: fake_converter): its own
            # `__torch_dispatch__` runs the op on its inner fakes, which come back here
            return NotImplemented
        return self.dispatch(func, args, kwargs or {})

    def dispatch(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Run `func` on fakes: convert real inputs, apply the op's rule or its meta kernel."""
        fakes: list[FakeTensor] = []

        def collect(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                value = self._as_fake(func, value)
                fakes.append(value)
            return value

        args = map_structure(collect, args)
        kwargs = {name: map_structure(collect, value) for name, value in kwargs.items()}
        if _views_an_inference_tensor(func, fakes):
            # NOTE: a view of an inference tensor is one, in inference mode or not; a
            # fake's kind is set when it is made, so the view is made in inference mode
            with torch.inference_mode():
                return self._run(func, args, kwargs, fakes)
        return self._run(func, args, kwargs, fakes)

    def _run(self, func: Any, args: tuple, kwargs: dict, fakes: list[FakeTensor]) -> Any:
        rule = fake_rule_for(func)
        if rule is not None:
            result = rule(self, func, args, kwargs)
            if result is not NotImplemented:
                return result
        return self._run_meta(func, args, kwargs, fakes)

    def _as_fake(self, func: Any, value: torch.Tensor) -> FakeTensor:
        if isinstance(value, FakeTensor):
            if value.fake_mode is not self:
                raise FakeTensorError(
                    f"{func} got fake tensors of two different FakeTensorModes; make every "
                    "fake of one compile with the same mode"
                )
            return value
        if not self.allow_non_fake_inputs:
            raise FakeTensorError(
                f"{func} got a real tensor (shape {tuple(value.shape)}, {value.dtype}) among "
                "fake tensors; convert it first with mode.from_real(t), or build the mode "
                "with FakeTensorMode(allow_non_fake_inputs=True)"
            )
        return self.converter.from_real(self, value)

    def _has_device_arg(self, func: Any) -> bool:
        known = self._device_args.get(func)
        if known is None:
            known = any(arg.name == "device" for arg in func._schema.arguments)
            self._device_args[func] = known
        return known

    def _output_device(
        self, func: Any, kwargs: dict, fakes: list[FakeTensor]
    ) -> tuple[torch.device | None, dict]:
        """The device requested by a `device` argument (None: decide from inputs), and
        the kwargs for the meta kernel."""
        if not self._has_device_arg(func):
            return None, kwargs
        device = None
        requested = kwargs.get("device")
        if requested is not None:
            device = _with_index(torch.device(requested))
        elif not fakes:
            device = _CPU
        if requested is not None or not fakes or kwargs.get("pin_memory"):
            kwargs = dict(kwargs)
            if requested is not None or not fakes:
                kwargs["device"] = _META
            if kwargs.get("pin_memory"):
                kwargs["pin_memory"] = False
        return device, kwargs

    def _wrap(self, value: Any, device: torch.device) -> Any:
        if isinstance(value, OutputSpec):
            return FakeTensor(self, value.make(), device)
        return value

    def _run_meta(self, func: Any, args: tuple, kwargs: dict, fakes: list[FakeTensor]) -> Any:
        device, meta_kwargs = self._output_device(func, kwargs, fakes)
        key = None
        if self.cache is not None and self.cache.cacheable(func):
            key = self.cache.key(func, args, kwargs)
            template = self.cache.lookup(key) if key is not None else None
            if template is not None:
                if device is None:
                    device = _common_device(func, fakes)
                return map_structure(lambda value: self._wrap(value, device), template)
        meta_args = map_structure(_meta_of, args)
        meta_kwargs = {name: map_structure(_meta_of, value) for name, value in meta_kwargs.items()}
        try:
            with enable_python_dispatcher():
                out = func(*meta_args, **meta_kwargs)
        except NotImplementedError as error:
            if self.allow_fallback_kernels and device is None and can_fall_back(func, fakes):
                return run_fallback(self, func, args, kwargs)
            raise UnsupportedOpError(
                f"{func} has no meta kernel, so fake tensors cannot compute its output "
                f"metadata ({error}). Register one with torch.library.register_fake, or "
                "keep this op out of the compiled region.",
                op=str(func),
            ) from error
        if key is not None:
            self.cache.store(key, out)
        return self._wrap_outputs(func, out, device, fakes)

    def _wrap_outputs(
        self, func: Any, out: Any, device: torch.device | None, fakes: list[FakeTensor]
    ) -> Any:
        """Meta outputs -> fakes: an input's own meta gives that input back (in-place, out=)."""
        by_meta = {id(fake.meta): fake for fake in fakes}

        def wrap(value: Any) -> Any:
            nonlocal device
            if not isinstance(value, torch.Tensor):
                return value
            existing = by_meta.get(id(value))
            if existing is not None:
                _sync_metadata(existing)
                return existing
            if device is None:
                device = _common_device(func, fakes)
            return FakeTensor(self, value, device)

        return map_structure(wrap, out)


def _views_an_inference_tensor(func: Any, fakes: list[FakeTensor]) -> bool:
    """Whether `func` returns a view of its inputs (outside inference mode) and one of
    them is an inference tensor."""
    if torch.is_inference_mode_enabled() or not any(f.is_inference() for f in fakes):
        return False
    returns = getattr(getattr(func, "_schema", None), "returns", ())
    return any(r.alias_info is not None and not r.alias_info.is_write for r in returns)


def _meta_of(value: Any) -> Any:
    return value.meta if isinstance(value, FakeTensor) else value


def _with_index(device: torch.device) -> torch.device:
    """`cuda` -> `cuda:<current index>`, as eager places a tensor asked for on `cuda`."""
    if device.index is not None or device.type in ("cpu", "meta"):
        return device
    module = getattr(torch, device.type, None)
    current = getattr(module, "current_device", None)
    if current is None or not getattr(module, "is_available", lambda: False)():
        return torch.device(device.type, 0)
    return torch.device(device.type, current())


def _common_device(func: Any, fakes: list[FakeTensor]) -> torch.device:
    """The device of an op's new outputs: the common device of its inputs, as eager decides."""
    device = None
    cpu_scalar = False
    for fake in fakes:
        current = fake.device
        if device is None:
            device, cpu_scalar = current, fake.dim() == 0 and current.type == "cpu"
        elif current != device:
            if fake.dim() == 0 and current.type == "cpu":
                continue
            if cpu_scalar:
                device, cpu_scalar = current, False
            elif func not in MIXED_DEVICE_OPS:
                raise FakeTensorError(
                    f"{func}: expected all tensors to be on the same device, but found at "
                    f"least two devices, {device} and {current} (as eager PyTorch would say)"
                )
    return device if device is not None else _CPU


def _sync_metadata(fake: FakeTensor) -> None:
    """After an in-place op or out=, make the wrapper's sizes and strides match its meta."""
    meta = fake.meta
    if (
        fake.shape == meta.shape
        and fake.stride() == meta.stride()
        and fake.storage_offset() == meta.storage_offset()
    ):
        return
    nbytes = meta.untyped_storage().nbytes()
    try:
        storage = torch._C._construct_storage_from_data_pointer(0, fake.device, nbytes)
        with no_dispatch(), torch.no_grad(), torch._C._AutoDispatchBelowADInplaceOrView():
            torch.Tensor.set_(fake, storage, meta.storage_offset(), meta.shape, meta.stride())
    except RuntimeError as error:
        raise UnsupportedOpError(
            f"cannot resize a fake tensor on {fake.device} in place on this machine ({error})",
            op="resize",
        ) from error
