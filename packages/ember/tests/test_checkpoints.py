"""Checkpoints of compiled modules, against torch.compile's OptimizedModule as the reference:
state_dict keys with the `_orig_mod.` prefix, load_state_dict of both forms, torch.save /
pickle / copy.deepcopy (the copy compiles again)."""

import copy
import io
import pickle

import pytest
import torch

import ember


class CountingBackend:
    """A picklable backend (module level) that counts its compiles."""

    compiles = 0

    def __call__(self, gm, example_inputs):
        type(self).compiles += 1
        return gm.forward


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.norm = torch.nn.BatchNorm1d(3)

    def forward(self, x):
        return self.norm(self.linear(x)).relu()


def _randomized(module):
    with torch.no_grad():
        for tensor in module.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(torch.rand_like(tensor) + 0.5)
    return module


def test_state_dict_keys_match_torch_compile():
    net = Net()
    reference = torch.compile(net, backend="eager")
    compiled = ember.compile(net, backend="eager")
    assert list(compiled.state_dict()) == list(reference.state_dict())
    assert all(k.startswith("_orig_mod.") for k in compiled.state_dict())
    for key, value in compiled.state_dict().items():
        assert value is not None and torch.equal(value, reference.state_dict()[key])


def test_parent_module_sees_the_prefix_as_with_torch_compile():
    parent = torch.nn.Sequential(Net())
    reference = torch.nn.Sequential(torch.compile(Net(), backend="eager"))
    parent[0] = ember.compile(parent[0], backend="eager")
    assert list(parent.state_dict()) == list(reference.state_dict())
    assert [n for n, _ in parent.named_parameters()] == [n for n, _ in reference.named_parameters()]
    source = _randomized(torch.nn.Sequential(Net()))
    parent.load_state_dict(source.state_dict())  # the plain form, nested
    parent.load_state_dict(parent.state_dict())  # the prefixed form, nested
    torch.testing.assert_close(parent[0].linear.weight, source[0].linear.weight)


@pytest.mark.parametrize("form", ["plain", "prefixed", "from_torch_compile"])
def test_load_state_dict_accepts_both_forms(form):
    source = _randomized(Net())
    if form == "plain":
        state = source.state_dict()
    elif form == "prefixed":
        state = ember.compile(source, backend="eager").state_dict()
    else:
        state = torch.compile(source, backend="eager").state_dict()
    target = Net()
    compiled = ember.compile(target, backend="eager")
    result = compiled.load_state_dict(state)
    assert not result.missing_keys and not result.unexpected_keys
    for key, value in source.state_dict().items():
        torch.testing.assert_close(target.state_dict()[key], value)
    x = torch.randn(5, 4)
    target.eval(), source.eval()
    torch.testing.assert_close(compiled(x), source(x))


def test_ember_checkpoint_loads_into_torch_compile():
    source = _randomized(Net())
    state = ember.compile(source, backend="eager").state_dict()
    reference = torch.compile(Net(), backend="eager")
    reference.load_state_dict(state)
    torch.testing.assert_close(reference._orig_mod.linear.weight, source.linear.weight)


def test_load_state_dict_strict_still_reports_wrong_keys():
    compiled = ember.compile(Net(), backend="eager")
    state = Net().state_dict()
    state["extra"] = torch.ones(1)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        compiled.load_state_dict(state)
    del state["extra"], state["linear.bias"]
    with pytest.raises(RuntimeError, match="Missing key"):
        compiled.load_state_dict(state)


def _roundtrip_torch_save(module):
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


@pytest.mark.parametrize(
    "copier",
    [_roundtrip_torch_save, lambda m: pickle.loads(pickle.dumps(m)), copy.deepcopy],
    ids=["torch_save", "pickle", "deepcopy"],
)
def test_compiled_module_copies_and_compiles_again(copier):
    net = _randomized(Net()).eval()
    compiled = ember.compile(net, backend=CountingBackend(), fullgraph=True)
    x = torch.randn(5, 4)
    expected = net(x)
    torch.testing.assert_close(compiled(x), expected)
    before = CountingBackend.compiles
    loaded = copier(compiled)
    reference = copier(torch.compile(net, backend="eager"))
    assert type(loaded) is ember.OptimizedModule
    assert type(reference._orig_mod) is type(loaded._orig_mod) is Net
    assert loaded._orig_mod is not net
    assert list(loaded.state_dict()) == list(reference.state_dict())
    assert ember.api.compiled_callable_of(loaded).fullgraph is True
    torch.testing.assert_close(loaded(x), expected)
    assert CountingBackend.compiles == before + 1  # compiled again after loading
    assert not loaded.training


def test_pickling_with_an_unpicklable_backend_names_it():
    compiled = ember.compile(Net(), backend=lambda gm, inputs: gm.forward)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError), match="lambda"):
        pickle.dumps(compiled)


def test_torch_save_of_the_state_dict_round_trips():
    compiled = ember.compile(_randomized(Net()), backend="eager")
    buffer = io.BytesIO()
    torch.save(compiled.state_dict(), buffer)
    buffer.seek(0)
    fresh = ember.compile(Net(), backend="eager")
    fresh.load_state_dict(torch.load(buffer))
    torch.testing.assert_close(fresh.linear.weight, compiled.linear.weight)
    torch.testing.assert_close(fresh.norm.running_var, compiled.norm.running_var)


def test_get_submodule_accepts_both_forms():
    net = Net()
    compiled = ember.compile(net, backend="eager")
    assert compiled.get_submodule("linear") is net.linear
    assert compiled.get_submodule("_orig_mod.linear") is net.linear
    assert compiled.get_submodule("_orig_mod") is net
    assert compiled.get_parameter("_orig_mod.linear.weight") is net.linear.weight
    assert compiled.get_buffer("norm.running_mean") is net.norm.running_mean
