"""Run OpInfo samples eagerly and through a decomposition table, and compare.

Shared by the OpInfo tests and the full sweep (EMBER_FULL_OPINFO=1).
"""

from __future__ import annotations

import dataclasses
import enum

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils import _pytree as pytree

from prim_decomp import DecompositionMode

# Ops whose results depend on random numbers: only metadata is compared.
RANDOM_WORDS = ("dropout", "rand", "bernoulli", "normal", "uniform", "multinomial", "rrelu")
# Ops whose results are uninitialized memory: only metadata is compared.
UNINITIALIZED_WORDS = ("empty",)
SAMPLES_PER_DTYPE = 6  # samples that reach the table, per dtype
MAX_SAMPLES_TRIED = 40
# OpInfos whose function reaches ATen ops named differently from `aten_name`.
ATEN_NAMES = {
    "nn.functional.interpolate": ["upsample_nearest2d", "upsample_bilinear2d"],
}


class Outcome(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_COVERED = "not covered"  # no op of the sample was in the table


@dataclasses.dataclass
class Result:
    name: str
    outcome: Outcome
    decomposed: set
    message: str = ""


def opinfos(names: list[str] | None = None) -> list:
    if names is None:
        return list(op_db)
    wanted = set(names)
    return [op for op in op_db if _key(op) in wanted]


def _key(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def dtypes_for(op) -> list[torch.dtype]:
    supported = op.supported_dtypes("cpu")
    return [d for d in (torch.float32, torch.float64, torch.bfloat16) if d in supported]


_DEFAULT_TOLERANCES = {
    torch.bfloat16: (2e-2, 2e-2),
    torch.float32: (2e-5, 2e-5),
    torch.float64: (1e-7, 1e-7),
}


def opinfo_tolerances(op, dtype: torch.dtype) -> dict:
    """The loosest of our default and every toleranceOverride the OpInfo declares for dtype."""
    atol, rtol = _DEFAULT_TOLERANCES[dtype]
    for info in getattr(op, "decorators", ()):
        for decorator in getattr(info, "decorators", [info]) or ():
            overrides = getattr(decorator, "d", None)
            if not isinstance(overrides, dict) or dtype not in overrides:
                continue
            value = overrides[dtype]
            if isinstance(value, float):  # precisionOverride: an atol alone
                atol = max(atol, value)
            else:
                atol, rtol = max(atol, value.atol), max(rtol, value.rtol)
    return {"atol": atol, "rtol": rtol}


def _compare(expected, actual, tolerances: dict, metadata_only: bool) -> None:
    flat_expected = pytree.tree_leaves(expected)
    flat_actual = pytree.tree_leaves(actual)
    assert len(flat_expected) == len(flat_actual), "different number of outputs"
    for e, a in zip(flat_expected, flat_actual, strict=True):
        if not isinstance(e, torch.Tensor):
            if not metadata_only:
                torch.testing.assert_close(a, e, **tolerances, equal_nan=True)
            continue
        assert isinstance(a, torch.Tensor), f"expected a tensor, got {type(a).__name__}"
        assert a.shape == e.shape, f"shape {tuple(a.shape)} != {tuple(e.shape)}"
        assert a.dtype == e.dtype, f"dtype {a.dtype} != {e.dtype}"
        if not metadata_only:
            torch.testing.assert_close(a, e, **tolerances, equal_nan=True)


def run_sample(op, sample, table, dtype) -> tuple[set, str | None]:
    """(decomposed ops, failure message or None) for one sample."""
    words = RANDOM_WORDS + UNINITIALIZED_WORDS
    metadata_only = any(word in op.name for word in words)
    torch.manual_seed(0)
    try:
        expected = op(sample.input, *sample.args, **sample.kwargs)
    except Exception:  # noqa: BLE001 (a sample eager rejects says nothing of the table)
        return set(), None
    mode = DecompositionMode(table)
    torch.manual_seed(0)
    try:
        with mode:
            actual = op(sample.input, *sample.args, **sample.kwargs)
        if mode.decomposed_ops:
            _compare(expected, actual, opinfo_tolerances(op, dtype), metadata_only)
    except Exception as error:  # noqa: BLE001 (the sweep reports every failure)
        return set(mode.decomposed_ops), f"{type(error).__name__}: {str(error)[:300]}"
    return set(mode.decomposed_ops), None


def composite_implicit_rules(op, table) -> list:
    """Overloads of the OpInfo's ATen op that the table holds and that eager
    dispatch decomposes before any mode sees them (CompositeImplicitAutograd)."""
    names = ATEN_NAMES.get(op.name, [op.aten_name or ""])
    packets = [getattr(torch.ops.aten, name, None) for name in names]
    found = []
    for packet, name in [(p, n) for p in packets if p is not None for n in p.overloads()]:
        try:
            overload = getattr(packet, name)
            has_cia = torch._C._dispatch_has_kernel_for_dispatch_key(
                overload.name(), "CompositeImplicitAutograd"
            )
        except RuntimeError:  # listed, but not registered in this build
            continue
        if overload in table and has_cia:
            found.append(overload)
    return found


def run_composite_sample(op, sample, table, dtype, overloads) -> tuple[set, str | None]:
    """Call the first overload that accepts the sample, eagerly and through its rule."""
    args = (sample.input, *sample.args)
    for overload in overloads:
        torch.manual_seed(0)
        try:
            expected = overload(*args, **sample.kwargs)
        except Exception:  # noqa: BLE001 (the sample does not fit this overload)
            continue
        mode = DecompositionMode(table)
        torch.manual_seed(0)
        try:
            with mode:
                actual = table[overload](*args, **sample.kwargs)
            metadata_only = any(word in op.name for word in RANDOM_WORDS + UNINITIALIZED_WORDS)
            _compare(expected, actual, opinfo_tolerances(op, dtype), metadata_only)
        except Exception as error:  # noqa: BLE001
            return {overload}, f"{overload}: {type(error).__name__}: {str(error)[:300]}"
        return {overload} | set(mode.decomposed_ops), None
    return set(), None


def check_opinfo(op, table, samples_per_dtype: int = SAMPLES_PER_DTYPE) -> Result:
    decomposed: set = set()
    composite = composite_implicit_rules(op, table)
    for dtype in dtypes_for(op):
        samples = op.sample_inputs("cpu", dtype, requires_grad=False)
        covered = 0
        for index, sample in enumerate(samples):
            if covered >= samples_per_dtype or index >= MAX_SAMPLES_TRIED:
                break
            ops, failure = run_sample(op, sample, table, dtype)
            if failure is None and composite:
                more, failure = run_composite_sample(op, sample, table, dtype, composite)
                ops |= more
            decomposed |= ops
            covered += bool(ops)
            if failure is not None:
                where = f"{dtype} sample {index}"
                return Result(_key(op), Outcome.FAIL, decomposed, f"{where}: {failure}")
    outcome = Outcome.PASS if decomposed else Outcome.NOT_COVERED
    return Result(_key(op), outcome, decomposed)


def leaf_ops(op, table, samples: int = 3) -> set:
    """The ops left running when the float32 samples run under the table."""
    found: set = set()
    for index, sample in enumerate(op.sample_inputs("cpu", torch.float32, requires_grad=False)):
        if index >= samples:
            break
        mode = DecompositionMode(table)
        with mode:
            op(sample.input, *sample.args, **sample.kwargs)
        found |= set(mode.leaf_ops)
    return found


def _grads(op, sample, cotangent_seed: int = 0):
    """(outputs, gradients of sum(output * cotangent) w.r.t. inputs needing grad)."""
    inputs = [t for t in pytree.tree_leaves((sample.input, sample.args, sample.kwargs))]
    inputs = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    out = op(sample.input, *sample.args, **sample.kwargs)
    outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs or not inputs:
        return out, None
    generator = torch.Generator().manual_seed(cotangent_seed)
    total = sum((o * torch.randn(o.shape, generator=generator, dtype=o.dtype)).sum() for o in outs)
    return out, torch.autograd.grad(total, inputs, allow_unused=True)


def check_opinfo_grad(op, table, samples_per_dtype: int = 3) -> Result:
    """Forward and backward of the float32/float64 samples, under the table and eagerly."""
    decomposed: set = set()
    for dtype in [d for d in dtypes_for(op) if d != torch.bfloat16]:
        samples = op.sample_inputs("cpu", dtype, requires_grad=True)
        for index, sample in enumerate(samples):
            if index >= samples_per_dtype:
                break
            torch.manual_seed(0)
            try:
                expected = _grads(op, sample)
            except Exception:  # noqa: BLE001 (a sample eager rejects says nothing of the table)
                continue
            mode = DecompositionMode(table)
            torch.manual_seed(0)
            try:
                with mode:
                    actual = _grads(op, sample)
                decomposed |= set(mode.decomposed_ops)
                if mode.decomposed_ops:
                    words = RANDOM_WORDS + UNINITIALIZED_WORDS
                    metadata_only = any(word in op.name for word in words)
                    _compare(expected, actual, opinfo_tolerances(op, dtype), metadata_only)
            except Exception as error:  # noqa: BLE001
                message = f"{dtype} sample {index}: {type(error).__name__}: {str(error)[:300]}"
                return Result(_key(op), Outcome.FAIL, decomposed, message)
    outcome = Outcome.PASS if decomposed else Outcome.NOT_COVERED
    return Result(_key(op), outcome, decomposed)
