"""ember.compile of a module, a module's other method, torch.nn.functional functions and
functions calling disabled methods: graph and op counts equal torch.compile's, results
(and gradients) eager's."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import ember
from dynamo_capture.testing import CountingBackend, assert_same


class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).relu()

    def encode(self, x, k=2):
        return self.linear(x) * k


class _TrainingBranch(nn.Module):
    def forward(self, x):
        return x * 2 if self.training else x


class _DisabledHelper(nn.Module):
    def forward(self, x):
        return self.helper(x.sin()).cos()

    @torch.compiler.disable
    def helper(self, a):
        return a * 2


def _summed(module):
    return lambda x: module(x).sum()


def _checkpointed(module):
    return lambda x: checkpoint(module, x, use_reentrant=False)


def _inputs(grad=False):
    return torch.linspace(-2, 2, 16).reshape(4, 4).requires_grad_(grad)


# name -> a factory of (what to compile, whether its input requires grad); each side of a
# comparison makes its own
TARGETS = {
    "module_method": lambda: (_Encoder().encode, False),
    "module": lambda: (_Encoder(), False),
    "method_with_keyword": lambda: (functools.partial(_Encoder().encode, k=3), False),
    "functional_gelu": lambda: (F.gelu, False),
    "functional_softmax_in_lambda": lambda: (lambda x: F.softmax(x, dim=-1), False),
    "functional_layer_norm_partial": lambda: (
        functools.partial(F.layer_norm, normalized_shape=(4,)),
        False,
    ),
    "torch_function": lambda: (torch.sin, False),
    "disabled_method_of_a_module": lambda: (_DisabledHelper(), False),
    "gradient_through_a_module": lambda: (_summed(_Encoder()), True),
    "checkpointed_module": lambda: (_checkpointed(_Encoder()), True),
}


def _results(target, grad, compile_fn):
    compiled = compile_fn(target)
    results = []
    for _ in range(2):
        x = _inputs(grad)
        out = compiled(x)
        if grad:
            out.sum().backward()
            results.append((out.detach(), x.grad))
        else:
            results.append(out)
    return results


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_compile_target_like_torch(name):
    import torch._dynamo
    import torch._dynamo.testing

    expected = _results(*TARGETS[name](), lambda fn: fn)
    counter = CountingBackend()
    got = _results(*TARGETS[name](), lambda fn: ember.compile(fn, backend=counter))
    assert_same(got, expected)
    torch._dynamo.reset()
    reference = torch._dynamo.testing.CompileCounter()
    _results(*TARGETS[name](), lambda fn: torch.compile(fn, backend=reference))
    torch._dynamo.reset()
    assert (counter.frame_count, counter.op_count) == (reference.frame_count, reference.op_count)


def test_eval_between_calls_recompiles_like_torch():
    counts = []
    for compile_fn in (
        lambda fn, backend: ember.compile(fn, backend=backend),
        lambda fn, backend: torch.compile(fn, backend=backend),
    ):
        import torch._dynamo
        import torch._dynamo.testing

        torch._dynamo.reset()
        module = _TrainingBranch()
        counter = torch._dynamo.testing.CompileCounter()
        compiled = compile_fn(module, counter)
        x = _inputs()
        assert_same(compiled(x), x * 2)
        module.eval()
        assert_same(compiled(x), x)
        assert_same(compiled(x), x)
        counts.append((counter.frame_count, counter.op_count))
    torch._dynamo.reset()
    assert counts[0] == counts[1]
