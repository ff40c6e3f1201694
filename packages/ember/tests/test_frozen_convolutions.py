"""Inference graphs on the CPU fold eval-mode batch norms (and other per-channel affine maps)
into prepacked oneDNN convolution weights (inductor_codegen.frozen_convolutions), kept
across calls while the tensors they come from keep their bytes.

| footgun                                                      | without the check   |
| ------------------------------------------------------------ | ------------------- |
| a write that bumps no version counter (`.data`, fused Adam)  | silent wrong result |
| an in-place write under no_grad / inference_mode             | silent wrong result |
| running statistics changed by a train() pass                 | silent wrong result |
| a parameter replaced (`.data =`, load_state_dict)            | silent wrong result |
| a fold every call when nothing changed                       | slowdown            |
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import ember

frozen = pytest.importorskip("inductor_codegen.frozen_convolutions")
pytestmark = pytest.mark.skipif(not frozen.available(), reason="torch without oneDNN")

TOL = {"rtol": 1e-4, "atol": 1e-4}
# The fold is opt-in: each call compares the source tensors' bytes.
FOLD = {"fold_convolutions": True}


class ConvBnResidual(torch.nn.Module):
    """conv-BN-ReLU, then conv-BN + a residual add and a ReLU, then a pool."""

    def __init__(self, channels: int = 8):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, channels, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)
        self.conv3 = torch.nn.Conv2d(channels, channels, 3, stride=2, padding=1, groups=channels)
        self.bn3 = torch.nn.BatchNorm2d(channels)
        self.fc = torch.nn.Linear(channels, 4)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)) + x)
        x = torch.nn.functional.max_pool2d(torch.relu(self.bn3(self.conv3(x))), 2)
        return self.fc(x.mean((2, 3)))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = ConvBnResidual()
    _randomize_statistics(model)
    return model.eval()


def _randomize_statistics(model) -> None:
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)


@pytest.fixture
def folds(monkeypatch):
    """How many times any compiled graph folded its weights."""
    count = {"folds": 0}
    fold = frozen.FoldedWeights._fold

    def counted(self, args):
        count["folds"] += 1
        return fold(self, args)

    monkeypatch.setattr(frozen.FoldedWeights, "_fold", counted)
    return count


def _infer(fn, x):
    with torch.no_grad():
        return fn(x)


def test_folded_inference_matches_eager_and_folds_once(folds):
    model = _model()
    compiled = ember.compile(model, backend="inductor", options=FOLD)
    x = torch.randn(4, 3, 16, 16)
    for _ in range(3):
        assert_close(_infer(compiled, x), _infer(model, x), **TOL)
    assert folds["folds"] == 1  # folded at the first call, kept after


def test_inference_mode_matches_eager(folds):
    model = _model()
    compiled = ember.compile(model, backend="inductor", options=FOLD)
    x = torch.randn(4, 3, 16, 16)
    with torch.inference_mode():
        assert_close(compiled(x), model(x), **TOL)
        assert_close(compiled(x), model(x), **TOL)
    assert folds["folds"] == 1


@pytest.mark.parametrize("options", [{}, {"fold_convolutions": False}], ids=["default", "off"])
def test_fold_is_off_unless_asked(folds, options):
    model = _model()
    compiled = ember.compile(model, backend="inductor", options=options)
    x = torch.randn(4, 3, 16, 16)
    assert_close(_infer(compiled, x), _infer(model, x), **TOL)
    assert folds["folds"] == 0


def _scale_through_data(model):
    model.conv2.weight.data.mul_(0.5)  # bumps no version counter


def _scale_under_no_grad(model):
    with torch.no_grad():
        model.bn1.weight.mul_(2.0)


def _scale_in_inference_mode(model):
    with torch.inference_mode():
        model.conv1.bias.add_(1.0)


def _write_running_var_through_numpy(model):
    model.bn2.running_var.numpy()[:] = 3.0  # bumps no version counter either


def _replace_data(model):
    model.conv3.weight.data = torch.randn_like(model.conv3.weight)


def _load_state_dict(model):
    state = {k: torch.randn_like(v) if v.is_floating_point() else v
             for k, v in model.state_dict().items()}  # fmt: skip
    for name, value in state.items():
        if "running_var" in name:
            value.abs_().add_(0.1)
    model.load_state_dict(state)


def _fused_adam_step(model):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1, fused=True)
    x = torch.randn(4, 3, 16, 16)
    model(x).square().mean().backward()
    optimizer.step()  # writes every parameter without bumping its version
    model.zero_grad(set_to_none=True)


@pytest.mark.parametrize(
    "update",
    [
        _scale_through_data,
        _scale_under_no_grad,
        _scale_in_inference_mode,
        _write_running_var_through_numpy,
        _replace_data,
        _load_state_dict,
        _fused_adam_step,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
def test_weights_updated_between_calls_give_eager_values(update, folds):
    model = _model()
    compiled = ember.compile(model, backend="inductor", options=FOLD)
    x = torch.randn(4, 3, 16, 16)
    before = _infer(compiled, x)
    assert_close(before, _infer(model, x), **TOL)
    update(model)
    after = _infer(compiled, x)
    assert_close(after, _infer(model, x), **TOL)
    assert not torch.allclose(before, after)  # the update did change the output
    assert folds["folds"] == 2


def test_train_and_eval_switches(folds):
    model = _model()
    compiled = ember.compile(model, backend="inductor", options=FOLD)
    x = torch.randn(4, 3, 16, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference = ConvBnResidual()
    reference.load_state_dict(model.state_dict())
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        assert_close(_infer(compiled, x), _infer(reference.eval(), x), **TOL)
        model.train()
        reference.train()
        loss = compiled(x).square().mean()
        expected = reference(x).square().mean()
        assert_close(loss, expected, **TOL)
        loss.backward()
        expected.backward()
        optimizer.step()
        reference_optimizer.step()
        optimizer.zero_grad()
        reference_optimizer.zero_grad()
        model.eval()
        assert_close(model.bn1.running_mean, reference.bn1.running_mean, **TOL)
    assert_close(_infer(compiled, x), _infer(reference.eval(), x), **TOL)
    assert folds["folds"] == 3  # each eval phase after a training step folds again


def test_eval_batch_norm_in_a_training_graph_is_not_folded(folds):
    """Gradients to frozen-statistics batch norm layers (fine-tuning in eval mode) go
    through the unfolded graph."""
    model = _model()
    compiled = ember.compile(model, backend="inductor", options=FOLD)
    x = torch.randn(4, 3, 16, 16)
    compiled(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for got, expected in zip(grads, [p.grad for p in model.parameters()]):
        assert_close(got, expected, **TOL)
    assert folds["folds"] == 0


class ConvOutputs(torch.nn.Module):
    """Folds whose outputs the user gets, a scale and shift written by hand, and a
    per-sample scale that is not per channel (not folded)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(6)
        self.conv2 = torch.nn.Conv2d(6, 6, 1)
        self.scale = torch.nn.Parameter(torch.rand(6, 1, 1) + 0.5)
        self.shift = torch.nn.Parameter(torch.randn(1, 6, 1, 1))
        self.conv3 = torch.nn.Conv2d(6, 6, 1)

    def forward(self, x, gate):
        a = self.bn1(self.conv1(x))
        b = 2.0 - (self.conv2(a) / self.scale) * 3.0 + self.shift
        c = self.conv3(b) * gate  # gate: [N, 1, 1, 1], per sample
        return a, b, c


def test_visible_outputs_hand_written_affine_and_per_sample_scales(folds):
    torch.manual_seed(0)
    model = ConvOutputs()
    _randomize_statistics(model)
    model.eval()
    compiled = ember.compile(model, backend="inductor", options=FOLD)
    x, gate = torch.randn(4, 3, 8, 8), torch.randn(4, 1, 1, 1)
    with torch.no_grad():
        for got, expected in zip(compiled(x, gate), model(x, gate)):
            assert_close(got, expected, **TOL)
            assert got.stride() == expected.stride()
        gate = torch.randn(4, 1, 1, 1)  # a new per-sample input: no fold again
        for got, expected in zip(compiled(x, gate), model(x, gate)):
            assert_close(got, expected, **TOL)
        model.scale.data.mul_(2.0)
        for got, expected in zip(compiled(x, gate), model(x, gate)):
            assert_close(got, expected, **TOL)
    assert folds["folds"] == 2


def _block() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(8, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU()
    )


class RepeatedBlocks(torch.nn.Module):
    """Identical blocks: one compiled region runs for each, with its own weights."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(_block() for _ in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


@pytest.mark.parametrize("regional", [True, False])
def test_repeated_blocks_keep_one_fold_each(regional, folds):
    torch.manual_seed(0)
    model = RepeatedBlocks()
    _randomize_statistics(model)
    model.eval()
    compiled = ember.compile(model, backend="inductor", options={**FOLD, "regional": regional})
    x = torch.randn(4, 8, 8, 8)
    assert_close(_infer(compiled, x), _infer(model, x), **TOL)
    first = folds["folds"]
    assert 1 <= first <= 3  # one graph, or one region per block
    for _ in range(2):
        assert_close(_infer(compiled, x), _infer(model, x), **TOL)
    assert folds["folds"] == first  # each block's fold kept, none made again
    model.blocks[1][1].running_mean.data.add_(1.0)
    assert_close(_infer(compiled, x), _infer(model, x), **TOL)
    assert folds["folds"] == first + 1


def test_frozen_parameters_with_grad_enabled(folds):
    """Parameters with requires_grad=False called with grad mode on: an inference graph."""
    model = _model()
    model.requires_grad_(False)
    compiled = ember.compile(model, backend="inductor", options=FOLD)
    x = torch.randn(4, 3, 16, 16)
    assert_close(compiled(x), model(x), **TOL)
    model.conv1.weight.data.mul_(-1.0)
    assert_close(compiled(x), model(x), **TOL)
    assert folds["folds"] == 2
