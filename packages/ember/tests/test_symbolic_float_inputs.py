"""Python float arguments traced symbolically through aot_autograd and inductor_codegen.

Under dynamic=True a float argument (or a float attribute of a module argument) is
symbolic from the first call, as in torch.compile: capture passes it as a 0-d
float64 tensor read with `.item()`, aot_autograd traces that read as the float's
symbol (arithmetic on it as symbolic nodes), and inductor_codegen reads it once
per call in the wrapper and passes it to kernels as a scalar argument. Without
dynamic=True the first call is static and a change of the value recompiles once
(automatic dynamic). Every call is checked against eager, values and gradients,
and the compile counts are checked: one capture, and no graph compiled per value
behind it (aot_autograd's static fallback, logged on `ember.dynamic`).
"""

from __future__ import annotations

import contextlib
import logging
import math

import pytest
import torch
import torch.nn.functional as F

import ember
from ember.api import compiled_callable_of

BACKENDS = ["aot_eager", "inductor"]
SCALES = [0.5, 1.5, 2.5, 0.25]


def scale_by_float(x, s):
    return x * s


def float_arithmetic(x, s):
    return x * (s * 2 + 1) - math.sqrt(s)


def float_as_operator_argument(x, s):
    return x.clamp(min=-s, max=s) + F.leaky_relu(x, s) + torch.full_like(x, s)


def float_in_a_reduction(x, s):
    return (x.sin() * s).sum(0) / (s + 1)


PROGRAMS = [scale_by_float, float_arithmetic, float_as_operator_argument, float_in_a_reduction]


@contextlib.contextmanager
def _dynamic_log():
    """The messages of the `ember.dynamic` log while the block runs."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger("ember.dynamic")
    handler, level = Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _check_calls(compiled, fn, scales, shape=(3, 4)):
    """Each call's result and gradient equal eager's."""
    for s in scales:
        x = torch.randn(*shape, requires_grad=True)
        x_eager = x.detach().clone().requires_grad_()
        got, expected = compiled(x, s), fn(x_eager, s)
        torch.testing.assert_close(got, expected, equal_nan=True)
        (grad,) = torch.autograd.grad(got.sum(), x)
        (grad_expected,) = torch.autograd.grad(expected.sum(), x_eager)
        torch.testing.assert_close(grad, grad_expected, equal_nan=True)


def _static_compiles(messages: list[str]) -> list[str]:
    return [m for m in messages if "static" in m]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda fn: fn.__name__)
def test_float_argument_compiles_once_under_dynamic_true(fn, backend):
    torch.manual_seed(0)
    compiled = ember.compile(fn, backend=backend, dynamic=True)
    with _dynamic_log() as messages:
        _check_calls(compiled, fn, SCALES)
    assert len(compiled_callable_of(compiled).entries) == 1
    assert not _static_compiles(messages), messages


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_argument_and_sizes_both_symbolic(backend):
    torch.manual_seed(0)
    compiled = ember.compile(float_arithmetic, backend=backend, dynamic=True)
    with _dynamic_log() as messages:
        for rows, s in zip([3, 5, 8], SCALES):
            _check_calls(compiled, float_arithmetic, [s], shape=(rows, 4))
    assert len(compiled_callable_of(compiled).entries) == 1
    assert not _static_compiles(messages), messages


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_attribute_of_a_module_compiles_once_under_dynamic_true(backend):
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)
            self.scale = 0.5

        def forward(self, x):
            return self.linear(x) * self.scale + self.scale**2

    torch.manual_seed(0)
    module = Scaled()
    compiled = ember.compile(module, backend=backend, dynamic=True)
    for scale in SCALES:
        module.scale = scale
        x = torch.randn(3, 4)
        got, expected = compiled(x), module(x)
        torch.testing.assert_close(got, expected)
        grads = torch.autograd.grad(got.sum(), list(module.parameters()))
        grads_expected = torch.autograd.grad(expected.sum(), list(module.parameters()))
        torch.testing.assert_close(grads, grads_expected)
    assert len(compiled_callable_of(compiled).entries) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_automatic_dynamic_float_first_call_static_then_symbolic(backend):
    torch.manual_seed(0)
    compiled = ember.compile(float_arithmetic, backend=backend)
    runner = compiled_callable_of(compiled)
    _check_calls(compiled, float_arithmetic, [0.5])
    assert len(runner.entries) == 1
    _check_calls(compiled, float_arithmetic, [0.5, 1.5])  # the change recompiles once
    assert len(runner.entries) == 2
    with _dynamic_log() as messages:
        _check_calls(compiled, float_arithmetic, [2.5, 0.25, 3.5])
    assert len(runner.entries) == 2
    assert not _static_compiles(messages), messages


@pytest.mark.parametrize("backend", BACKENDS)
def test_symbolic_float_keeps_type_and_nan_guards(backend):
    # an int after a float recompiles (type guard); nan is specialized (guarded)
    torch.manual_seed(0)
    compiled = ember.compile(float_arithmetic, backend=backend, dynamic=True)
    _check_calls(compiled, float_arithmetic, [0.5, 2, 1.5, float("nan"), 2.5, 3])
    runner = compiled_callable_of(compiled)
    assert len(runner.entries) == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_symbolic_float_decision_in_code_stays_guarded(backend):
    def branch(x, s):
        if s > 1.0:
            return x * s
        return x - s

    torch.manual_seed(0)
    compiled = ember.compile(branch, backend=backend, dynamic=True)
    _check_calls(compiled, branch, [0.5, 1.5, 2.5, 0.75, 1.0])
    assert len(compiled_callable_of(compiled).entries) == 2


def test_inductor_reads_a_float_input_once_in_the_wrapper():
    compiled = ember.compile(float_arithmetic, backend="inductor", dynamic=True)
    with torch.no_grad():
        for s in SCALES:
            x = torch.randn(3, 4)
            torch.testing.assert_close(compiled(x, s), float_arithmetic(x, s))
    wrapper = ember.last_artifacts(compiled).wrapper
    assert ".item()" in wrapper, wrapper


def test_gpt2_training_over_sequence_lengths_traces_once():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_head=4, n_embd=64, vocab_size=100, n_positions=64, bos_token_id=0,
        eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).train()
    compiled = ember.compile(model, backend="aot_eager", dynamic=True)

    def step(module, ids):
        for parameter in model.parameters():
            parameter.grad = None
        logits = module(ids).logits
        logits.sum().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    with _dynamic_log() as messages:
        for length in [3, 5, 8, 11]:
            ids = torch.randint(0, 100, (2, length))
            logits, grads = step(compiled, ids)
            expected_logits, expected_grads = step(model, ids)
            torch.testing.assert_close(logits, expected_logits, rtol=1e-4, atol=1e-4)
            for name, grad in expected_grads.items():
                torch.testing.assert_close(grads[name], grad, rtol=1e-3, atol=1e-4, msg=name)
    runner = compiled_callable_of(compiled)
    assert len(runner.entries) == 1 and not runner.graph_breaks
    assert not _static_compiles(messages), messages


def float_exponent(x, s):
    return x.abs() ** s


def float_weight_of_lerp(x, s):
    return torch.lerp(x, x.sin(), s)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [float_exponent, float_weight_of_lerp], ids=lambda fn: fn.__name__)
def test_float_value_decided_in_a_backward_formula_is_checked_per_call(fn, backend):
    # pow's and lerp's backward formulas decide on the float's value (`exponent == 0`,
    # `weight < 0.5`): the graph traced for one value must not run for another
    torch.manual_seed(0)
    compiled = ember.compile(fn, backend=backend, dynamic=True)
    _check_calls(compiled, fn, [0.5, 1.5, 0.25, 0.75, 0.5])


def float_base_of_a_power(x, s):
    return torch.pow(s, x)


def float_base_and_exponent(x, s):
    return torch.pow(s, x.tanh()) * x.abs() ** s


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dynamic", [None, True], ids=["automatic", "dynamic"])
@pytest.mark.parametrize(
    "fn", [float_base_of_a_power, float_base_and_exponent], ids=lambda fn: fn.__name__
)
def test_float_a_backward_formula_cannot_take_symbolic_compiles_per_value(fn, dynamic, backend):
    # `s ** x` differentiates to `log(s) * s ** x`: a float the backward formula needs
    # as a number becomes a constant, guarded equal, rather than failing the compile
    torch.manual_seed(0)
    compiled = ember.compile(fn, backend=backend, dynamic=dynamic)
    _check_calls(compiled, fn, [0.5, 1.5, 2.5, 0.5, 0.75])


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_input_specialized_by_capture_compiles_per_value(backend):
    # layer_norm's eps is specialized (guarded equal): each value's graph reads its own
    # constant, though the captured code (`item = s.item()`) is the same for every value
    def normalized(x, s):
        return F.layer_norm(x, (4,), eps=s)

    torch.manual_seed(0)
    compiled = ember.compile(normalized, backend=backend, dynamic=True)
    _check_calls(compiled, normalized, [0.5, 1.5, 0.25, 1.5 + 1e-12])


class _NormBlock(torch.nn.Module):
    def __init__(self, eps, scale):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.eps = eps
        self.scale = scale

    def forward(self, x):
        h = F.layer_norm(x, (8,), eps=self.eps)
        h = self.linear(h).relu() * self.scale + h.sin() - h.cos() * 2 + h.exp().tanh()
        return x + h.sigmoid() * h


class _Blocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([_NormBlock(10.0**-i, 0.5 * i) for i in range(4)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


@pytest.mark.parametrize("backend", BACKENDS)
def test_repeated_blocks_with_their_own_float_attributes_are_not_one_region(backend):
    # each block's eps is a float input capture specializes (read with `.item()`, its
    # value only in the read's meta): blocks with other values are other regions
    torch.manual_seed(0)
    model = _Blocks()
    compiled = ember.compile(model, backend=backend, dynamic=True)
    x = torch.randn(3, 8, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    got, expected = compiled(x), model(x_eager)
    torch.testing.assert_close(got, expected)
    (grad,) = torch.autograd.grad(got.sum(), x)
    (grad_expected,) = torch.autograd.grad(expected.sum(), x_eager)
    torch.testing.assert_close(grad, grad_expected)
