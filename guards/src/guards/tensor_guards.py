"""Guards on tensors: metadata match, and no aliasing between tensor inputs.

TENSOR_MATCH checks the exact tensor class, dtype, device, requires_grad,
sizes, strides and the dispatch-relevant flags (inference tensor, conjugate
and negative bits of complex tensors). Strides are compared where they matter
for indexing: at dimensions whose size is not 1, and not at all for an empty
tensor (which is what `Tensor.is_contiguous()` computes for contiguous strides,
so a contiguous tensor is checked with that one call). A size of None is a
dynamic dimension: it is not checked here (the shape environment checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch

from guards.guard_kinds import Guard, GuardCode, _type_name
from guards.sources import Source

__all__ = [
    "NoTensorAliasingGuard",
    "as_plain_tensor",
    "has_own_torch_function",
    "TensorMatchGuard",
    "held",
    "strides_match",
    "with_real_examples",
    "without_example",
]

_CPU = torch.device("cpu")


def strides_match(
    sizes: tuple[int, ...], actual: tuple[int, ...], expected: tuple[int | None, ...]
) -> bool:
    """Strides equal at every dimension of size other than 1; anything goes when empty."""
    if 0 in sizes:
        return True
    return all(
        size == 1 or want is None or have == want
        for size, have, want in zip(sizes, actual, expected, strict=True)
    )


def _contiguous_strides(sizes: tuple[int, ...]) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(sizes):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


def _dead() -> None:
    return None


_DEFAULT_TORCH_FUNCTIONS = (
    torch.Tensor.__torch_function__.__func__,  # type: ignore[attr-defined]
    torch._C._disabled_torch_function_impl,
)


def as_plain_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` as a torch.Tensor alias (same storage, metadata and autograd history)."""
    return tensor.as_subclass(torch.Tensor)


def has_own_torch_function(kind: type) -> bool:
    """A tensor subclass defining its own `__torch_function__`: reading its metadata
    (`t.shape`, `t.stride()`) runs that override, so guards read it with subclass
    handling off, or on a plain alias (`as_plain_tensor`)."""
    if kind is torch.Tensor or not (isinstance(kind, type) and issubclass(kind, torch.Tensor)):
        return False
    handler = getattr(kind, "__torch_function__", None)
    return getattr(handler, "__func__", handler) not in _DEFAULT_TORCH_FUNCTIONS


def held(tensor: Any) -> Callable[[], Any]:
    """`example` for a guard built on `tensor`: a strong reference, not a weak one.

    NOTE: a weak reference on a tensor makes `torch.utils.swap_tensors` refuse it (and
    with it `module.to()` under `set_swap_module_params_on_conversion(True)` and
    FSDP2-style parameter swaps). The example is needed only while the guard set is
    built and filtered (guard filters see it as `entry.value`); `GuardSet.compile`
    keeps its guards without it (`without_example`), so no compiled entry keeps a
    user's tensor alive through its guards.
    """
    return lambda: tensor


def without_example(guard: Any) -> Any:
    """`guard`, without the tensor it was built on (see `held`)."""
    if isinstance(guard, TensorMatchGuard) and guard.example is not _dead:
        return replace(guard, example=_dead)
    return guard


@dataclass(frozen=True, slots=True)
class TensorMatchGuard(Guard):
    """A tensor with the same class, dtype, device, requires_grad, sizes and strides.

    Build with `TensorMatchGuard.of(source, tensor)` (a real tensor or a
    FakeTensor); `dynamic_dims` leaves those sizes unchecked.

    `trust_identity` marks a guard whose value is a parameter or buffer (the
    default for nn.Parameter values and parameter/buffer sources), built on the
    real tensor (a fake's is found when the set is compiled). Its check is the full one: the very object seen at
    compile time is not trusted, since `requires_grad_()`, `module.half()`,
    `.data = other` and in-place `t_()` / `set_()` change requires_grad, dtype,
    device, sizes or strides of the same object (`.data = ` and
    `requires_grad_()` without bumping its version counter).
    """

    tensor_type: type
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool
    sizes: tuple[int | None, ...]
    strides: tuple[int | None, ...]
    is_inference: bool = False
    is_conj: bool = False
    is_neg: bool = False
    trust_identity: bool = False
    example: Callable[[], Any] = field(default=_dead, compare=False, repr=False)
    trust_requested: bool = field(default=False, compare=False, repr=False)

    guard_type: ClassVar[str] = "TENSOR_MATCH"
    derived_guard_types: ClassVar[tuple[str, ...]] = ("TYPE_MATCH",)
    rank: ClassVar[int] = 20

    @classmethod
    def of(
        cls,
        source: Source,
        tensor: torch.Tensor,
        dynamic_dims: tuple[int, ...] = (),
        trust_identity: bool | None = None,
    ) -> TensorMatchGuard:
        """The guard for `tensor` at `source`; a FakeTensor stands for its real class.

        `trust_identity=None` means: trust it for parameters and buffers (see the class).
        """
        from guards.fake_tensor import FakeTensor
        from guards.sources import ParamBufferSource

        if isinstance(tensor, FakeTensor):
            tensor_type: type = torch.nn.Parameter if tensor.is_parameter else torch.Tensor
        else:
            tensor_type = type(tensor)
        if has_own_torch_function(tensor_type):
            # NOTE: the metadata is read without running the subclass's override
            with torch._C.DisableTorchFunctionSubclass():
                plain = cls.of(source, tensor.as_subclass(torch.Tensor), dynamic_dims, False)
            return replace(
                plain, tensor_type=tensor_type, example=held(tensor), trust_requested=False
            )
        is_inference = tensor.is_inference()  # a fake is one where its real tensor is
        # NOTE: symbolic sizes (SymInts of a ShapeEnv) are checked by the ShapeGuard.
        symbolic = tuple(d for d, size in enumerate(tensor.shape) if not isinstance(size, int))
        dynamic_dims = tuple(dynamic_dims) + symbolic
        sizes: tuple[int | None, ...] = tuple(
            None if dim in dynamic_dims else int(size) for dim, size in enumerate(tensor.shape)
        )
        if dynamic_dims:
            strides: tuple[int | None, ...] = tuple(None for _ in tensor.stride())
        else:
            strides = tuple(int(s) for s in tensor.stride())
        example = held(tensor)
        if trust_identity is None:
            trust_identity = tensor_type is torch.nn.Parameter or isinstance(
                source, ParamBufferSource
            )
        # NOTE: a fake's real tensor is found when the set is compiled (with_real_examples).
        trust = bool(trust_identity) and not isinstance(tensor, FakeTensor)
        return cls(
            source,
            tensor_type,
            tensor.dtype,
            tensor.device,
            bool(tensor.requires_grad),
            sizes,
            strides,
            is_inference,
            bool(tensor.is_conj()),
            bool(tensor.is_neg()),
            trust,
            example,
            bool(trust_identity),
        )

    @property
    def _complex(self) -> bool:
        return self.dtype.is_complex

    def failure(self, value: Any) -> str | None:
        name = self.source.name
        if type(value) is not self.tensor_type:
            return (
                f"{name!r} type mismatch: expected {_type_name(self.tensor_type)}, "
                f"actual {_type_name(type(value))}"
            )
        if has_own_torch_function(self.tensor_type):
            with torch._C.DisableTorchFunctionSubclass():  # metadata, not the override
                return self._metadata_failure(name, value)
        return self._metadata_failure(name, value)

    def _metadata_failure(self, name: str, value: Any) -> str | None:
        if value.dim() != len(self.sizes):
            return (
                f"tensor {name!r} number of dimensions mismatch: expected {len(self.sizes)}, "
                f"actual {value.dim()}"
            )
        for index, (want, have) in enumerate(zip(self.sizes, value.shape, strict=True)):
            if want is not None and want != have:
                return (
                    f"tensor {name!r} size mismatch at index {index}: expected {want}, "
                    f"actual {have}"
                )
        if value.dtype != self.dtype:
            return f"tensor {name!r} dtype mismatch: expected {self.dtype}, actual {value.dtype}"
        if value.device != self.device:
            return f"tensor {name!r} device mismatch: expected {self.device}, actual {value.device}"
        if value.requires_grad != self.requires_grad:
            return (
                f"tensor {name!r} requires_grad mismatch: expected {self.requires_grad}, "
                f"actual {value.requires_grad}"
            )
        if not strides_match(tuple(value.shape), value.stride(), self.strides):
            # NOTE: as torch's reason, the first dimension whose stride differs
            index, want, have = next(
                (index, want, have)
                for index, (size, have, want) in enumerate(
                    zip(value.shape, value.stride(), self.strides, strict=True)
                )
                if size != 1 and want is not None and have != want
            )
            return (
                f"tensor {name!r} stride mismatch at index {index}: expected {want}, "
                f"actual {have} (strides {tuple(self.strides)} expected, {value.stride()} passed)"
            )
        return self._flags_failure(name, value)

    def _flags_failure(self, name: str, value: torch.Tensor) -> str | None:
        checks = [("inference tensor", value.is_inference(), self.is_inference)]
        if self._complex:
            checks += [
                ("conjugate bit", value.is_conj(), self.is_conj),
                ("negative bit", value.is_neg(), self.is_neg),
            ]
        for what, have, want in checks:
            if have != want:
                return f"tensor {name!r} {what} mismatch: expected {want}, actual {have}"
        return None

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        v = names[0]
        kind = f"type({v}) is {code.const(self.tensor_type, 'type')}"
        if has_own_torch_function(self.tensor_type):
            # NOTE: metadata read on a plain alias: on the tensor itself each read would
            # run the subclass's Python override (and its side effects) every call
            v = f"{code.const(as_plain_tensor, 'as_plain_tensor')}({v})"
        first = [kind, self._sizes_expr(v)]
        rest = [
            f"{v}.dtype is {code.const(self.dtype, 'dtype')}",
            f"{v}.is_cpu"
            if self.device == _CPU
            else f"{v}.device == {code.const(self.device, 'device')}",
            f"{v}.requires_grad" if self.requires_grad else f"not {v}.requires_grad",
        ]
        rest += self._strides_exprs(v, code)
        # NOTE: reading `_version` raises for an inference tensor (the generated
        # function then returns False) and is about twice as cheap as is_inference().
        rest.append(f"{v}.is_inference()" if self.is_inference else f"{v}._version >= 0")
        if self._complex:
            rest.append(f"{v}.is_conj()" if self.is_conj else f"not {v}.is_conj()")
            rest.append(f"{v}.is_neg()" if self.is_neg else f"not {v}.is_neg()")
        return [(self.rank, " and ".join(first)), (self.rank + 5, " and ".join(rest))]

    def _sizes_expr(self, v: str) -> str:
        if all(size is not None for size in self.sizes):
            return f"{v}.shape == {tuple(self.sizes)!r}"
        checks = [f"{v}.dim() == {len(self.sizes)}"]
        checks += [f"{v}.size({i}) == {s}" for i, s in enumerate(self.sizes) if s is not None]
        return " and ".join(checks)

    def _strides_exprs(self, v: str, code: GuardCode) -> list[str]:
        sizes = self.sizes
        if any(size is None for size in sizes):
            if all(stride is None for stride in self.strides):
                return []
            match = code.const(strides_match, "strides_match")
            return [f"{match}(tuple({v}.shape), {v}.stride(), {self.strides!r})"]
        if 0 in sizes:
            return []
        static_sizes = tuple(int(s) for s in sizes if s is not None)
        relevant = [(i, s) for i, s in enumerate(self.strides) if static_sizes[i] != 1]
        contiguous = _contiguous_strides(static_sizes)
        if all(s == contiguous[i] for i, s in relevant):
            return [f"{v}.is_contiguous()"]
        if len(relevant) == len(sizes):
            return [f"{v}.stride() == {tuple(self.strides)!r}"]
        return [f"{v}.stride({i}) == {s}" for i, s in relevant]

    def describe(self) -> str:
        sizes = tuple("?" if size is None else size for size in self.sizes)
        grad = " requires_grad" if self.requires_grad else ""
        trust = " (parameter or buffer)" if self.trust_identity else ""
        dtype = str(self.dtype).removeprefix("torch.")
        return (
            f"{self.guard_type}: {self.source.expr} {self.tensor_type.__name__} {dtype} "
            f"{self.device} size={sizes} stride={self.strides}{grad}{trust}"
        )

    @property
    def has_value(self) -> bool:
        return self.example() is not None

    @property
    def value(self) -> Any:
        return self.example()


def with_real_examples(guards: list[Any]) -> list[Any]:
    """`guards`, with each tensor guard that asked to trust identity but was built on a
    FakeTensor rebuilt on the real tensor that fake stands for (found through the fake
    mode's converter), when that tensor is alive and still matches the guard."""
    from guards.fake_tensor import FakeTensor

    reals: dict[int, tuple[Any, dict[int, Any]]] = {}
    result = []
    for guard in guards:
        if (
            isinstance(guard, TensorMatchGuard)
            and guard.trust_requested
            and not guard.trust_identity
        ):
            fake = guard.example()
            real = _real_of(fake, reals) if isinstance(fake, FakeTensor) else None
            if real is not None and guard.failure(real) is None:
                guard = replace(guard, trust_identity=True, example=held(real))
        result.append(guard)
    return result


def _real_of(fake: Any, reals: dict[int, tuple[Any, dict[int, Any]]]) -> Any:
    """The real tensor `fake` was made from, or None (one index per converter and call)."""
    converter = fake.fake_mode.converter
    entry = reals.get(id(converter))
    if entry is None:
        index = {id(made): real for real, made in converter.pairs()}
        entry = reals[id(converter)] = (converter, index)
    return entry[1].get(id(fake))


def _storage_id_fallback(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


storage_id: Callable[[torch.Tensor], int] = getattr(torch._C, "_storage_id", _storage_id_fallback)


@dataclass(frozen=True, slots=True)
class NoTensorAliasingGuard(Guard):
    """The tensors at `source` and `others` have pairwise distinct storages.

    The graph was traced assuming they do not alias; an input pair sharing a
    storage (e.g. `f(x, x)` after compiling `f(x, y)`) must not reuse it.
    """

    others: tuple[Source, ...] = ()

    guard_type: ClassVar[str] = "NO_TENSOR_ALIASING"
    rank: ClassVar[int] = 60

    @classmethod
    def of(cls, sources: tuple[Source, ...] | list[Source]) -> NoTensorAliasingGuard:
        """The guard that the tensors at `sources` (two or more) share no storage."""
        sources = tuple(sources)
        if len(sources) < 2:
            raise ValueError("NoTensorAliasingGuard needs at least two sources")
        return cls(sources[0], sources[1:])

    def sources(self) -> tuple[Source, ...]:
        return (self.source, *self.others)

    def failure(self, *values: Any) -> str | None:
        seen: dict[int, Source] = {}
        for source, value in zip(self.sources(), values, strict=True):
            key = storage_id(value)
            if key in seen:
                return (
                    f"tensors {seen[key].name!r} and {source.name!r} share storage but the "
                    "compiled code assumed they do not alias"
                )
            seen[key] = source
        return None

    def emit(self, names: tuple[str, ...], code: GuardCode) -> list[tuple[int, str]]:
        sid = code.const(storage_id, "storage_id")
        ids = ", ".join(f"{sid}({name})" for name in names)
        return [(self.rank, f"len({{{ids}}}) == {len(names)}")]

    def describe(self) -> str:
        return f"{self.guard_type}: {', '.join(s.expr for s in self.sources())}"
