"""ModuleTreeGuard: a module tree's guards run in full only after a module mutation."""

from __future__ import annotations

import torch

from guards import GuardSet, LocalSource, NNModuleSource
from guards.sources import ModuleSource, ParamBufferSource


def _guard_tree(guards: GuardSet, source, module: torch.nn.Module) -> None:
    guards.add_nn_module(source, module)
    for name, tensor in module._parameters.items():
        if tensor is not None:
            guards.add_tensor(ParamBufferSource(source, name), tensor)
    for name, tensor in module._buffers.items():
        if tensor is not None:
            guards.add_tensor(ParamBufferSource(source, name, is_buffer=True), tensor)
    for name, child in module._modules.items():
        _guard_tree(guards, ModuleSource(source, name), child)


def _compiled(model: torch.nn.Module):
    guards = GuardSet()
    _guard_tree(guards, NNModuleSource(LocalSource("self")), model)
    compiled = guards.compile(name="model")
    frame = {"self": model}
    assert compiled(frame, {}), compiled.why_failed(frame, {})
    return compiled, frame


def _counting_full_checks(tree) -> list[int]:
    calls = [0]
    structure = tree.structure

    def counted(L, G):  # noqa: N803
        calls[0] += 1
        return structure(L, G)

    object.__setattr__(tree, "structure", counted)
    return calls


def _model() -> torch.nn.Module:
    """11 modules: a tree is formed from 8 (module_tree.MIN_MODULES)."""
    blocks = [torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)) for _ in range(3)]
    return torch.nn.Sequential(*blocks, torch.nn.Linear(4, 2)).eval()


def test_small_module_tree_is_checked_guard_by_guard():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    compiled, frame = _compiled(model)
    assert compiled.trees == ()
    model[1].weight.requires_grad_(False)
    assert not compiled(frame, {})


def test_module_tree_runs_its_full_check_only_after_a_module_mutation():
    model = _model()
    compiled, frame = _compiled(model)
    (tree,) = compiled.trees
    calls = _counting_full_checks(tree)
    for _ in range(5):
        assert compiled(frame, {})
    assert calls[0] == 0
    model[0][1].momentum = 0.5  # an attribute the guards did not read: one full check, passes
    assert compiled(frame, {}) and compiled(frame, {})
    assert calls[0] == 1
    model.train()
    assert not compiled(frame, {})
    assert "training flag mismatch" in compiled.why_failed(frame, {})
    model.eval()
    assert compiled(frame, {})


def test_module_tree_notices_tensor_changes_that_do_not_count_as_mutations():
    model = _model()
    compiled, frame = _compiled(model)
    model[0][0].weight.requires_grad_(False)
    assert not compiled(frame, {})
    model[0][0].weight.requires_grad_(True)
    assert compiled(frame, {})
    with torch.no_grad():
        model[1][1].running_mean.resize_(2)
    assert not compiled(frame, {})
    assert "running_mean" in compiled.why_failed(frame, {})


def test_module_tree_checks_the_layout_of_the_same_tensors_on_every_call():
    # `.data = other` bumps no version counter and writes no dict; t_() under no_grad
    # keeps the object: the fast path reads sizes and strides every time
    model = _model()
    compiled, frame = _compiled(model)
    (tree,) = compiled.trees
    calls = _counting_full_checks(tree)
    weight = model[0][0].weight
    weight.data = torch.randn(4, 4).t()
    assert not compiled(frame, {})
    assert "weight" in compiled.why_failed(frame, {})
    weight.data = torch.randn(2, 4)
    assert not compiled(frame, {})
    weight.data = torch.randn(4, 4)
    assert compiled(frame, {})
    with torch.no_grad():
        weight.t_()
    assert not compiled(frame, {})
    with torch.no_grad():
        weight.t_()
    assert compiled(frame, {})
    model[1][1].running_var.data = torch.rand(4).double()
    assert not compiled(frame, {})
    model[1][1].running_var.data = torch.rand(4)
    assert compiled(frame, {})
    assert calls[0] == 0  # none of these wrote a dict: all seen by the fast path


def test_module_tree_compares_strides_of_tensors_compiled_non_contiguous():
    model = _model()
    model[0][0].weight.data = torch.randn(4, 4).t()
    compiled, frame = _compiled(model)
    (tree,) = compiled.trees
    assert not tree.contiguous
    model[0][0].weight.data = torch.randn(4, 4)
    assert not compiled(frame, {})
    model[0][0].weight.data = torch.randn(4, 4).t()
    assert compiled(frame, {})


def test_module_tree_sees_the_class_of_a_module_reassigned():
    class Other(torch.nn.Linear):
        pass

    model = _model()
    compiled, frame = _compiled(model)
    model[3].__class__ = Other
    assert not compiled(frame, {})
    assert "class changed" in compiled.why_failed(frame, {})
    model[3].__class__ = torch.nn.Linear
    assert compiled(frame, {})
    model.__class__ = type("Root", (torch.nn.Sequential,), {})
    assert not compiled(frame, {})


def test_module_tree_sees_parameters_written_into_their_dict_directly():
    model = _model()
    compiled, frame = _compiled(model)
    (tree,) = compiled.trees
    calls = _counting_full_checks(tree)
    original = model[3]._parameters["weight"]
    model[3]._parameters["weight"] = torch.nn.Parameter(torch.randn(2, 4))  # same metadata
    assert compiled(frame, {})
    assert calls[0] == 1
    model[3]._parameters["weight"] = torch.nn.Parameter(torch.randn(3, 4))
    assert not compiled(frame, {})
    model[3]._parameters["weight"] = original
    assert compiled(frame, {})


def test_module_tree_notices_dtype_and_device_moves():
    model = _model()
    compiled, frame = _compiled(model)
    model.double()
    assert not compiled(frame, {})
    model.float()
    assert compiled(frame, {})


def test_module_tree_sees_writes_that_bypass_module_setattr():
    class Raw(torch.nn.Linear):
        def __setattr__(self, name, value):
            object.__setattr__(self, name, value)

    model = _model()
    model[2][0] = Raw(4, 4)
    compiled, frame = _compiled(model)
    (tree,) = compiled.trees
    object.__setattr__(model[2][0], "training", False)
    assert not compiled(frame, {})
    object.__setattr__(model[2][0], "training", True)
    assert compiled(frame, {})
    model._modules["1"] = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    assert not compiled(frame, {})


def test_module_tree_watches_the_modules_table_of_parents_only():
    model = _model()
    compiled, frame = _compiled(model)
    (tree,) = compiled.trees
    calls = _counting_full_checks(tree)
    # a leaf's `_modules` is read by no guard: a submodule added to it checks nothing again
    assert sum(tree.module_tables) == 4  # the root and its three blocks
    model[3].add_module("extra", torch.nn.ReLU())
    assert compiled(frame, {})
    assert calls[0] == 0
    # a parent's `_modules` is: a child swapped for one with other parameters fails
    model[0]._modules["0"] = torch.nn.Linear(4, 3)
    assert not compiled(frame, {})
    assert calls[0] == 1


def test_module_tree_forgets_its_tensors_when_the_root_dies():
    import gc
    import weakref

    model = _model()
    compiled, frame = _compiled(model)
    (tree,) = compiled.trees
    weight = weakref.ref(model[0][0].weight)
    del model, frame
    gc.collect()
    assert weight() is None
    assert tree.state.tables == () and tree.state.tensors == ()


def test_dict_version_tags_change_on_every_kind_of_write():
    from guards import dict_versions

    if not dict_versions.AVAILABLE:
        import pytest

        pytest.skip("dict version tags need CPython 3.11-3.13")
    module = torch.nn.Linear(2, 2)
    tags = dict_versions.VersionTags([vars(module), module._modules])
    writes = [
        lambda: module.train(False),
        lambda: setattr(module, "scale", 2.0),
        lambda: object.__setattr__(module, "scale", 3.0),
        lambda: vars(module).update(forward=print),
        lambda: vars(module).pop("forward"),
        lambda: module.add_module("act", torch.nn.ReLU()),
        lambda: module._modules.pop("act"),
    ]
    for write in writes:
        tags.snapshot(tags.read())
        assert not tags.changed()
        write()
        assert tags.changed()


def test_dict_version_tags_of_many_dicts_each_notice_a_write():
    from guards import dict_versions

    if not dict_versions.AVAILABLE:
        import pytest

        pytest.skip("dict version tags need CPython 3.11-3.13")
    modules = [torch.nn.Linear(2, 2) for _ in range(50)]
    dicts = [table for m in modules for table in (vars(m), m._parameters)]
    dicts.append(dict.fromkeys(range(1000)))  # a large dict: its object is allocated alike
    for count in (1, 2, len(dicts)):
        tags = dict_versions.VersionTags(dicts[:count])
        for index in range(count):
            tags.snapshot(tags.read())
            assert not tags.changed()
            dicts[index]["_probe"] = index
            assert tags.changed()
            del dicts[index]["_probe"]
