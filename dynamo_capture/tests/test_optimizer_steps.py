"""`Optimizer.step` compiled as torch.compile compiles it (dynamo_capture.optimizer_steps):
torch's wrappers run eagerly, the step's body is one compiled frame, the missing state
initialised eagerly before it. Values are compared with eager after several steps
(parameters, gradients and every state tensor, `step` included); the counts against
torch.compile's are in test_corpus_training_loops.

| rank | footgun                                                       | test |
|------|---------------------------------------------------------------|------|
| 1    | state created ahead that the step would not create            | test_user_step_gets_no_state_ahead |
| 1    | a new parameter or group after the first capture              | test_param_group_added_compiles_again |
| 1    | a capturable step on the CPU compiled without its device check| test_capturable_step_raises_as_eager |
| 3    | the step left eager where torch.compile compiles it           | test_step_is_one_graph |
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import dynamo_capture
from dynamo_capture.optimizer_steps import initialise_state, optimizer_step_cell
from dynamo_capture.testing import CountingBackend, assert_same

OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "sgd_nesterov_foreach": lambda p: torch.optim.SGD(
        p, lr=0.1, momentum=0.9, nesterov=True, foreach=True
    ),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "adam_foreach_false_weight_decay": lambda p: torch.optim.Adam(
        p, lr=0.01, foreach=False, weight_decay=0.1
    ),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01),
    "rmsprop_centered": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
    "rmsprop_foreach": lambda p: torch.optim.RMSprop(p, lr=0.01, foreach=True),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
    "adagrad_foreach": lambda p: torch.optim.Adagrad(p, lr=0.1, foreach=True),
}


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def _train(make_opt, compile_fn, steps=4, before=None):
    model = _model()
    opt = make_opt(model.parameters())

    def step():
        opt.step()

    compiled = compile_fn(step)
    data = torch.randn(5, 3, generator=torch.Generator().manual_seed(1))
    for index in range(steps):
        opt.zero_grad()
        model(data * (index + 1)).pow(2).mean().backward()
        if before is not None:
            before(index, model, opt)
        compiled()
    return {
        "params": [p.detach().clone() for p in model.parameters()],
        "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        "state": copy.deepcopy(opt.state_dict()),
    }


def _compare(make_opt, before=None):
    expected = _train(make_opt, lambda fn: fn, before=before)
    backend = CountingBackend()
    got = _train(make_opt, lambda fn: dynamo_capture.optimize(fn, backend=backend), before=before)
    assert_same(got, expected)
    return backend


# compiled (Adamax, NAdam, Adadelta, Rprop: one graph each) or left eager where capture
# breaks (fused steps, RAdam's and ASGD's data-dependent branches): eager's values
MORE_OPTIMIZERS = {
    "adam_fused": lambda p: torch.optim.Adam(p, lr=0.01, fused=True),
    "sgd_fused": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, fused=True),
    "adamax": lambda p: torch.optim.Adamax(p),
    "nadam": lambda p: torch.optim.NAdam(p),
    "radam": lambda p: torch.optim.RAdam(p),
    "adadelta": lambda p: torch.optim.Adadelta(p),
    "asgd": lambda p: torch.optim.ASGD(p),
    "rprop": lambda p: torch.optim.Rprop(p),
}


@pytest.mark.parametrize("name", sorted(MORE_OPTIMIZERS))
def test_more_optimizers_equal_eager(name):
    _compare(MORE_OPTIMIZERS[name])


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_steps_equal_eager(name):
    backend = _compare(OPTIMIZERS[name])
    assert backend.frame_count >= 1, "the step ran eagerly"


def test_step_is_one_graph():
    """Adam's state exists from the first step on (created ahead): one graph, no
    recompile over four steps."""
    backend = _compare(OPTIMIZERS["adam"])
    assert backend.frame_count == 1


def test_user_subclass_without_its_own_step_compiles():
    class MyAdam(torch.optim.Adam):
        pass

    backend = _compare(lambda p: MyAdam(p, lr=0.01))
    assert backend.frame_count == 1


def test_user_step_gets_no_state_ahead():
    """A user's step overriding Adam's never calls `_init_group`: nothing is created
    ahead (the state stays as eager leaves it, empty)."""

    class PlainSGD(torch.optim.Adam):
        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.add_(p.grad, alpha=-group["lr"])

    _compare(lambda p: PlainSGD(p, lr=0.1))


def test_param_group_added_compiles_again():
    extra = nn.Parameter(torch.ones(3))

    def before(index, model, opt):
        extra.grad = torch.full((3,), 0.5)
        if index == 2:
            opt.add_param_group({"params": [extra], "lr": 0.05})

    _compare(OPTIMIZERS["adam"], before=before)


def test_grad_set_to_none_between_steps():
    def before(index, model, opt):
        if index % 2:
            model[0].bias.grad = None

    _compare(OPTIMIZERS["adam"], before=before)
    _compare(OPTIMIZERS["sgd_momentum"], before=before)


def test_state_cleared_between_steps_is_created_again():
    """`opt.state[p]` emptied (or the whole state dropped) after a compiled step: created
    again ahead, as the step would create it, and compiled again."""

    def before(index, model, opt):
        if index == 1:
            opt.state[model[0].weight].clear()
        if index == 2:
            opt.state.clear()

    for name in ("adam", "sgd_momentum", "rmsprop_centered"):
        _compare(OPTIMIZERS[name], before=before)


@pytest.mark.parametrize("name", ["adam", "sgd_momentum"])
def test_steps_in_a_loop_and_with_other_work(name):
    """Two steps in a loop of the compiled function, and a step between tensor work."""

    def program(compile_fn):
        model = _model()
        opt = OPTIMIZERS[name](model.parameters())
        data = torch.randn(5, 3, generator=torch.Generator().manual_seed(3))

        def twice():
            for _ in range(2):
                opt.step()

        def around(x):
            y = x * 2
            opt.step()
            return y + model[0].weight.sum()

        compiled_twice, compiled_around = compile_fn(twice), compile_fn(around)
        results = []
        for index in range(3):
            opt.zero_grad()
            model(data + index).pow(2).mean().backward()
            compiled_twice()
            results.append(compiled_around(data))
        return results, [p.detach().clone() for p in model.parameters()], opt.state_dict()

    expected = program(lambda fn: fn)
    got = program(lambda fn: dynamo_capture.optimize(fn, backend=CountingBackend()))
    assert_same(got, expected)


def test_capturable_step_raises_as_eager():
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True)
    model(torch.randn(5, 3)).sum().backward()
    with pytest.raises(AssertionError) as eager_error:
        opt.step()
    compiled = dynamo_capture.optimize(lambda: opt.step(), backend=CountingBackend())
    with pytest.raises(AssertionError) as compiled_error:
        compiled()
    assert str(compiled_error.value) == str(eager_error.value)


def test_step_with_a_closure_matches_eager():
    def program(compile_fn):
        model = _model()
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        data = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))

        def closure():
            opt.zero_grad()
            loss = model(data).pow(2).mean()
            loss.backward()
            return loss

        compiled = compile_fn(lambda: opt.step(closure))
        losses = [compiled().detach() for _ in range(3)]
        return losses, [p.detach().clone() for p in model.parameters()], opt.state_dict()

    expected = program(lambda fn: fn)
    got = program(lambda fn: dynamo_capture.optimize(fn, backend=CountingBackend()))
    assert_same(got, expected)


def test_step_cell_finds_the_body_under_torch_wrappers():
    cell, body = optimizer_step_cell(torch.optim.SGD.step)
    assert body.__qualname__ == "SGD.step" and body.__module__ == "torch.optim.sgd"
    assert cell.cell_contents is body
    assert optimizer_step_cell(torch.optim.Optimizer.zero_grad) is None
    assert optimizer_step_cell(lambda: None) is None


def test_state_initialised_ahead_as_the_step_would():
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(5, 3)).sum().backward()
    model[2].bias.grad = None
    _, body = optimizer_step_cell(type(opt).step)
    initialise_state(opt, body)
    assert set(map(id, opt.state)) == {id(p) for p in model.parameters() if p.grad is not None}
    for p in opt.state:
        assert sorted(opt.state[p]) == ["exp_avg", "exp_avg_sq", "step"]
        assert opt.state[p]["step"].item() == 0
