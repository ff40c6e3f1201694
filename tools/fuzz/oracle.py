"""The differential oracle: a program under an ember backend against eager PyTorch.

`check_source(source, backend)` runs the program's calls (each call's inputs
built fresh, once for eager and once for the compiled function) and returns the
mismatches found, each a `Mismatch` of one kind:

| kind            | meaning                                                          | severity |
|-----------------|------------------------------------------------------------------|----------|
| `silent`        | a wrong result: output values, dtype, shape; an input's value or | worst    |
|                 | shape after the call (mutation); an input's grad                 |          |
| `missing_error` | eager raised, the compiled function returned                     | high     |
| `error`         | the compiled function raised where eager ran, or raised another  | medium   |
|                 | exception family than eager's                                    |          |
| `metadata`      | strides, storage aliasing or requires_grad differ                | low      |
| `precision`     | a value mismatch of a float16/bfloat16 program that vanishes     | lowest   |
|                 | when those dtypes are float32 (see `reclassify_precision`)       |          |

Rules (documented in README.md):
- values: exact for integer and bool tensors; `assert_close` with the
  tolerances of `TOLERANCES` and `equal_nan=True` for floats, so NaN and inf
  must sit at the same positions. The tolerance is that of the compared
  tensor's dtype or of the lowest-precision float dtype the program names
  (an input's dtype or a cast), whichever is looser: a float32 result computed
  through bfloat16 carries bfloat16's rounding, and compiled code may skip an
  intermediate rounding (as torch.compile does).
- strides: an output that is a view of an input in eager must be a view of the
  same input in the compiled result, with equal strides and storage offset;
  any other output must have eager's strides on dims of size > 1 (a promise
  ember makes, as torch.compile does for its outputs); zero-size outputs are
  not compared.
- gradients (programs with `GRAD = True`): backward of a weighted sum
  of every float output that requires grad; the grads of the inputs are
  compared like outputs. Where eager's backward raises (an input of the backward
  modified in place), grads are not compared.
- rounding: value mismatches where eager itself changes with the float dtype or with
  its inputs' layout (contiguous copies) are `precision` (`reclassify_rounding`,
  `reclassify_layout`; element by element for programs naming float16/bfloat16,
  `reclassify_rounding_by_element`); so are those of a program calling an eager kernel
  whose result depends on the element's position, where one of its formulas at every
  position gives the compiled result (`reclassify_eager_by_position`); and those that
  each statement explains on the compiled values before it, a float32 sum or mean
  within what some summation order gives (`reclassify_stepwise`).
- exceptions: where eager raises, the compiled function must raise an exception
  of the same family: its type, a cause or context of it, is an instance of the
  builtin base of eager's type (`RuntimeError`, `IndexError`, ...); the program's own
  exception class (user_code.py) must be raised with eager's message.
- outside state: where the program defines `reset_state()` / `outside_state()`
  (user_code.py), each call starts from a reset state and what `outside_state()` shows
  after it must equal eager's (`compare_states`), raising or not.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import itertools
import linecache
import logging
import re
import warnings
from dataclasses import dataclass

import torch

# (rtol, atol) by dtype; ints and bools compare exactly.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (5e-2, 5e-2),
}
EXCEPTION_FAMILIES = (
    ZeroDivisionError,
    IndexError,
    KeyError,
    TypeError,
    ValueError,
    NotImplementedError,
    RuntimeError,
    ArithmeticError,
    LookupError,
)
KINDS = ("silent", "missing_error", "error", "metadata", "precision")


@dataclass(frozen=True)
class Mismatch:
    """One difference between eager and a backend."""

    kind: str  # one of KINDS
    check: str  # what was compared: "value", "dtype", "stride", "backward", ...
    backend: str
    where: str  # "call 0 output 1", "call 1 grad x0", ...
    message: str

    def signature(self) -> tuple[str, str, str, str]:
        """What shrinking keeps reproducing: the kind, the check, the backend and, for
        exceptions, the start of the message with its numbers blanked (one bug, not any)."""
        fingerprint = ""
        if self.kind in ("error", "missing_error"):
            fingerprint = re.sub(r"\d+", "N", self.message)[:60]
        return (self.kind, self.check, self.backend, fingerprint)

    def describe(self) -> str:
        return f"[{self.kind}/{self.check}] {self.backend} {self.where}: {self.message}"


@dataclass
class Outcome:
    """What one call did: outputs, inputs after it, grads, or the exception raised."""

    inputs: list
    outputs: list | None = None
    error: BaseException | None = None
    grads: list | None = None
    backward_error: BaseException | None = None
    state: dict | None = None  # the program's outside_state() after the call, copied


# ---------------------------------------------------------------- running


_counter = itertools.count()


def load(source: str) -> dict:
    """Execute a program's source in a fresh namespace (its lines kept for tracebacks)."""
    filename = f"<fuzz-program-{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict = {"__name__": "fuzz_program"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def flatten(value) -> list:
    """Outputs as a flat list (tuples and lists opened, anything else one leaf)."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in flatten(item)]
    return [value]


def loss_of(outputs: list) -> torch.Tensor | None:
    """A weighted sum of every float output that requires grad (None when there is none)."""
    total = None
    for out in outputs:
        if isinstance(out, torch.Tensor) and out.requires_grad and out.is_floating_point():
            # Shifted off zero: weights summing to exactly 0 (a symmetric linspace) make the
            # grad of a broadcast reduction 0 * inf where a partial is infinite, and whether
            # eager's sum is exactly 0 depends on its summation order.
            weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64, device=out.device)
            weights = weights + 0.3
            weights = weights.reshape(out.shape)
            term = (out.double() * weights).sum()
            total = term if total is None else total + term
    return total


DEVICE = {"name": "cpu"}  # where inputs live: `fuzz.py --device cuda` moves them to the GPU


def on_device(x):
    """`x` moved to the fuzzing device, a leaf again when it required grad (CPU: as is)."""
    if DEVICE["name"] == "cpu" or not isinstance(x, torch.Tensor):
        return x
    return x.detach().to(DEVICE["name"]).requires_grad_(x.requires_grad)


def run_call(fn, namespace: dict, call: int, prepare=None) -> Outcome:
    """One call of `fn` on fresh inputs of `call`, then its backward where GRAD is set.
    `prepare`, where given, maps the list of inputs to the inputs the call gets."""
    if "set_state" in namespace:  # the state this call reads (guard_programs.py)
        namespace["set_state"](call)
    inputs = [on_device(x) for x in namespace["make_inputs"](call)]
    if prepare is not None:
        inputs = prepare(inputs)
    outcome = Outcome(inputs=inputs)
    if "reset_state" in namespace:  # the outside state as at import (user_code.py)
        namespace["reset_state"]()
    # Grad mode, autocast, default dtype, ... around the call (guard_programs.py)
    context = namespace["call_context"](call) if "call_context" in namespace else None
    try:
        with context or contextlib.nullcontext():
            outcome.outputs = flatten(fn(*inputs))
    except Exception as error:  # a raising program is an outcome to compare
        outcome.error = error
    if "outside_state" in namespace:
        outcome.state = snapshot(namespace["outside_state"]())
    if outcome.error is not None or not namespace.get("GRAD"):
        return outcome
    try:  # the loss itself may raise (a view made under no_grad, then restrided)
        loss = loss_of(outcome.outputs)
        if loss is not None:
            loss.backward()
            outcome.grads = [getattr(x, "grad", None) for x in inputs]
    except Exception as error:
        outcome.backward_error = error
    return outcome


def snapshot(value):
    """A copy of outside state: containers opened, tensors cloned, objects as their vars."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, torch.nn.Module):  # its flag and tensors, not its internals
        state = value.state_dict(keep_vars=False)
        return (type(value).__name__, {"training": value.training, **snapshot(dict(state))})
    if isinstance(value, torch.Size):  # compared item by item, whatever its items are
        return ("torch.Size", [snapshot(item) for item in value])
    if isinstance(value, dict):
        return {key: snapshot(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(snapshot(item) for item in value)
    if isinstance(value, (int, float, bool, str, complex, type(None))):
        return value
    if hasattr(value, "__dict__"):
        return (type(value).__name__, snapshot(vars(value)))
    return repr(value)


@contextlib.contextmanager
def quiet():
    """Silence warnings, ember's logs and the compilers' prints while a program runs."""
    logger = logging.getLogger("ember")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                yield
            finally:
                logger.setLevel(level)


def precision_floor(source: str) -> torch.dtype:
    """The lowest-precision float dtype a program's source names (float64 when none)."""
    methods = {torch.bfloat16: ".bfloat16()", torch.float16: ".half()", torch.float32: ".float()"}
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        if str(dtype) in source or methods[dtype] in source:
            return dtype
    return torch.float64


def check_source(source: str, backend: str, first_only: bool = False) -> list[Mismatch]:
    """Every mismatch between eager and `backend` over the program's calls."""
    mismatches = _differences(source, backend, first_only)
    mismatches = reclassify_precision(source, backend, mismatches)
    mismatches = reclassify_rounding(source, mismatches)
    mismatches = reclassify_rounding_by_element(source, backend, mismatches)
    mismatches = reclassify_layout(source, mismatches)
    mismatches = reclassify_eager_by_position(source, backend, mismatches)
    return reclassify_stepwise(source, backend, mismatches)


def _differences(
    source: str, backend: str, first_only: bool, eager_source: str | None = None
) -> list[Mismatch]:
    """Mismatches of the program compiled against eager (of `eager_source`, a respelling
    of the program, where given)."""
    import ember

    floor = precision_floor(source)
    eager_ns, compiled_ns = load(source if eager_source is None else eager_source), load(source)
    eager_ns.update(EAGER_FORMULAS)
    dynamic = compiled_ns.get("DYNAMIC")
    compiled = ember.compile(compiled_ns["program"], backend=backend, dynamic=dynamic)
    mismatches: list[Mismatch] = []
    with quiet():
        for call in range(len(eager_ns["DIMS"])):
            expected = run_call(eager_ns["program"], eager_ns, call)
            actual = run_call(compiled, compiled_ns, call)
            mismatches += compare_outcomes(expected, actual, backend, f"call {call}", floor)
            if mismatches and first_only:
                break
    return mismatches


LOW_PRECISION = ("torch.float16", "torch.bfloat16")
WIDENED = (*LOW_PRECISION, "torch.float32", "torch.float")  # spelled float64 for the check
# The casting methods naming those dtypes, widened with them (`.half()` is float32's
# `.float()`, and float64's `.double()`).
METHODS = {"torch.float32": ".float()", "torch.float64": ".double()"}
LOW_PRECISION_METHODS = (".half()", ".bfloat16()")
WIDENED_METHODS = (*LOW_PRECISION_METHODS, ".float()")
# NOTE: "shape" is here for data-dependent sizes: a boolean mask, `nonzero` or `unique`
# over a comparison that rounding flips. A shape never depends on the float dtype
# otherwise, and the verdict changes only when the float32 program matches entirely.
ROUNDING_CHECKS = ("value", "mutation_value", "grad_value", "shape")
# A branch decided by rounding can also leave an input out of what the outputs are computed
# from: its grad is then None on one side ("grad", only where eager's float32 and float64
# runs differ in the same way: `_rounding_sensitive_places`).
BRANCH_CHECKS = (*ROUNDING_CHECKS, "grad")
# The message of a mismatch `reclassify_rounding` made `precision` starts with this.
EAGER_ROUNDING = "eager float32 and float64 differ here: "
# What can make a size depend on values: a boolean mask (`x[x > 0]`), a value read into
# Python (`.item()`, `int(...)`, a branch), `nonzero`, `masked_select`, `unique`. A shape
# mismatch of a program without any of these is no rounding: it stays `silent` (a wrong
# size can vanish in the widened program for another reason, such as a stale cache entry).
DATA_DEPENDENT_SIZE = re.compile(
    r"\[[^\]\n]*[<>!=]=?[^\]\n]*\]|\b(\w+)\[\1\]|\.item\(\)|\b(?:int|float|bool)\(|\bif\b"
    r"|\bnonzero\b|\bmasked_select\b|\bunique|\.tolist\(\)"
)
# A float32 value off by more than its tolerance but within this one is "near" (the
# message says so): a candidate for the float64 check of `reclassify_precision`.
NEAR_TOLERANCE = (1e-3, 1e-3)
NEAR = "near: "
# A compiled NaN or inf where eager's whole tensor is finite and far from its dtype's
# largest value: no overflow or invalid operation happened in eager's chain, and skipping
# an intermediate rounding only makes values more exact, so this is never `precision`.
NONFINITE = "nonfinite: "


def _rounding_suspects(
    source: str, mismatches: list[Mismatch], checks: tuple[str, ...] = ROUNDING_CHECKS
) -> list[Mismatch]:
    """The silent mismatches rounding may explain: values, and sizes (and, with
    BRANCH_CHECKS, grads present on one side only) where the program computes sizes or
    branches from values (DATA_DEPENDENT_SIZE)."""
    sizes_from_values = DATA_DEPENDENT_SIZE.search(_program_body(source)) is not None
    return [
        m
        for m in mismatches
        if m.kind == "silent"
        and m.check in checks
        and (m.check not in ("shape", "grad") or sizes_from_values)
    ]


def reclassify_precision(source: str, backend: str, mismatches: list[Mismatch]) -> list[Mismatch]:
    """Value mismatches that vanish when the program computes in a wider dtype become `precision`.

    Two cases, each checked by running the program again with its dtypes widened:
    - float16/bfloat16 programs (spelled float32): compiled code computes such chains
      in float32 and may skip an intermediate rounding (as torch.compile does); a value
      computed near a rounding boundary (a cast to int, a comparison, pow of a negative
      base) can then differ by more than any tolerance.
    - float32 values that are near eager's (NEAR_TOLERANCE, the message starts with
      "near:") with every float spelled float64: a sum of many terms that cancel
      (a gradient summed over a broadcast) carries an error of the summation order, and
      compiled code sums in another order than eager's.
    A float16/bfloat16 program still differing in float32 is tried in float64 too.
    Only when the widened program shows no mismatch at all (but metadata) do the value
    mismatches become kind `precision`.
    """
    suspects = _rounding_suspects(source, mismatches)
    suspects = [m for m in suspects if not m.message.startswith(NONFINITE)]
    low = (*LOW_PRECISION, *LOW_PRECISION_METHODS)
    if suspects and any(name in source for name in low):
        found = _widened(source, backend, mismatches, suspects, LOW_PRECISION, "torch.float32")
        if found is not mismatches:
            return found
        # float32 may carry the summation-order error of the second case: try float64
        return _widened(source, backend, mismatches, suspects, WIDENED, "torch.float64")
    suspects = [m for m in suspects if m.check != "shape" and m.message.startswith(NEAR)]
    if suspects:
        return _widened(source, backend, mismatches, suspects, WIDENED, "torch.float64")
    return mismatches


def _widened(source, backend, mismatches, suspects, names, wider) -> list[Mismatch]:
    """`suspects` made `precision` when the program with `names` spelled `wider` matches."""
    widened = source
    for name in names:
        widened = re.sub(rf"{re.escape(name)}\b", wider, widened)
    methods = LOW_PRECISION_METHODS if wider == "torch.float32" else WIDENED_METHODS
    for method in methods:
        widened = widened.replace(method, METHODS[wider])
    try:
        again = _differences(widened, backend, False)
    except Exception:  # the widened program cannot run: keep the verdict
        return mismatches
    if any(m.kind != "metadata" for m in again):
        return mismatches  # still wrong, or the widening changed what runs: keep the verdict
    return [dataclasses.replace(m, kind="precision") if m in suspects else m for m in mismatches]


def reclassify_rounding(source: str, mismatches: list[Mismatch]) -> list[Mismatch]:
    """Value mismatches where eager itself depends on float32 rounding become `precision`.

    A float32 program can branch on a value that is zero up to rounding (`if
    layer_norm(x).sum() > 0`) or cast one near an integer: its result then
    depends on the order of a summation, which compiled code may change. The
    program is run eagerly again with float32 spelled float64: where eager's
    float32 result differs from its own float64 one at the very place of a
    mismatch (by more than float32's tolerance), that mismatch is `precision`.
    Programs naming float16/bfloat16 are left to `reclassify_precision`.
    """
    suspects = _rounding_suspects(source, mismatches, BRANCH_CHECKS)
    if not suspects or "torch.float32" not in source:
        return mismatches
    if any(name in source for name in LOW_PRECISION):
        return mismatches
    try:
        sensitive = _rounding_sensitive_places(source)
    except Exception:  # the widened program cannot run: keep the verdict
        return mismatches
    return [
        dataclasses.replace(m, kind="precision", message=EAGER_ROUNDING + m.message)
        if m in suspects and m.where in sensitive
        else m
        for m in mismatches
    ]


def _rounding_sensitive_places(source: str) -> set[str]:
    """The places ("call 0 output 1", ...) where eager in float32 and in float64 disagree."""
    narrow_ns, wide_ns = load(source), load(source.replace("torch.float32", "torch.float64"))
    places = set()
    with quiet():
        for call in range(len(narrow_ns["DIMS"])):
            narrow = run_call(narrow_ns["program"], narrow_ns, call)
            wide = run_call(wide_ns["program"], wide_ns, call)
            if narrow.error is not None or wide.error is not None:
                continue
            pairs = [
                (f"output {i}", a, b) for i, (a, b) in enumerate(zip(narrow.outputs, wide.outputs))
            ]
            pairs += [
                (f"input {i}", a, b) for i, (a, b) in enumerate(zip(narrow.inputs, wide.inputs))
            ]
            if (narrow.grads is None) != (wide.grads is None):
                places.add(f"call {call}")  # a branch on rounding cut the inputs off
            if narrow.grads is not None and wide.grads is not None:
                pairs += [
                    (f"grad of input {i}", a, b)
                    for i, (a, b) in enumerate(zip(narrow.grads, wide.grads))
                ]
            for place, a, b in pairs:
                if _differs_in_float32(a, b) or _grad_presence_differs(place, a, b):
                    places.add(f"call {call} {place}")
    return places


def _grad_presence_differs(place: str, narrow, wide) -> bool:
    return place.startswith("grad of input") and (narrow is None) != (wide is None)


class _HardswishAtEveryPosition(torch.autograd.Function):
    """F.hardswish whose backward computes one of eager's two CPU formulas everywhere:
    its vectorized loop's (`x >= 3` passes the gradient on, a NaN input gives NaN) or its
    scalar tail's (`x <= 3` scales it, a NaN input passes it on)."""

    @staticmethod
    def forward(ctx, x, vectorized):
        ctx.save_for_backward(x)
        ctx.vectorized = vectorized
        return torch.nn.functional.hardswish(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        wide, wide_grad = x.float(), grad.float()  # float16/bfloat16 computed in float32
        scaled = wide_grad * (wide / 3 + 0.5)
        if ctx.vectorized:
            inside = torch.where(wide >= 3, wide_grad, scaled)
        else:
            inside = torch.where(wide <= 3, scaled, wide_grad)
        result = torch.where(wide < -3, torch.zeros_like(wide_grad), inside)
        return result.to(grad.dtype), None


# Eager CPU kernels whose result for a value depends on its position: the vectorized
# loop and the scalar tail compute different formulas, which disagree at some inputs
# (NaN). Keyed by the program text of the call: the respellings computing each of the
# kernel's formulas at every position (`EAGER_FORMULAS` defines them for the program).
EAGER_BY_POSITION = {
    "F.hardswish(": ("_eager_hardswish_vectorized(", "_eager_hardswish_scalar("),
}
EAGER_FORMULAS = {
    "_eager_hardswish_vectorized": lambda x: _HardswishAtEveryPosition.apply(x, True),
    "_eager_hardswish_scalar": lambda x: _HardswishAtEveryPosition.apply(x, False),
}
BY_POSITION = "eager-by-position: "


def reclassify_eager_by_position(
    source: str, backend: str, mismatches: list[Mismatch]
) -> list[Mismatch]:
    """Value mismatches of a program calling a kernel of `EAGER_BY_POSITION` become
    `precision` where eager, computing one of that kernel's formulas at every position,
    gives the compiled results.

    Eager's hardswish backward passes the gradient on at a NaN input in its scalar tail
    and gives NaN in its vectorized loop (64 of 70 elements NaN, 6 not): no one answer is
    eager's. The program is run eagerly again with each call of such a kernel respelled
    as one formula everywhere; only when the compiled program then matches entirely (but
    metadata) do the value mismatches become `precision` (the message says why).
    """
    suspects = [m for m in mismatches if m.kind == "silent" and m.check in ROUNDING_CHECKS]
    body = _program_body(source)
    calls = [text for text in EAGER_BY_POSITION if text in body]
    if not suspects or not calls or any(m.check == "shape" for m in suspects):
        return mismatches
    for formula in range(2):
        respelled = source
        for text in calls:
            respelled = respelled.replace(text, EAGER_BY_POSITION[text][formula])
        try:
            again = _differences(source, backend, False, eager_source=respelled)
        except Exception:  # the respelled program cannot run: keep the verdict
            continue
        if all(m.kind == "metadata" for m in again):
            return [
                dataclasses.replace(m, kind="precision", message=BY_POSITION + m.message)
                if m in suspects
                else m
                for m in mismatches
            ]
    return mismatches


ELEMENT_CHECKS = ("value", "mutation_value", "grad_value")
BY_ELEMENT = "float64 by element: "


def reclassify_rounding_by_element(
    source: str, backend: str, mismatches: list[Mismatch]
) -> list[Mismatch]:
    """Value mismatches of a program naming float16/bfloat16 (left by `reclassify_rounding`
    to the widening of `reclassify_precision`, which did not explain them) become
    `precision` where every differing element sits where eager itself disagrees with its
    float64 spelling.

    A sum of values near float32's largest (`nan_to_num` of infinities, then a row sum)
    overflows or not by its summation order: eager gives NaN, inf or 0.0 where compiled
    code gives inf, 3.4e38 or 0.5. The float64 spelling does not overflow there (or, with
    `nan_to_num`'s float64 largest value, otherwise), so widening the whole program cannot
    explain it, and a program naming float16 anywhere (an autocast region) was left out of
    `reclassify_rounding`. Here the program is run again, eagerly in float32 and in float64
    and compiled: a place (an output, an input after the call, a grad) is `precision` only
    when each element where compiled and eager differ is one where eager's float32 and
    float64 runs differ too (by more than float32's tolerance). Any other differing element
    keeps the whole place `silent`.
    """
    suspects = [m for m in mismatches if m.kind == "silent" and m.check in ELEMENT_CHECKS]
    suspects = [m for m in suspects if not m.message.startswith(NONFINITE)]
    if not suspects or "torch.float32" not in source:
        return mismatches
    if not any(name in source for name in (*LOW_PRECISION, *LOW_PRECISION_METHODS)):
        return mismatches  # reclassify_rounding decided
    try:
        explained = _rounding_explained_elements(source, backend)
    except Exception:  # a run failed: keep the verdict
        return mismatches
    return [
        dataclasses.replace(m, kind="precision", message=BY_ELEMENT + m.message)
        if m in suspects and m.where in explained
        else m
        for m in mismatches
    ]


def _rounding_explained_elements(source: str, backend: str) -> set[str]:
    """The places where every element compiled code computes otherwise than eager is one
    where eager in float32 and in float64 disagree."""
    import ember

    floor = precision_floor(source)
    narrow_ns, compiled_ns = load(source), load(source)
    wide_ns = load(_float64_spelling(source))
    wide_ns.update(FLOAT32_LIMITS)
    dynamic = compiled_ns.get("DYNAMIC")
    compiled = ember.compile(compiled_ns["program"], backend=backend, dynamic=dynamic)
    places = set()
    with quiet():
        for call in range(len(narrow_ns["DIMS"])):
            narrow = run_call(narrow_ns["program"], narrow_ns, call)
            wide = run_call(wide_ns["program"], wide_ns, call)
            actual = run_call(compiled, compiled_ns, call)
            runs = (narrow, wide, actual)
            if any(r.error is not None or r.backward_error is not None for r in runs):
                continue
            triples = [(f"output {i}", *t) for i, t in enumerate(zip(*(r.outputs for r in runs)))]
            triples += [(f"input {i}", *t) for i, t in enumerate(zip(*(r.inputs for r in runs)))]
            if all(r.grads is not None for r in runs):
                grads = zip(*(r.grads for r in runs))
                triples += [(f"grad of input {i}", *t) for i, t in enumerate(grads)]
            for place, eager32, eager64, got in triples:
                if _differing_elements_explained(eager32, eager64, got, floor):
                    places.add(f"call {call} {place}")
    return places


# Ops whose result depends on the float dtype's range (`nan_to_num` maps inf to the
# dtype's largest value): in the float64 spelling they keep float32's, so the float64 run
# computes the float32 program's values exactly, without its overflow.
FLOAT32_LIMITS_IN_FLOAT64 = {"torch.nan_to_num(": "_nan_to_num_at_float32_limits("}


def _nan_to_num_at_float32_limits(x, *args, **kwargs):
    if isinstance(x, torch.Tensor) and x.dtype == torch.float64 and not args and not kwargs:
        largest = torch.finfo(torch.float32).max
        return torch.nan_to_num(x, posinf=largest, neginf=-largest)
    return torch.nan_to_num(x, *args, **kwargs)


FLOAT32_LIMITS = {"_nan_to_num_at_float32_limits": _nan_to_num_at_float32_limits}


def _float64_spelling(source: str) -> str:
    """The program with float32 spelled float64; where it names no float64 of its own,
    the ops of FLOAT32_LIMITS_IN_FLOAT64 keep float32's range."""
    start = source.find("def make_inputs(")
    own = source[start:] if start >= 0 else source  # the inputs and the program
    own_float64 = "torch.float64" in own or ".double()" in own
    wide = source.replace("torch.float32", "torch.float64")
    if not own_float64:
        for text, spelling in FLOAT32_LIMITS_IN_FLOAT64.items():
            wide = wide.replace(text, spelling)
    return wide


def _differing_elements_explained(eager32, eager64, got, floor) -> bool:
    """Whether `got` differs from `eager32` somewhere, and only where `eager64` does too."""
    tensors = (eager32, eager64, got)
    if not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in tensors):
        return False
    if not (eager32.shape == eager64.shape == got.shape) or eager32.dtype != got.dtype:
        return False
    eager32, eager64, got = (t.detach().to(torch.float64) for t in tensors)
    rtol, atol = max(TOLERANCES.get(tensors[0].dtype, (1e-4, 1e-4)), TOLERANCES[floor])
    differs = ~torch.isclose(got, eager32, rtol=rtol, atol=atol, equal_nan=True)
    rtol, atol = TOLERANCES[torch.float32]
    unsure = ~torch.isclose(eager64, eager32, rtol=rtol, atol=atol, equal_nan=True)
    return bool(differs.any()) and not bool((differs & ~unsure).any())


STEPWISE_CHECKS = ("value", "shape", "mutation_value", "mutation_shape")
SNAPSHOT = "_stepwise_"


def reclassify_stepwise(source: str, backend: str, mismatches: list[Mismatch]) -> list[Mismatch]:
    """Mismatches of outputs and inputs that every statement explains, taken on compiled
    operands, become `precision`.

    A value zero in real arithmetic (`x - mean` of equal elements, a bilinear mix of values
    that cancel) is a rounding residue in one of eager and compiled code (eager's batch
    norm is `x * alpha + beta`, 7.6e-6) and exactly 0 in the other; a step discontinuous
    at 0 (`!= 0`, `where`, `//`, `sign`, a division) turns that into a difference of 2 or
    NaN, in float64 as in float32, so that no widening shows it. The program is run
    again, eagerly and compiled, keeping a copy of every variable after each top-level
    statement (a block is one). Where the compiled copies after a statement are not
    eager's, the statement is run eagerly on copies of the compiled values before it;
    when that reproduces the compiled values after it for every such statement (each step
    is right on what it was given: the difference came from rounding within tolerance
    upstream), the mismatches at the places that differ there too are `precision`. A step
    wrong on its own operands, a result the instrumented program does not reproduce, or
    variables sharing memory (copies do not) keep the verdict.
    """
    suspects = [
        m
        for m in mismatches
        if m.kind == "silent"
        and m.check in STEPWISE_CHECKS
        and (" output " in f" {m.where} " or " input " in f" {m.where} ")
    ]
    if not suspects:
        return mismatches
    try:
        explained = _stepwise_explained(source, backend)
    except Exception:  # the instrumented program cannot run: keep the verdict
        return mismatches
    return [
        dataclasses.replace(m, kind="precision") if m in suspects and m.where in explained else m
        for m in mismatches
    ]


def _program_def(tree: ast.Module) -> ast.FunctionDef | None:
    return next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "program"), None
    )


def _stored_names(statement: ast.stmt) -> list[str]:
    found = [
        n.id
        for n in ast.walk(statement)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    ]
    return list(dict.fromkeys(found))


def _instrumented(source: str) -> tuple[str, list, list[list[str]], list[str], list[str]] | None:
    """The program returning a copy of every variable after each top-level statement; its
    statements, the names copied after each, its parameters and the names it returns."""
    tree = ast.parse(source)
    program = _program_def(tree)
    if program is None or not isinstance(program.body[-1], ast.Return):
        return None
    returned = program.body[-1].value
    items = returned.elts if isinstance(returned, ast.Tuple) else [returned]
    if not all(isinstance(n, ast.Name) for n in items):
        return None
    parameters = [a.arg for a in program.args.args]
    statements, live, copied, body = program.body[:-1], list(parameters), [], []
    for i, statement in enumerate(statements):
        body.append(statement)
        live += [n for n in _stored_names(statement) if n not in live]
        copied.append(list(live))
        for name in live:
            body.append(
                ast.parse(
                    f"{SNAPSHOT}{i}_{name} = "
                    f"{name}.detach().clone() if isinstance({name}, torch.Tensor) else {name}"
                ).body[0]
            )
    names = [f"{SNAPSHOT}{i}_{n}" for i, group in enumerate(copied) for n in group]
    body.append(ast.parse(f"return ({', '.join(names)},)").body[0])
    program.body = body
    instrumented = ast.unparse(ast.fix_missing_locations(tree))
    return instrumented, statements, copied, parameters, [n.id for n in items]


def _stepwise_explained(source: str, backend: str) -> set[str]:
    """The places ("call 0 output 1", "call 1 input 0") whose difference every step
    explains (see `reclassify_stepwise`)."""
    import ember

    parsed = _instrumented(source)
    if parsed is None or not parsed[1] or "def set_state(" in source:  # calls need their state
        return set()
    instrumented, statements, copied, parameters, returned = parsed
    eager_ns, compiled_ns = load(instrumented), load(instrumented)
    dynamic = compiled_ns.get("DYNAMIC")
    compiled = ember.compile(compiled_ns["program"], backend=backend, dynamic=dynamic)
    floor = precision_floor(source)
    explained = set()
    with quiet():
        for call in range(len(eager_ns["DIMS"])):
            inputs = eager_ns["make_inputs"](call)
            if not _disjoint(inputs):
                continue
            eager = _by_statement(list(eager_ns["program"](*inputs)), copied)
            actual = _by_statement(list(compiled(*compiled_ns["make_inputs"](call))), copied)
            before = dict(zip(parameters, compiled_ns["make_inputs"](call)))
            if not _steps_explained(statements, eager, actual, before, compiled_ns, floor):
                continue
            last_eager, last_actual = eager[-1], actual[-1]
            differing = {n for n in last_eager if _differs(last_eager[n], last_actual[n], floor)}
            index = 0
            for name in returned:
                width = len(flatten(last_eager[name]))
                if name in differing:
                    explained.update(f"call {call} output {index + k}" for k in range(width))
                index += width
            explained.update(
                f"call {call} input {i}" for i, n in enumerate(parameters) if n in differing
            )
    return explained


def _disjoint(inputs: list) -> bool:
    """Whether no two input tensors share memory (copies of them would not)."""
    pointers = [x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)]
    return len(set(pointers)) == len(pointers)


def _by_statement(values: list, copied: list[list[str]]) -> list[dict]:
    """The instrumented program's flat results as one {name: value} per statement."""
    groups, start = [], 0
    for names in copied:
        groups.append(dict(zip(names, values[start : start + len(names)])))
        start += len(names)
    return groups


def _steps_explained(statements, eager, actual, before, namespace, floor) -> bool:
    """Whether each statement whose compiled results differ from eager's gives the compiled
    results when run eagerly on copies of the compiled values before it."""
    for statement, want, got in zip(statements, eager, actual):
        if any(_differs(want[n], got[n], floor) for n in want):
            replay = dict(namespace)
            replay.update({name: _copy(value) for name, value in before.items()})
            exec(compile(ast.Module([statement], []), "<stepwise>", "exec"), replay)
            wrong = [n for n in got if _differs(replay[n], got[n], floor)]
            if wrong and not _summation_order_explains(statement, before, replay, got, wrong):
                return False
        before = got
    return True


# float32 reductions whose value depends on the order of their additions
SUMMATIONS = ("sum", "mean")


def _summation_of(statement: ast.stmt) -> tuple[str, str, ast.expr] | None:
    """(target, operand, call) of `target = operand.sum(...)` / `torch.sum(operand, ...)`
    (or mean) with constant arguments and no `dtype=`, else None."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
        return None
    target, call = statement.targets[0], statement.value
    if not (isinstance(target, ast.Name) and isinstance(call, ast.Call)):
        return None
    func, args = call.func, list(call.args)
    if not (isinstance(func, ast.Attribute) and func.attr in SUMMATIONS):
        return None
    if isinstance(func.value, ast.Name) and func.value.id == "torch" and args:
        operand = args.pop(0)
    else:
        operand = func.value
    constant = all(isinstance(a, ast.Constant) for a in args)
    keywords = all(isinstance(k.value, ast.Constant) and k.arg != "dtype" for k in call.keywords)
    if not (isinstance(operand, ast.Name) and constant and keywords):
        return None
    return target.id, operand.id, call


def _summation_order_explains(statement, before, replay, got, wrong) -> bool:
    """Whether a float32 sum (or mean) whose compiled value is not eager's, on the same
    operand, is within what a float32 summation in any order may give (seed 900355).

    For n terms added in any order, the rounding error is at most n * u * sum(|x|)
    (u = 2**-24; Higham, Accuracy and Stability of Numerical Algorithms, 4.2), around the
    exact sum (taken in float64); and where sum(|x|) exceeds float32's largest value, a
    partial sum may overflow, so that inf, -inf or NaN is what some order gives. Each
    element where compiled and eager differ must be in those bounds (a finite value near
    the exact sum, or a non-finite one where a partial sum may overflow); eager's kernel
    (a cascade of partial sums) and compiled code (one accumulator per lane) add in
    other orders, and both are float32 summations."""
    found = _summation_of(statement)
    if found is None:
        return False
    target, operand, call = found
    x, result = before.get(operand), got.get(target)
    if wrong != [target] or not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        return False
    if not isinstance(result, torch.Tensor) or result.dtype != torch.float32:
        return False
    expression = ast.Expression(call)
    evaluate = compile(ast.fix_missing_locations(expression), "<summation>", "eval")
    exact = eval(evaluate, {"torch": torch, operand: x.detach().double()})
    magnitude = eval(evaluate, {"torch": torch, operand: x.detach().double().abs()})
    terms = x.numel() // max(result.numel(), 1)
    scale = terms if call.func.attr == "mean" else 1  # a mean's partial sums: times n
    got_value, eager_value = result.detach().double(), replay[target].detach().double()
    if exact.shape != got_value.shape:
        return False
    differing = ~torch.isclose(got_value, eager_value, equal_nan=True)
    may_overflow = magnitude * scale > torch.finfo(torch.float32).max
    bound = terms * 2.0**-24 * magnitude + 2.0**-24 * exact.abs()
    within = (got_value - exact).abs() <= bound
    overflowed = may_overflow & ~torch.isfinite(got_value)
    return bool((within | overflowed)[differing].all())


def _copy(value):
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _differs(want, got, floor) -> bool:
    if isinstance(want, (tuple, list)) or isinstance(got, (tuple, list)):
        want, got = flatten(want), flatten(got)
        return len(want) != len(got) or any(_differs(w, g, floor) for w, g in zip(want, got))
    if isinstance(want, float) and isinstance(got, float):
        want, got = torch.tensor(want), torch.tensor(got)
    return any(kind == "silent" for kind, _, _ in compare_tensors(want, got, False, floor))


# A program naming one of these may see its inputs' layout (strides, memory) itself.
LAYOUT_OBSERVERS = (
    "as_strided",
    ".stride(",
    "is_contiguous",
    "storage",
    "data_ptr",
    "empty",
    "set_(",
)
# These return a view of a dense input and a copy of another one: with an in-place op in
# the program, a write through the result reaches the input, or does not.
VIEW_OR_COPY = (".reshape(", "reshape_as(", "flatten(", "ravel(", ".contiguous(", "memory_format")
IN_PLACE = re.compile(r"\.[a-z][a-z0-9_]*[a-z0-9]_\(|\bout=")


def reclassify_layout(source: str, mismatches: list[Mismatch]) -> list[Mismatch]:
    """Value mismatches where eager itself changes with its inputs' layout become `precision`.

    Eager's kernels sum in an order that depends on the strides of what they read: a
    program branching on a value that is zero up to rounding (`if batch_norm(x).sum() >
    0`) takes one branch for a strided input and the other for a contiguous copy of it,
    in float64 too. The program is run eagerly again on contiguous copies of its inputs
    (the same values): where eager's result changes at the very place of a mismatch,
    that place's value is decided by rounding, and the mismatch is `precision`.
    Not applied where the copies could change what the program computes: inputs sharing
    memory, a program observing layouts, or one writing in place while it reshapes (a
    reshape is a view of a contiguous tensor, a copy of a strided one).
    """
    suspects = _rounding_suspects(source, mismatches)
    if not suspects:
        return mismatches
    body = _program_body(source)
    if any(name in body for name in LAYOUT_OBSERVERS):
        return mismatches
    if IN_PLACE.search(body) and any(name in body for name in VIEW_OR_COPY):
        return mismatches
    try:
        sensitive = _layout_sensitive_places(source)
    except Exception:  # the program cannot run on copies: keep the verdict
        return mismatches
    return [
        dataclasses.replace(m, kind="precision") if m in suspects and m.where in sensitive else m
        for m in mismatches
    ]


def _program_body(source: str) -> str:
    start = source.find("def program(")
    if start < 0:
        return source
    end = source.find("\nif __name__", start)
    return source[start : end if end >= 0 else len(source)]


def _contiguous_copies(inputs: list) -> list:
    copies = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            x = x.detach().contiguous().clone().requires_grad_(x.requires_grad)
        copies.append(x)
    return copies


def _layout_sensitive_places(source: str) -> set[str]:
    """The places where eager on the inputs and eager on contiguous copies of them disagree,
    the copies computing in float32 or, where the program names float32, in float64 (the
    summation order of each dtype's kernels differs too)."""
    variants = [source]
    if "torch.float32" in source and not any(name in source for name in LOW_PRECISION):
        variants.append(source.replace("torch.float32", "torch.float64"))
    strided_ns = load(source)
    places = set()
    with quiet():
        for variant in variants:
            dense_ns = load(variant)
            for call in range(len(strided_ns["DIMS"])):
                inputs = strided_ns["make_inputs"](call)
                tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
                pointers = [x.untyped_storage().data_ptr() for x in tensors]
                if len(set(pointers)) != len(pointers):
                    continue  # inputs sharing memory: copies would not share it
                strided = run_call(strided_ns["program"], strided_ns, call)
                dense = run_call(dense_ns["program"], dense_ns, call, _contiguous_copies)
                if strided.error is not None or dense.error is not None:
                    continue
                for place, a, b in _places(strided, dense):
                    if _differs_in_float32(a, b):
                        places.add(f"call {call} {place}")
    return places


def _places(first: Outcome, second: Outcome) -> list[tuple[str, object, object]]:
    pairs = [(f"output {i}", a, b) for i, (a, b) in enumerate(zip(first.outputs, second.outputs))]
    pairs += [(f"input {i}", a, b) for i, (a, b) in enumerate(zip(first.inputs, second.inputs))]
    if first.grads is not None and second.grads is not None:
        pairs += [
            (f"grad of input {i}", a, b) for i, (a, b) in enumerate(zip(first.grads, second.grads))
        ]
    return pairs


def _differs_in_float32(narrow, wide) -> bool:
    if not (isinstance(narrow, torch.Tensor) and isinstance(wide, torch.Tensor)):
        return False
    if narrow.shape != wide.shape:
        return True
    if not (narrow.is_floating_point() and wide.is_floating_point()):
        return not torch.equal(narrow.detach(), wide.detach().to(narrow.dtype))
    wide = wide.detach().to(torch.float64)
    return value_difference(wide, narrow.detach().to(torch.float64), torch.float32) is not None


# ---------------------------------------------------------------- comparing


def compare_outcomes(
    expected: Outcome, actual: Outcome, backend: str, where: str, floor=torch.float64
) -> list:
    """Mismatches of one call: exceptions, outputs, inputs after the call, grads."""

    def mismatch(kind, check, place, message):
        return Mismatch(kind, check, backend, f"{where} {place}".strip(), message)

    if expected.error is not None:
        if actual.error is None:
            text = f"eager raised {_describe(expected.error)}; compiled returned"
            return [mismatch("missing_error", "exception", "", text)]
        if not same_family(expected.error, actual.error):
            text = f"eager raised {_describe(expected.error)}; compiled {_describe(actual.error)}"
            return [mismatch("error", "exception_type", "", text)]
        found = [mismatch(*m) for m in compare_user_exception(expected.error, actual.error)]
        return found + compare_states(expected.state, actual.state, mismatch, floor)
    if actual.error is not None:
        check = f"raised_{type(actual.error).__name__}"
        return [mismatch("error", check, "", _describe(actual.error))]
    found = compare_states(expected.state, actual.state, mismatch, floor)
    if len(expected.outputs) != len(actual.outputs):
        text = f"{len(expected.outputs)} outputs in eager, {len(actual.outputs)} compiled"
        return [mismatch("silent", "structure", "", text)]
    for i, (want, got) in enumerate(zip(expected.outputs, actual.outputs)):
        for kind, check, text in compare_tensors(want, got, floor=floor):
            found.append(mismatch(kind, check, f"output {i}", text))
        found += [
            mismatch("metadata", check, f"output {i}", text)
            for check, text in compare_layout(want, got, expected.inputs, actual.inputs)
        ]
    for i, (want, got) in enumerate(zip(expected.inputs, actual.inputs)):
        if not isinstance(want, torch.Tensor):  # an object or container argument
            for path, text in _state_differences(snapshot(want), snapshot(got), "", floor):
                found.append(mismatch("silent", "mutation_value", f"input {i}{path}", text))
            continue
        for kind, check, text in compare_tensors(want, got, requires_grad=False, floor=floor):
            found.append(mismatch(kind, "mutation_" + check, f"input {i}", text))
    found += compare_grads(expected, actual, mismatch, floor)
    return found


# Where a program's own exception classes live (user_code.py, run as module "fuzz_program").
PROGRAM_MODULE = "fuzz_program"


def compare_user_exception(expected: BaseException, actual: BaseException) -> list[tuple]:
    """(kind, check, place, message) where eager raised the program's own exception (a class
    the program defines) and the compiled function raised another class or message: the
    message is the program's data (its sizes), so a wrong one is a wrong result."""
    if type(expected).__module__ != PROGRAM_MODULE:
        return []  # torch's and Python's messages are compared by family only
    raised = actual
    while raised is not None and type(raised).__name__ != type(expected).__name__:
        raised = raised.__cause__ or raised.__context__
    if raised is None:
        text = f"eager raised {_describe(expected)}; compiled {_describe(actual)}"
        return [("error", "exception_class", "", text)]
    if str(raised) != str(expected):
        text = f"eager raised {_describe(expected)}; compiled {_describe(raised)}"
        return [("silent", "exception_message", "", text)]
    return []


def compare_states(want: dict | None, got: dict | None, mismatch, floor) -> list:
    """Mismatches of the outside state (user_code.outside_state()) after a call."""
    if want is None:
        return []
    found = []
    for key in want:
        for path, text in _state_differences(want[key], (got or {}).get(key), key, floor):
            found.append(mismatch("silent", "state", f"state {path}", text))
    return found


def _state_differences(want, got, path: str, floor) -> list[tuple[str, str]]:
    if isinstance(want, dict) or isinstance(got, dict):
        if not (isinstance(want, dict) and isinstance(got, dict)) or list(want) != list(got):
            keys = lambda d: list(d) if isinstance(d, dict) else type(d).__name__  # noqa: E731
            return [(path, f"keys {keys(got)}, eager {keys(want)}")]
        return [
            d for k in want for d in _state_differences(want[k], got[k], f"{path}[{k!r}]", floor)
        ]
    if isinstance(want, (list, tuple)) or isinstance(got, (list, tuple)):
        if type(want) is not type(got) or len(want) != len(got):
            return [(path, f"{_short(got)}, eager {_short(want)}")]
        pairs = zip(want, got)
        return [
            d
            for i, (w, g) in enumerate(pairs)
            for d in _state_differences(w, g, f"{path}[{i}]", floor)
        ]
    return [(path, text) for _, _, text in compare_tensors(want, got, False, floor)]


def _short(value) -> str:
    return " ".join(repr(value).split())[:120]


def compare_grads(expected: Outcome, actual: Outcome, mismatch, floor) -> list:
    if expected.backward_error is not None or expected.grads is None:
        return []  # eager's backward raised or nothing needs grad: not compared
    if actual.backward_error is not None:
        check = f"backward_{type(actual.backward_error).__name__}"
        return [mismatch("error", check, "", _describe(actual.backward_error))]
    if actual.grads is None:
        return [mismatch("silent", "grad", "", "eager has grads, compiled outputs have none")]
    found = []
    for i, (want, got) in enumerate(zip(expected.grads, actual.grads)):
        if (want is None) != (got is None):
            text = f"grad is {'None' if got is None else 'set'} (eager: {want is not None})"
            found.append(mismatch("silent", "grad", f"grad of input {i}", text))
        elif want is not None:
            for _kind, check, text in compare_tensors(want, got, False, floor):
                found.append(mismatch("silent", "grad_" + check, f"grad of input {i}", text))
    return found


def compare_tensors(
    want, got, requires_grad: bool = True, floor=torch.float64
) -> list[tuple[str, str, str]]:
    """(kind, check, message) for differences of type, shape, dtype, values, requires_grad."""
    if not isinstance(want, torch.Tensor):
        if type(want) is float and type(got) is float:  # a value read back (`.item()`)
            problem = value_difference(torch.tensor(want), torch.tensor(got), floor)
            return [("silent", "value", problem)] if problem else []
        if type(want) is not type(got) or want != got:
            return [("silent", "value", f"expected {want!r}, got {got!r}")]
        return []
    if not isinstance(got, torch.Tensor):
        return [("silent", "type", f"expected a tensor, got {type(got).__name__}")]
    if want.shape != got.shape:
        return [("silent", "shape", f"expected {tuple(want.shape)}, got {tuple(got.shape)}")]
    if want.dtype != got.dtype:
        return [("silent", "dtype", f"expected {want.dtype}, got {got.dtype}")]
    found = []
    problem = value_difference(want.detach(), got.detach(), floor)
    if problem:
        found.append(("silent", "value", problem))
    if requires_grad and want.requires_grad != got.requires_grad:
        text = f"requires_grad {got.requires_grad}, eager {want.requires_grad}"
        found.append(("metadata", "requires_grad", text))
    return found


def value_difference(want: torch.Tensor, got: torch.Tensor, floor=torch.float64) -> str | None:
    """Why the values differ (exact for ints/bools; tolerances by dtype), or None."""
    if want.is_floating_point() or want.is_complex():
        rtol, atol = max(TOLERANCES.get(want.dtype, (1e-4, 1e-4)), TOLERANCES[floor])
        try:
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as error:
            text = " ".join(str(error).split())[:400]
            if _nonfinite_from_finite(want, got):
                return NONFINITE + text
            return NEAR + text if _near(want, got) else text
        return None
    if not torch.equal(want, got):
        diff = (want != got).nonzero()[:3].tolist()
        return f"exact values differ at {diff}: expected {_sample(want)}, got {_sample(got)}"
    return None


def _nonfinite_from_finite(want: torch.Tensor, got: torch.Tensor) -> bool:
    """Whether `got` is NaN or inf somewhere while `want` is finite everywhere and below
    a quarter of its float dtype's largest value (see NONFINITE)."""
    if want.is_complex() or got.is_complex() or want.shape != got.shape or want.numel() == 0:
        return False
    if not torch.isfinite(want).all() or torch.isfinite(got).all():
        return False
    limit = torch.finfo(want.dtype).max / 4
    return bool(want.abs().max() < limit)


def _near(want: torch.Tensor, got: torch.Tensor) -> bool:
    if want.dtype != torch.float32:
        return False
    rtol, atol = NEAR_TOLERANCE
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError:
        return False
    return True


def _sample(t: torch.Tensor) -> str:
    return " ".join(str(t.flatten()[:8].tolist()).split())


def compare_layout(want, got, eager_inputs: list, compiled_inputs: list) -> list[tuple[str, str]]:
    """(check, message) for strides, storage offset and aliasing, under the rules above."""
    if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
        return []
    if want.shape != got.shape or want.numel() == 0:
        return []
    base = _aliased_input(want, eager_inputs)
    if base is not None:
        if _aliased_input(got, compiled_inputs) != base:
            return [("aliasing", f"eager returns a view of input {base}; compiled does not")]
        if want.stride() != got.stride() or want.storage_offset() != got.storage_offset():
            text = (
                f"view of input {base}: stride {got.stride()} offset {got.storage_offset()}, "
                f"eager {want.stride()} offset {want.storage_offset()}"
            )
            return [("stride", text)]
        return []
    sized = [d for d in range(want.dim()) if want.shape[d] > 1]
    if any(want.stride(d) != got.stride(d) for d in sized):
        return [
            ("stride", f"stride {got.stride()}, eager {want.stride()} (shape {tuple(want.shape)})")
        ]
    return []


def _aliased_input(t: torch.Tensor, inputs: list) -> int | None:
    """The index of the input whose storage `t` shares, or None."""
    pointer = t.untyped_storage().data_ptr()
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.untyped_storage().data_ptr() == pointer:
            return i
    return None


def same_family(expected: BaseException, actual: BaseException) -> bool:
    """Whether `actual` (or its cause / context chain) is of `expected`'s exception family."""
    family = next((f for f in EXCEPTION_FAMILIES if isinstance(expected, f)), Exception)
    seen = set()
    while actual is not None and id(actual) not in seen:
        seen.add(id(actual))
        if isinstance(actual, family):
            return True
        actual = actual.__cause__ or actual.__context__
    return False


def _describe(error: BaseException) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first[:300]}"


def main_for_reproducer(namespace: dict, backend: str) -> int:
    """A saved reproducer's entry point: print its mismatches; 1 when there are any."""
    from pathlib import Path

    source = Path(namespace["__file__"]).read_text()
    mismatches = check_source(source, backend)
    for m in mismatches:
        print(m.describe())
    print(f"{len(mismatches)} mismatches under backend {backend!r}")
    return 1 if mismatches else 0
