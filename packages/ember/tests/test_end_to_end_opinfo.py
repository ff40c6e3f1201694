"""OpInfo samples through the whole compiler: ember.compile(..., fullgraph=True).

Each sample is called through a compiled function with fullgraph=True (so a capture
gap is counted as one, not hidden by running eagerly) and compared with eager (values,
shapes, dtypes, requires_grad); a second test runs it with inputs requiring grad
through aot_eager and inductor, pulls random upstream gradients back through the
outputs and compares the input grads too.

By default a representative subset of ops runs, first float32 sample, static shapes.
Environment variables widen the sweep (they combine):

    EMBER_FULL_OPINFO=1                    every op in torch's op_db
    EMBER_OPINFO_SAMPLES=all               every sample of each op, not only the first
    EMBER_OPINFO_DTYPES=bfloat16,float16   these dtypes (default float32), where the op
                                           supports them
    EMBER_OPINFO_DYNAMIC=1                 compile with dynamic=True ("both": static too)

Low precision is judged as the rest of the project judges it: against a float32
eager reference (the same sample upcast), the compiled error may be at most
3x eager's own low-precision error + 2e-3 (relative, per output and per grad).
A float32 result is close to eager (1e-4) or, where not (an ill-conditioned sample
such as layer_norm over one element), within 3x eager's own error + 1e-5 against a
float64 reference.
`nox -s opinfo` runs a full sweep; see its docstring.
"""

from __future__ import annotations

import contextlib
import os

import pytest
import torch
import torch.utils._pytree as pytree

import ember
from dynamo_capture.errors import Unsupported

common_methods_invocations = pytest.importorskip(
    "torch.testing._internal.common_methods_invocations",
    reason="OpInfo needs expecttest (the test extra installs it)",
)

FULL = os.environ.get("EMBER_FULL_OPINFO") == "1"
ALL_SAMPLES = os.environ.get("EMBER_OPINFO_SAMPLES", "first") == "all"
DYNAMIC_CHOICES = {"0": (False,), "1": (True,), "both": (False, True)}


def _dtypes_from_environment() -> tuple[torch.dtype, ...]:
    names = os.environ.get("EMBER_OPINFO_DTYPES", "float32").split(",")
    dtypes = tuple(getattr(torch, name.strip(), None) for name in names)
    if not all(isinstance(dtype, torch.dtype) for dtype in dtypes):
        raise ValueError(f"EMBER_OPINFO_DTYPES={names!r}: name torch dtypes, e.g. bfloat16,float16")
    return dtypes


def _dynamic_from_environment() -> tuple[bool, ...]:
    value = os.environ.get("EMBER_OPINFO_DYNAMIC", "0")
    if value not in DYNAMIC_CHOICES:
        raise ValueError(f"EMBER_OPINFO_DYNAMIC={value!r} is not one of {list(DYNAMIC_CHOICES)}")
    return DYNAMIC_CHOICES[value]


DTYPES = _dtypes_from_environment()
# The samples' device: "cpu" (CI's), or "cuda" to sweep the Triton path on a GPU.
DEVICE = os.environ.get("EMBER_OPINFO_DEVICE", "cpu")
if DEVICE not in ("cpu", "cuda"):
    raise ValueError(f"EMBER_OPINFO_DEVICE={DEVICE!r} is not one of ['cpu', 'cuda']")
if DEVICE == "cuda" and not torch.cuda.is_available():
    pytest.skip("EMBER_OPINFO_DEVICE=cuda needs a GPU", allow_module_level=True)
DYNAMIC = _dynamic_from_environment()
# The default selection (CI's) must capture whole; a widened sweep counts gaps as xfails.
WIDENED = FULL or ALL_SAMPLES or DTYPES != (torch.float32,) or DYNAMIC != (False,)

# Ops whose results are random or depend on state eager and compiled runs do not share.
RANDOM = (
    "rand",
    "dropout",
    "normal",
    "bernoulli",
    "multinomial",
    "uniform",
    "exponential",
    "geometric",
    "cauchy",
    "log_normal",
    "poisson",
    "lowrank",
    "empty",
    "new_empty",
)

# A representative subset for CI: pointwise, reductions, views, norms, matmul, indexing, losses.
SUBSET = {
    "add",
    "mul",
    "div",
    "sub",
    "pow",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "sin",
    "abs",
    "clamp",
    "where",
    "maximum",
    "nn.functional.relu",
    "nn.functional.gelu",
    "nn.functional.silu",
    "nn.functional.softplus",
    "nn.functional.leaky_relu",
    "sum",
    "mean",
    "var",
    "amax",
    "argmax",
    "logsumexp",
    "softmax",
    "log_softmax",
    "nn.functional.layer_norm",
    "nn.functional.linear",
    "matmul",
    "bmm",
    "addmm",
    "cat",
    "stack",
    "permute",
    "transpose",
    "reshape",
    "flatten",
    "expand",
    "narrow",
    "select",
    "index_select",
    "gather",
    "cumsum",
    "nn.functional.cross_entropy",
    "nn.functional.mse_loss",
    "nn.functional.embedding",
    "nn.functional.conv2d",
    "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d",
}


def _cases():
    """(op, dtype, dynamic) for each selected op, dtype it supports on DEVICE, and mode."""
    chosen = []
    for op in common_methods_invocations.op_db:
        if any(word in op.name for word in RANDOM):
            continue
        if not FULL and op.name not in SUBSET:
            continue
        name = f"{op.name}.{op.variant_test_name}".rstrip(".")
        for dtype in DTYPES:
            if dtype not in op.supported_dtypes(DEVICE):
                continue
            for dynamic in DYNAMIC:
                mode = "dynamic" if dynamic else "static"
                dtype_name = str(dtype).removeprefix("torch.")
                chosen.append(pytest.param(op, dtype, dynamic, id=f"{name}-{dtype_name}-{mode}"))
    return chosen


def _samples(op, dtype, requires_grad):
    samples = op.sample_inputs(DEVICE, dtype, requires_grad=requires_grad)
    for index, sample in enumerate(samples):
        yield index, sample
        if not ALL_SAMPLES:
            return


def _describe(index, sample) -> str:
    def text(leaf):
        if isinstance(leaf, torch.Tensor):
            return f"{str(leaf.dtype).removeprefix('torch.')}{list(leaf.shape)}"
        return repr(leaf)[:40]

    parts = [text(leaf) for leaf in pytree.tree_leaves((sample.input, sample.args))]
    kwargs = {key: text(value) for key, value in sample.kwargs.items()}
    return f"sample {index}: ({', '.join(parts)}) {kwargs or ''}".rstrip()


def _program(function):
    def program(*args, **kwargs):
        return function(*args, **kwargs)

    return program


def _copies(structure, dtype=None):
    """Fresh leaf copies of the tensors in `structure`, those of `dtype` upcast to the
    precision of its reference (float32 for bfloat16 and float16, float64 for float32)."""

    def copy(leaf):
        if not isinstance(leaf, torch.Tensor):
            return leaf
        if leaf.dtype == dtype:
            fresh = leaf.detach().to(REFERENCE_DTYPE[dtype])
        else:
            fresh = leaf.detach().clone()
        return fresh.requires_grad_(leaf.requires_grad)

    return pytree.tree_map(copy, structure)


def _capture_gap(unsupported):
    if not WIDENED:
        raise unsupported  # the subset's ops must capture whole
    pytest.xfail(f"capture: {str(unsupported).splitlines()[0]}")


@pytest.mark.parametrize("op, dtype, dynamic", _cases())
def test_forward_through_ember_inductor(op, dtype, dynamic):
    program = _program(op.op)
    ran = 0
    for index, sample in _samples(op, dtype, requires_grad=False):
        structure = ((sample.input, *sample.args), sample.kwargs)
        (eager_args, eager_kwargs), (args, kwargs) = _copies(structure), _copies(structure)
        try:
            expected = program(*eager_args, **eager_kwargs)
        except Exception:  # eager itself rejects this sample
            continue

        def reference(structure=structure):
            ref_args, ref_kwargs = _copies(structure, dtype)
            return program(*ref_args, **ref_kwargs)

        compiled = ember.compile(program, backend="inductor", fullgraph=True, dynamic=dynamic)
        try:
            actual = compiled(*args, **kwargs)
        except Unsupported as unsupported:
            _capture_gap(unsupported)
        with _naming(index, sample):
            _assert_matches(actual, expected, reference, dtype, UNSET_OUTPUTS.get(op.name, ()))
            _assert_same_requires_grad(actual, expected)
        ran += 1
    if not ran:
        pytest.skip(f"no {dtype} {DEVICE} sample eager runs")


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("op, dtype, dynamic", _cases())
def test_forward_and_grads_through_ember(op, dtype, dynamic, backend):
    """Samples with inputs requiring grad: outputs (value, shape, dtype, requires_grad)
    and the input grads for random upstream gradients match eager."""
    if not op.supports_autograd:
        pytest.skip("no autograd")
    program = _program(op.op)
    ran = 0
    for index, sample in _samples(op, dtype, requires_grad=True):
        structure = ((sample.input, *sample.args), sample.kwargs)
        (eager_args, eager_kwargs), (args, kwargs) = _copies(structure), _copies(structure)
        try:
            expected = program(*eager_args, **eager_kwargs)
        except Exception:  # eager itself rejects this sample
            continue
        compiled = ember.compile(program, backend=backend, fullgraph=True, dynamic=dynamic)
        try:
            actual = compiled(*args, **kwargs)
        except Unsupported as unsupported:
            _capture_gap(unsupported)
        upstream = _upstream_gradients(expected, seed=index)
        references = []

        def reference(structure=structure, references=references):
            ref_args, ref_kwargs = _copies(structure, dtype)
            references.append((program(*ref_args, **ref_kwargs), ref_args, ref_kwargs))
            return references[-1][0]

        def reference_grads(upstream=upstream, references=references, reference=reference):
            if not references:
                reference()
            return _grads(*references[-1], upstream)

        with _naming(index, sample):
            _assert_matches(actual, expected, reference, dtype, UNSET_OUTPUTS.get(op.name, ()))
            _assert_same_requires_grad(actual, expected)
            try:
                grads_e = _grads(expected, eager_args, eager_kwargs, upstream)
            except RuntimeError:  # eager's backward rejects these upstream gradients
                # (`linalg.eig`: a loss depending on the eigenvectors' phase): so must ours
                with pytest.raises(RuntimeError):
                    _grads(actual, args, kwargs, upstream)
                ran += 1
                continue
            grads_a = _grads(actual, args, kwargs, upstream)
            _assert_matches(grads_a, grads_e, reference_grads, dtype)
        ran += 1
    if not ran:
        pytest.skip(f"no {dtype} {DEVICE} sample eager runs")


# -- comparing --------------------------------------------------------------------------------

LOW_PRECISION = (torch.bfloat16, torch.float16)
REFERENCE_DTYPE = {torch.bfloat16: torch.float32, torch.float16: torch.float32}
REFERENCE_DTYPE |= {torch.float32: torch.float64, torch.float64: torch.float64}
REFERENCE_DTYPE |= {torch.complex64: torch.complex128, torch.complex128: torch.complex128}


@contextlib.contextmanager
def _naming(index, sample):
    """Failures name the sample they came from."""
    try:
        yield
    except AssertionError as error:
        raise AssertionError(f"{_describe(index, sample)}\n{error}") from None


def _differentiable_outputs(outputs):
    return [
        o for o in pytree.tree_leaves(outputs) if isinstance(o, torch.Tensor) and o.requires_grad
    ]


def _upstream_gradients(outputs, seed):
    """A random gradient for each output requiring grad, drawn in float32 and rounded to
    the output's dtype (so a float32 reference pulls back the same values)."""
    generator = torch.Generator().manual_seed(seed)
    gradients = []
    for o in _differentiable_outputs(outputs):
        dtype = torch.complex64 if o.is_complex() else torch.float32
        g = torch.randn(o.shape, generator=generator, dtype=dtype)
        gradients.append(g.to(o.dtype))
    return gradients


def _grads(outputs, args, kwargs, upstream):
    """Input grads for `upstream` pulled back through `outputs` (None where unused)."""
    inputs = _differentiable_outputs((args, kwargs))
    differentiable = _differentiable_outputs(outputs)
    if not inputs or not differentiable:
        return []
    upstream = [g.to(o.dtype) for g, o in zip(upstream, differentiable, strict=True)]
    return torch.autograd.grad(differentiable, inputs, upstream, allow_unused=True)


# Outputs eager leaves uninitialized (`at::empty`), by op name and leaf index: not compared.
# The fused attention kernels return their dropout random state unset when dropout is off
# (memory-efficient: seed and offset; flash: the two-word rng state).
UNSET_OUTPUTS = {
    "torch.ops.aten._efficient_attention_forward": (2, 3),
    "torch.ops.aten._flash_attention_forward": (2,),
}


def _assert_matches(actual, expected, reference, dtype, unset=()) -> None:
    """Low precision: within eager's own error against a float32 `reference()` (where the
    op has no float32 kernel, close to eager). Otherwise close to eager; where not (an
    ill-conditioned sample), within eager's own error against a float64 `reference()`.
    Leaves at the indices in `unset` are not compared (see UNSET_OUTPUTS)."""
    if unset:

        def drop(outputs):
            return [x for i, x in enumerate(pytree.tree_leaves(outputs)) if i not in unset]

        actual, expected, full_reference = drop(actual), drop(expected), reference

        def reference():
            return drop(full_reference())

    floor = 2e-3
    if dtype not in LOW_PRECISION:
        try:
            torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
            return
        except AssertionError as error:
            close_error = error
        try:
            reference = reference()
        except Exception:
            raise close_error from None
        floor = 1e-5
    else:
        try:
            reference = reference()
        except Exception:  # no float32 kernel (flash attention): eager's dtype and tolerance
            torch.testing.assert_close(actual, expected, equal_nan=True)
            return
    leaves_a, leaves_e = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    leaves_r = pytree.tree_leaves(reference)
    assert len(leaves_a) == len(leaves_e) == len(leaves_r), "output structure differs"
    for i, (a, e, r) in enumerate(zip(leaves_a, leaves_e, leaves_r, strict=True)):
        if not isinstance(e, torch.Tensor) or not (e.is_floating_point() or e.is_complex()):
            torch.testing.assert_close(a, e, equal_nan=True, msg=lambda m, i=i: f"output {i}: {m}")
            continue
        assert isinstance(a, torch.Tensor), f"output {i}: {type(a).__name__}, not a tensor"
        assert (a.dtype, a.shape) == (e.dtype, e.shape), (
            f"output {i}: {a.dtype}{list(a.shape)}, eager {e.dtype}{list(e.shape)}"
        )
        compiled_error, eager_error, stray = _errors(a, e, r)
        assert stray == 0, f"output {i}: {stray} non-finite values where eager and fp32 are not"
        assert compiled_error <= 3 * eager_error + floor, (
            f"output {i}: error {compiled_error:.3g} against the {r.dtype} reference, "
            f"eager's own {eager_error:.3g}"
        )


def _errors(a, e, r):
    """Relative errors of `a` and of eager's `e` against the float32 `r` where both `r`
    and `e` are finite, and how many other positions `a` agrees with neither."""
    a, e, r = (_as_real(t.detach()) for t in (a, e, r))
    finite = r.isfinite() & e.isfinite()
    scale = r[finite].norm().clamp_min(1e-6)
    compiled_error = ((a - r)[finite].norm() / scale).item()
    eager_error = ((e - r)[finite].norm() / scale).item()

    def same(x, y):
        return (x == y) | (x.isnan() & y.isnan())

    elsewhere = ~finite & ~(same(a, e) | same(a, r) | (a.isfinite() & r.isfinite()))
    if compiled_error != compiled_error:  # NaN where eager and the reference are finite
        compiled_error = float("inf")
    return compiled_error, eager_error, int(elsewhere.sum())


def _as_real(t):
    t = t.resolve_conj().resolve_neg()
    return torch.view_as_real(t.to(torch.complex128)) if t.is_complex() else t.to(torch.float64)


def _assert_same_requires_grad(actual, expected) -> None:
    leaves = zip(pytree.tree_leaves(actual), pytree.tree_leaves(expected), strict=True)
    for i, (a, e) in enumerate(leaves):
        if isinstance(e, torch.Tensor):
            assert a.requires_grad == e.requires_grad, f"output {i}: requires_grad differs"
