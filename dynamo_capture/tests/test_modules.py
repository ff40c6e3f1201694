"""nn.Module capture: forward inlined, parameters lifted, hooks, containers, buffers, flags."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dynamo_capture

torch.manual_seed(2)


class MLP(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.act = nn.GELU()

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """A pre-norm transformer block in plain torch."""

    def __init__(self, d=16, heads=4, causal=True):
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.ln1 = nn.LayerNorm(d)
        self.ln2 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.dropout = nn.Dropout(0.0)
        self.register_buffer("mask", torch.tril(torch.ones(32, 32)).view(1, 1, 32, 32))

    def attention(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if self.causal:
            att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = self.dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Transformer(nn.Module):
    def __init__(self, vocab=50, d=16, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, 32, d) * 0.02)
        self.blocks = nn.ModuleList([Block(d) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied weights

    def forward(self, ids, targets=None):
        x = self.embed(ids) + self.pos[:, : ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class WithDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.branches = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Linear(4, 4)})
        self.seq = nn.Sequential(nn.ReLU(), nn.Linear(4, 4))

    def forward(self, x):
        out = sum(branch(x) for branch in self.branches.values())
        for name in self.branches:
            out = out + self.branches[name].bias
        for i, layer in enumerate(self.seq):
            out = layer(out) * (i + 1)
        return out + self.seq[-1](x) + len(self.seq)


class TrainingFlag(nn.Module):
    def forward(self, x):
        if self.training:
            return x * 2
        return x - 1


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


class Residual(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, *, scale=1.0):
        return x + scale * self.inner(x)


class StaticAndClass(nn.Module):
    eps = 1e-5

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4))

    @staticmethod
    def norm(x, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    @property
    def scaled_weight(self):
        return self.weight * 2

    def forward(self, x):
        return self.norm(x, self.eps) * self.scaled_weight


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(4, 4)

    def forward(self, xs):
        h = torch.zeros(xs.shape[1], 4)
        outs = []
        for t in range(xs.shape[0]):
            h = self.cell(xs[t], h)
            outs.append(h)
        return torch.stack(outs)


def run_both(module, *args, train=False, **kwargs):
    """Compile a copy of `module`; compare outputs, gradients and state with eager."""
    eager = copy.deepcopy(module).train(train)
    target = copy.deepcopy(module).train(train)
    backend_graphs = []

    def backend(gm, example_inputs):
        backend_graphs.append(gm)
        return gm.forward

    compiled = dynamo_capture.optimize(target, backend=backend, fullgraph=True)
    for _ in range(2):
        torch.manual_seed(0)
        expected = eager(*args, **kwargs)
        torch.manual_seed(0)
        got = compiled(*args, **kwargs)
        torch.testing.assert_close(got, expected)
        for (name, a), (_, b) in zip(
            target.state_dict().items(), eager.state_dict().items(), strict=True
        ):
            torch.testing.assert_close(a, b, msg=f"state {name} differs")
    assert len(compiled.entries) == 1
    assert len(backend_graphs) == 1
    return compiled, target, eager


@pytest.mark.parametrize(
    "module, args",
    [
        (MLP(), (torch.randn(3, 8),)),
        (Block(), (torch.randn(2, 7, 16),)),
        (Transformer(), (torch.randint(0, 50, (2, 9)),)),
        (WithDict(), (torch.randn(2, 4),)),
        (ConvNet(), (torch.randn(2, 3, 6, 6),)),
        (Residual(MLP(4)), (torch.randn(2, 4),)),
        (StaticAndClass(), (torch.randn(3, 4),)),
        (Recurrent(), (torch.randn(5, 2, 4),)),
        (nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), (torch.randn(3, 4),)),
        (nn.MultiheadAttention(8, 2, batch_first=True), (torch.randn(2, 5, 8),) * 3),
        (
            nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
            (torch.randn(2, 5, 8),),
        ),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, nn.Module) else "",
)
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_module_matches_eager(module, args, train):
    run_both(module, *args, train=train)


def test_transformer_training_step_matches_eager():
    model = Transformer()
    ids, targets = torch.randint(0, 50, (2, 9)), torch.randint(0, 50, (2, 9))
    eager, target = copy.deepcopy(model), copy.deepcopy(model)
    compiled = dynamo_capture.optimize(target, backend=lambda gm, ex: gm.forward, fullgraph=True)
    _, loss_eager = eager(ids, targets)
    _, loss_compiled = compiled(ids, targets)
    loss_eager.backward()
    loss_compiled.backward()
    torch.testing.assert_close(loss_compiled, loss_eager)
    for (name, a), (_, b) in zip(target.named_parameters(), eager.named_parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, msg=f"grad of {name}")


def test_batchnorm_running_stats_updated_like_eager():
    compiled, target, eager = run_both(ConvNet(), torch.randn(4, 3, 5, 5), train=True)
    assert target.bn.num_batches_tracked.item() == eager.bn.num_batches_tracked.item() == 2


def test_parameters_become_graph_inputs():
    compiled, _, _ = run_both(MLP(), torch.randn(3, 8))
    code = compiled.last_artifacts.graph_code
    # named as torch.compile names them, from where they are read
    assert "L_self_modules_fc1_parameters_weight_" in code
    assert "L_self_modules_fc2_parameters_bias_" in code
    assert "get_attr" not in code


def test_training_flag_is_guarded():
    module = TrainingFlag()
    compiled = dynamo_capture.optimize(module, backend=lambda gm, ex: gm.forward, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * 2)
    module.eval()
    torch.testing.assert_close(compiled(x), x - 1)
    assert len(compiled.entries) == 2
    assert "training" in compiled.last_artifacts.guard_code


def test_forward_hooks_are_honoured():
    module = MLP(4)
    calls = []
    module.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    module.register_forward_hook(lambda m, args, out: out + 1)
    module.fc1.register_forward_hook(lambda m, args, out: calls.append(1) if False else out * 3)
    compiled = dynamo_capture.optimize(module, backend=lambda gm, ex: gm.forward, fullgraph=True)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), module(x))


def test_adding_a_hook_after_compiling_runs_it_around_the_same_forward():
    # as torch.compile: the hook is a compiled frame of its own, the forward's is reused
    module = MLP(4)
    compiled = dynamo_capture.optimize(module, backend=lambda gm, ex: gm.forward, fullgraph=True)
    x = torch.randn(2, 4)
    compiled(x)
    handle = module.register_forward_hook(lambda m, args, out: out * 0)
    torch.testing.assert_close(compiled(x), torch.zeros(2, 4))
    handle.remove()
    torch.testing.assert_close(compiled(x), module(x))
    assert len(compiled.entries) == 1


def test_changing_a_parameter_in_place_needs_no_recompile():
    module = MLP(4)
    compiled = dynamo_capture.optimize(module, backend=lambda gm, ex: gm.forward, fullgraph=True)
    x = torch.randn(2, 4)
    compiled(x)
    with torch.no_grad():
        module.fc1.weight.mul_(2)
    torch.testing.assert_close(compiled(x), module(x))
    assert len(compiled.entries) == 1


def test_replacing_a_submodule_recompiles():
    module = Residual(MLP(4))
    compiled = dynamo_capture.optimize(module, backend=lambda gm, ex: gm.forward, fullgraph=True)
    x = torch.randn(2, 4)
    compiled(x)
    module.inner = nn.Identity()
    torch.testing.assert_close(compiled(x), x + x)


def test_bound_method_target():
    module = Block()
    compiled = dynamo_capture.optimize(
        module.attention, backend=lambda gm, ex: gm.forward, fullgraph=True
    )
    x = torch.randn(1, 4, 16)
    torch.testing.assert_close(compiled(x), module.attention(x))


def test_keyword_arguments_to_module():
    module = Residual(MLP(4))
    run_both(module, torch.randn(2, 4), scale=0.5)


DISTANCES = {
    "module": nn.PairwiseDistance(),
    "module_with_options": nn.CosineSimilarity(dim=-1),
    "lambda": lambda x, y: (x - y).abs().sum(-1),
}


@pytest.mark.parametrize("name", sorted(DISTANCES))
def test_torch_function_given_a_module_or_lambda_is_traced_through_it(name):
    """A torch function taking a callable (`distance_function=`) is inlined, so the callable
    is traced as well; a module object is never a constant in the graph's code."""
    distance = DISTANCES[name]

    def loss(a, p, n):
        return F.triplet_margin_with_distance_loss(a, p, n, distance_function=distance)

    compiled = dynamo_capture.optimize(loss, backend=lambda gm, ex: gm.forward, fullgraph=True)
    a, p, n = (torch.randn(3, 4) for _ in range(3))
    torch.testing.assert_close(compiled(a, p, n), loss(a, p, n))
