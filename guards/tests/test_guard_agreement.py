"""The generated guard function agrees with the slow reference checker on random frames."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guards import GlobalSource, GuardSet, ItemSource, LocalSource, Source

DTYPES = [torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64]


@st.composite
def tensors(draw):
    shape = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=3)))
    dtype = draw(st.sampled_from(DTYPES))
    tensor = torch.zeros(shape, dtype=dtype)
    layout = draw(st.sampled_from(["contiguous", "transposed", "sliced", "expanded"]))
    if layout == "transposed" and tensor.dim() >= 2:
        tensor = torch.zeros(shape[::-1], dtype=dtype).transpose(0, -1)
        tensor = tensor if tensor.shape == shape else torch.zeros(shape, dtype=dtype)
    elif layout == "sliced" and tensor.dim() >= 1:
        tensor = torch.zeros((shape[0] * 2, *shape[1:]), dtype=dtype)[::2]
    elif layout == "expanded" and tensor.dim() >= 1:
        tensor = torch.zeros((1, *shape[1:]), dtype=dtype).expand(shape)
    if dtype.is_complex and draw(st.booleans()):
        tensor = tensor.conj()
    if dtype.is_floating_point and draw(st.booleans()):
        tensor = tensor.detach().requires_grad_(True)
    if draw(st.booleans()) and dtype.is_floating_point:
        tensor = torch.nn.Parameter(tensor.detach().clone())
    return tensor


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, 1.0, -2.5, float("nan"), float("inf")]),
    st.sampled_from(["a", "b", ""]),
    st.sampled_from([torch.float32, torch.int64]),
    st.sampled_from([torch.device("cpu"), torch.device("meta")]),
)
constants = st.recursive(
    scalars, lambda inner: st.tuples(inner, inner) | st.tuples(inner), max_leaves=4
)
MODULES = [torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.ReLU())]
FUNCTIONS = [torch.relu, torch.sigmoid, len]
objects = st.sampled_from(MODULES + FUNCTIONS)
values = st.one_of(
    constants,
    objects,
    objects,
    tensors(),
    st.lists(tensors(), min_size=0, max_size=3),
    st.dictionaries(st.sampled_from(["k", "v", "w"]), st.integers(0, 2), max_size=3),
)
NAMES = ["a", "b", "c", "d"]


def _guard(guards: GuardSet, source: Source, value) -> None:
    """Guard `value` the way capture would, by its type."""
    if isinstance(value, torch.Tensor):
        guards.add_tensor(source, value)
    elif isinstance(value, torch.nn.Module):
        guards.add_nn_module(source, value)
        for name in ("weight", "0", "missing"):
            guards.add_has_attr(source, name, hasattr(value, name))
    elif callable(value):
        guards.add_id(source, value)
    elif isinstance(value, list):
        guards.add_length(source, value)
        for index, item in enumerate(value):
            _guard(guards, ItemSource(source, index), item)
    elif isinstance(value, dict):
        guards.add_dict_keys(source, value)
        for key, item in value.items():
            guards.add_equals(ItemSource(source, key), item)
    else:
        guards.add_equals(source, value)


@dataclass
class Retrain:
    """Set a module's training flag after the guards are built, then pass the module."""

    module: torch.nn.Module
    training: bool

    def apply(self) -> torch.nn.Module:
        return self.module.train(self.training)


def _relayout(tensor: torch.Tensor, how: str) -> torch.Tensor:
    """A tensor with `tensor`'s shape and dtype but another memory layout."""
    shape, dtype = tuple(tensor.shape), tensor.dtype
    if how == "reversed" and tensor.dim() >= 2:
        return torch.zeros(shape[::-1], dtype=dtype).permute(*reversed(range(tensor.dim())))
    if how == "padded" and tensor.dim() >= 1:
        return torch.zeros((*shape[:-1], shape[-1] + 1), dtype=dtype)[..., : shape[-1]]
    if how == "expanded" and tensor.dim() >= 1:
        return torch.zeros((1, *shape[1:]), dtype=dtype).expand(shape)
    return torch.zeros(shape, dtype=dtype)


@st.composite
def variants(draw, value):
    """`value`, or something close to it that differs in one way guards may notice."""
    if isinstance(value, torch.nn.Module) and draw(st.integers(0, 3)):
        return Retrain(value, draw(st.booleans()))
    if not isinstance(value, torch.Tensor):
        return value if draw(st.booleans()) else draw(values)
    how = draw(st.sampled_from(["same", "other", "reversed", "padded", "expanded", "fresh",
                                "grad", "dtype", "inference", "conj", "parameter"]))  # fmt: skip
    base = value.detach()
    if how == "same":
        return value
    if how == "other":
        return draw(values)
    if how in ("reversed", "padded", "expanded", "fresh"):
        return _relayout(base, how)
    if how == "grad" and base.dtype.is_floating_point:
        return base.clone().requires_grad_(not value.requires_grad)
    if how == "dtype":
        return torch.zeros(
            base.shape, dtype=torch.float16 if base.dtype != torch.float16 else torch.float32
        )
    if how == "inference":
        with torch.inference_mode():
            return torch.zeros(base.shape, dtype=base.dtype)
    if how == "conj" and base.dtype.is_complex:
        return base.clone().conj()
    if how == "parameter" and base.dtype.is_floating_point:
        return torch.nn.Parameter(base.clone()) if type(value) is torch.Tensor else base.clone()
    return value


@st.composite
def frames(draw):
    compile_locals = {name: draw(values) for name in NAMES}
    compile_globals = {"W": draw(tensors())}
    # change one or two values, so that the change is what decides the outcome
    changed = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=2))
    run_locals = {
        name: draw(variants(value)) if name in changed else value
        for name, value in compile_locals.items()
    }
    if draw(st.booleans()):
        run_locals.pop(draw(st.sampled_from(NAMES)))
    run_globals = {"W": draw(variants(compile_globals["W"]))}
    alias = draw(st.booleans())
    return compile_locals, compile_globals, run_locals, run_globals, alias


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames())
def test_generated_function_agrees_with_reference(frame):
    compile_locals, compile_globals, run_locals, run_globals, alias = frame
    for module in MODULES:
        module.train(True)
    guards = GuardSet()
    for name, value in compile_locals.items():
        _guard(guards, LocalSource(name), value)
    _guard(guards, GlobalSource("W"), compile_globals["W"])
    guards.add_global_state()
    tensor_sources = [
        LocalSource(n) for n, v in compile_locals.items() if isinstance(v, torch.Tensor)
    ]
    guards.add_no_aliasing([*tensor_sources, GlobalSource("W")])
    if alias and tensor_sources:
        run_locals[tensor_sources[0].local_name] = run_globals["W"]
    compiled = guards.compile()
    assert compiled(compile_locals, compile_globals)
    assert compiled.why_failed(compile_locals, compile_globals) is None
    for name, value in run_locals.items():
        if isinstance(value, Retrain):
            run_locals[name] = value.apply()
    ok = compiled(run_locals, run_globals)
    why = compiled.why_failed(run_locals, run_globals)
    assert ok == (why is None), (why, compiled.source)
