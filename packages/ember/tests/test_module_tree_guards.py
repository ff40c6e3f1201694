"""A compiled module tree is guarded as a whole: every change to it still recompiles.

The guards on a module tree (the root's identity, each submodule's class, training
flag where read, its hooks, its attributes, the keys of its `_modules`, the tensors of its
`_parameters` and `_buffers`) are checked in full only after nn.Module's own
mutation methods ran (guards/module_tree.py); the tensors' own metadata and the
modules' classes on every call. Each test compiles a nested
model, calls it, changes the tree in one way, and checks that the next call
gives eager's result.

| footgun                                              | without the check        |
| ---------------------------------------------------- | ------------------------ |
| a parameter replaced, resized or made frozen         | silent wrong result      |
| a submodule swapped, a hook added, `.eval()`         | silent wrong result      |
| `forward` or a method replaced on an instance/class  | silent wrong result      |
| parameters swapped by `torch.func.functional_call`   | silent wrong result      |
| `.data = other`, `t_()` / `set_()` of a parameter     | silent wrong result, reads past the end |
| `module.__class__` reassigned                        | silent wrong result      |
| `module.__dict__` reassigned                         | silent wrong result      |
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import ember

BACKENDS = ["eager", "aot_eager", "inductor"]


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.norm = torch.nn.BatchNorm1d(4)
        self.scale = 2.0
        self.register_buffer("offset", torch.linspace(0, 1, 4))

    def forward(self, x):
        return x + torch.relu(self.norm(self.fc(x))) * self.scale + self.offset


def _model(depth: int = 3) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[Block() for _ in range(depth)], torch.nn.Linear(4, 2)).eval()


def _compiled(backend: str):
    model = _model()
    compiled = ember.compile(model, backend=backend)
    x = torch.randn(3, 4)
    assert_close(compiled(x), model(x))
    assert_close(compiled(x), model(x))  # the second call takes the fast path
    return model, compiled, x


def _matches_eager(model, compiled, x) -> None:
    expected = model(x)
    actual = compiled(x)
    assert_close(actual, expected)
    assert actual.requires_grad == expected.requires_grad
    assert_close(compiled(x), model(x))  # and again, after the tree was re-checked


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_replaced_through_setattr_recompiles(backend):
    model, compiled, x = _compiled(backend)
    model[1].fc.weight = torch.nn.Parameter(torch.randn(4, 4))
    _matches_eager(model, compiled, x)
    model[1].fc.bias = None
    _matches_eager(model, compiled, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_data_resized_in_place_recompiles(backend):
    model, compiled, x = _compiled(backend)
    model[2].fc = torch.nn.Linear(4, 4)
    _matches_eager(model, compiled, x)
    with torch.no_grad():
        model[-1].weight.data = torch.randn(3, 4)
        model[-1].bias.data = torch.randn(3)
    _matches_eager(model, compiled, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_buffer_resized_in_place_recompiles(backend):
    model, compiled, x = _compiled(backend)
    with torch.no_grad():
        model[0].offset.resize_(1)
    _matches_eager(model, compiled, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_hook_added_and_removed_recompiles(backend):
    model, compiled, x = _compiled(backend)
    handle = model[1].fc.register_forward_hook(lambda module, args, out: out * 10)
    _matches_eager(model, compiled, x)
    handle.remove()
    _matches_eager(model, compiled, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_flag_of_a_submodule_changed_recompiles(backend):
    model, compiled, x = _compiled(backend)
    model[1].norm.train()
    _matches_eager(model, compiled, x)
    model.eval()
    _matches_eager(model, compiled, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_submodule_swapped_recompiles(backend):
    model, compiled, x = _compiled(backend)
    model[1].norm = torch.nn.Identity()
    _matches_eager(model, compiled, x)
    model[0] = torch.nn.Tanh()
    _matches_eager(model, compiled, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_submodule_inserted_into_container_recompiles(backend):
    model, compiled, x = _compiled(backend)
    model.insert(1, torch.nn.Tanh())
    _matches_eager(model, compiled, x)
    layers = torch.nn.ModuleList([Block(), Block()]).eval()

    class Stack(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = layers

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    stack = Stack()
    compiled = ember.compile(stack, backend=backend)
    _matches_eager(stack, compiled, x)
    layers.insert(0, torch.nn.Tanh())
    _matches_eager(stack, compiled, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_requires_grad_changed_recompiles(backend):
    model, compiled, x = _compiled(backend)
    model.requires_grad_(False)
    _matches_eager(model, compiled, x)
    model[1].fc.weight.requires_grad_(True)
    _matches_eager(model, compiled, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_replaced_on_a_submodule_recompiles(backend):
    model, compiled, x = _compiled(backend)
    model[1].forward = lambda x: x - 100
    _matches_eager(model, compiled, x)
    del model[1].forward
    _matches_eager(model, compiled, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_method_monkeypatched_on_a_class_recompiles(backend):
    class Local(Block):
        pass

    model = torch.nn.Sequential(Block(), Local()).eval()
    compiled = ember.compile(model, backend=backend)
    x = torch.randn(3, 4)
    _matches_eager(model, compiled, x)
    Local.forward = lambda self, x: x * 3
    _matches_eager(model, compiled, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_attribute_changed_recompiles(backend):
    model, compiled, x = _compiled(backend)
    model[2].scale = 5.0
    _matches_eager(model, compiled, x)
    model[0].norm.eps = 0.5
    _matches_eager(model, compiled, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dtype_changed_by_module_to_recompiles(backend):
    model, compiled, x = _compiled(backend)
    model.double()
    assert_close(compiled(x.double()), model(x.double()))
    model.float()
    _matches_eager(model, compiled, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameters_swapped_by_functional_call_are_checked(backend):
    model, compiled, x = _compiled(backend)
    weights = {"3.weight": torch.randn(2, 4), "3.bias": torch.randn(2)}
    expected = torch.func.functional_call(model, weights, (x,))
    assert_close(torch.func.functional_call(compiled, weights, (x,)), expected)
    resized = {"3.weight": torch.randn(5, 4), "3.bias": torch.randn(5)}
    expected = torch.func.functional_call(model, resized, (x,))
    assert_close(torch.func.functional_call(compiled, resized, (x,)), expected)
    _matches_eager(model, compiled, x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_and_buffer_registered_recompiles(backend):
    model, compiled, x = _compiled(backend)
    model[1].norm.register_buffer("running_mean", torch.full((4,), 3.0))
    _matches_eager(model, compiled, x)
    model[1].fc.register_parameter("bias", torch.nn.Parameter(torch.full((4,), 2.0)))
    _matches_eager(model, compiled, x)


def test_parameters_updated_in_place_keep_one_entry():
    model = _model()
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(3, 4)
    for _ in range(3):
        assert_close(compiled(x), model(x))
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.1)
    runner = compiled.__dict__["_ember_compiled"]
    assert len(runner.entries) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_that_bypass_module_setattr_recompile(backend):
    model, compiled, x = _compiled(backend)
    object.__setattr__(model[1].norm, "training", True)
    _matches_eager(model, compiled, x)
    object.__setattr__(model[1].norm, "training", False)
    vars(model[2])["forward"] = lambda x: x * 0 + 7
    _matches_eager(model, compiled, x)
    del vars(model[2])["forward"]
    model._modules["0"] = torch.nn.Tanh()
    _matches_eager(model, compiled, x)


def _entries(compiled) -> list:
    return ember.api.compiled_callable_of(compiled).entries


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_replaced_by_one_of_the_same_shape_is_read_without_recompiling(backend):
    # the entry takes the parameters its module tree guard just checked (not their paths)
    model, compiled, x = _compiled(backend)
    model[1].fc.weight = torch.nn.Parameter(torch.randn(4, 4))
    model[2].norm.running_var = torch.rand(4) + 0.5
    _matches_eager(model, compiled, x)
    with torch.no_grad():
        model[0].fc._parameters["bias"] = torch.nn.Parameter(torch.randn(4))
    _matches_eager(model, compiled, x)
    assert len(_entries(compiled)) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_skip_guard_eval_unsafe_reads_parameters_through_their_modules(backend):
    model, compiled, x = _compiled(backend)
    with ember.set_stance(skip_guard_eval_unsafe=True):
        model[1].fc.weight = torch.nn.Parameter(torch.randn(4, 4))
        assert_close(compiled(x), model(x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_entries_of_train_and_eval_each_read_their_own_tree(backend):
    model, compiled, x = _compiled(backend)
    model.train()
    _matches_eager(model, compiled, x)
    model.eval()
    model[3].weight = torch.nn.Parameter(torch.randn(2, 4))
    _matches_eager(model, compiled, x)
    model.train()
    model[0].fc.weight = torch.nn.Parameter(torch.randn(4, 4))
    _matches_eager(model, compiled, x)
    assert len(_entries(compiled)) == 2


def test_parameters_replaced_between_training_steps_get_their_gradients():
    model, compiled, x = _compiled("aot_eager")
    model.train()
    compiled(x).sum().backward()
    new = torch.nn.Parameter(torch.randn(4, 4))
    model[1].fc.weight = new
    compiled(x).sum().backward()
    expected = new.detach().clone().requires_grad_(True)
    reference = _model().train()
    reference.load_state_dict(model.state_dict())
    reference[1].fc.weight = torch.nn.Parameter(expected)
    reference(x).sum().backward()
    assert new.grad is not None
    assert_close(new.grad, reference[1].fc.weight.grad)


# ------------------------------------------- every way to change a module between calls
# A Sequential of `Leaf`s, each using its parameter and buffer pointwise (kernels
# that index them by the compiled strides), is compiled, called twice, changed one
# way, then called again: the call must give eager's result and compile exactly the
# entries listed (a change back to a state seen before reuses its entry). Depth 3
# keeps the guards inline; depth 12 puts them behind a module tree guard.


class Leaf(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 4))
        self.register_buffer("shift", torch.randn(4))
        self.scale = 2.0

    def forward(self, x):
        return torch.tanh(x * self.weight + self.shift) * self.scale


def _replace_submodule(model):
    model[1] = Leaf()


def _replace_parameter_same_shape(model):
    model[1].weight = torch.nn.Parameter(torch.randn(4, 4))


def _replace_parameter_other_shape(model):
    model[1].weight = torch.nn.Parameter(torch.randn(1, 4))


def _replace_buffer(model):
    model[1].shift = torch.randn(1)


def _data_of_another_shape(model):
    model[1].weight.data = torch.randn(1, 4)


def _data_of_another_layout(model):
    model[1].weight.data = torch.randn(4, 4).t()


def _data_broadcast(model):
    model[1].weight.data = torch.randn(4, 1).expand(4, 4)


def _data_of_another_dtype(model):
    model[1].weight.data = torch.randn(4, 4, dtype=torch.float64)


def _requires_grad_off(model):
    model[1].weight.requires_grad_(False)


def _requires_grad_attribute_off(model):
    model[1].weight.requires_grad = False


def _buffer_resized_in_place(model):
    with torch.no_grad():
        model[1].shift.resize_(1)


def _parameter_transposed_in_place(model):
    with torch.no_grad():
        model[1].weight.t_()


def _parameter_set_to_other_storage(model):
    with torch.no_grad():
        model[1].weight.set_(torch.randn(4, 4).t())


def _parameter_restrided_in_place(model):
    with torch.no_grad():
        model[1].weight.as_strided_((4, 4), (1, 4))


def _plain_attribute_read_in_forward(model):
    model[1].scale = 3.0


def _forward_on_the_instance(model):
    model[1].forward = lambda x: x - 1


def _class_of_a_submodule_reassigned(model):
    class Patched(Leaf):
        def forward(self, x):
            return x * self.weight

    model[1].__class__ = Patched


def _train_mode(model):
    model.train()


def _forward_hook(model):
    model[1].register_forward_hook(lambda module, args, out: out + 1)


def _forward_hook_written_by_hand(model):
    model[1]._forward_hooks[123456] = lambda module, args, out: out + 1


def _forward_pre_hook(model):
    model[1].register_forward_pre_hook(lambda module, args: (args[0] * 2,))


def _to_float64(model):
    model.to(torch.float64)


def _half_and_back(model):
    model.half()
    model.float()


# (change, entries compiled by the next call)
CHANGES = [
    (_replace_submodule, 0),  # the same class and structure: its new weights read (as torch)
    (_replace_parameter_same_shape, 0),
    (_replace_parameter_other_shape, 1),
    (_replace_buffer, 1),
    (_data_of_another_shape, 1),
    (_data_of_another_layout, 1),
    (_data_broadcast, 1),
    (_data_of_another_dtype, 1),
    (_requires_grad_off, 1),
    (_requires_grad_attribute_off, 1),
    (_buffer_resized_in_place, 1),
    (_parameter_transposed_in_place, 1),
    (_parameter_set_to_other_storage, 1),
    (_parameter_restrided_in_place, 1),
    (_plain_attribute_read_in_forward, 1),
    (_forward_on_the_instance, 1),
    (_class_of_a_submodule_reassigned, 1),
    (_train_mode, 0),  # no Leaf reads `training`: its flag is not guarded (as in torch)
    (_forward_hook, 1),
    (_forward_hook_written_by_hand, 1),
    (_forward_pre_hook, 1),
    (_to_float64, 1),
    (_half_and_back, 0),
]


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("depth", [3, 12])
@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize(
    ("change", "recompiles"), CHANGES, ids=[change.__name__[1:] for change, _ in CHANGES]
)
def test_every_module_change_is_seen(change, recompiles, backend, depth, grad):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Leaf() for _ in range(depth)]).eval()
    compiled = ember.compile(model, backend=backend)
    x = torch.randn(4, 4)
    with torch.set_grad_enabled(grad):
        assert_close(compiled(x), model(x))
        assert_close(compiled(x), model(x))
        before = len(_entries(compiled))
        change(model)
        x = x.to(next(model.parameters()).dtype)
        for _ in range(2):  # the change is seen, then the new entry's fast path holds
            expected, actual = model(x), compiled(x)
            assert_close(actual, expected)
            assert actual.requires_grad == expected.requires_grad
        assert len(_entries(compiled)) - before == recompiles


@pytest.mark.parametrize("depth", [3, 12])
def test_global_forward_hook_added_and_removed_is_seen(depth):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Leaf() for _ in range(depth)]).eval()
    compiled = ember.compile(model, backend="eager")
    x = torch.randn(4, 4)
    assert_close(compiled(x), model(x))
    assert_close(compiled(x), model(x))
    hook = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, out: out + 1 if isinstance(module, Leaf) else out
    )
    try:
        assert_close(compiled(x), model(x))
        assert_close(compiled(x), model(x))
    finally:
        hook.remove()
    assert_close(compiled(x), model(x))
    assert len(_entries(compiled)) == 2


@pytest.mark.parametrize("depth", [3, 12])
def test_backward_hook_added_is_seen_in_gradients(depth):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Leaf() for _ in range(depth)]).eval()
    reference = torch.nn.Sequential(*[Leaf() for _ in range(depth)]).eval()
    reference.load_state_dict(model.state_dict())
    compiled = ember.compile(model, backend="aot_eager")
    x = torch.randn(4, 4)
    compiled(x).sum().backward()
    for module in (model[1], reference[1]):
        module.register_full_backward_hook(lambda module, grad_in, grad_out: (grad_in[0] * 3,))
    model.zero_grad()
    compiled(x).sum().backward()
    reference(x).sum().backward()
    for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert_close(ours.grad, theirs.grad)


@pytest.mark.parametrize("which", ["submodule", "root"])
def test_module_dict_replaced_is_seen(which):
    model, compiled, x = _compiled("eager")
    module = model[1] if which == "submodule" else model
    replaced = dict(module.__dict__)
    if which == "submodule":
        replaced["scale"] = 5.0
    else:
        replaced["_modules"] = dict(replaced["_modules"])
        replaced["_modules"]["3"] = torch.nn.Linear(4, 2)  # another last layer
    module.__dict__ = replaced
    _matches_eager(model, compiled, x)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_entries_taken_in_turns_each_give_eager_results(backend):
    # The entry that passed last is checked first: a call for another entry must still
    # fail its guards and reach its own (train/eval, two batch sizes, a scale changed).
    model = _model()
    compiled = ember.compile(model, backend=backend, dynamic=False)
    inputs = [torch.randn(3, 4), torch.randn(5, 4)]
    with torch.no_grad():
        for _ in range(3):
            for training in (False, True):
                model.train(training)
                for x in inputs:
                    assert_close(compiled(x), model(x))
        model[0].scale = 3.0
        for x in inputs:
            assert_close(compiled(x), model(x))
    runner = ember.api.compiled_callable_of(compiled)
    assert all(entry.hits >= 1 for entry in runner.entries[:4])
