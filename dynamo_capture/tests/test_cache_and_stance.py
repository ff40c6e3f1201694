"""The cache: guards, recompiles and their reasons, the recompile limit, stances, logs."""

from __future__ import annotations

import contextlib
import logging

import pytest
import torch

import dynamo_capture
from dynamo_capture import RecompileError, set_stance
from guards import artifact_logger


@contextlib.contextmanager
def logging_on(*names):
    loggers = [artifact_logger(name) for name in names]
    saved = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for logger, level in zip(loggers, saved, strict=True):
            logger.setLevel(level)


def compiled(fn, backend, **settings):
    """Static shapes and ints: a new int `factor` is a recompile (what these tests count)."""
    settings.setdefault("dynamic", False)
    return dynamo_capture.optimize(fn, backend=backend, fullgraph=True, **settings)


def scale(x, factor):
    return x * factor


def test_cache_hit_runs_without_capture(backend):
    fn = compiled(scale, backend)
    x = torch.randn(3)
    for _ in range(3):
        torch.testing.assert_close(fn(x, 2), x * 2)
    assert len(backend.graphs) == 1
    assert fn.entries[0].hits == 2


@pytest.mark.parametrize(
    "first, second, guard",
    [
        ((torch.randn(3), 2), (torch.randn(4), 2), "'x' size"),
        ((torch.randn(3), 2), (torch.randn(3, dtype=torch.float64), 2), "'x' dtype"),
        ((torch.randn(3), 2), (torch.randn(3), 3), "'factor'"),
        ((torch.randn(3), 2), (torch.randn(3), 2.0), "'factor'"),
        ((torch.randn(3), 2), (torch.randn(3, requires_grad=True), 2), "'x' requires_grad"),
        ((torch.randn(4, 4), 2), (torch.randn(4, 4).t(), 2), "'x' stride"),
    ],
)
def test_guard_failure_recompiles_and_says_why(first, second, guard, backend, capsys):
    fn = compiled(scale, backend)
    torch.testing.assert_close(fn(*first), scale(*first))
    with logging_on("recompiles"):
        torch.testing.assert_close(fn(*second), scale(*second))
    assert len(fn.entries) == 2
    message = capsys.readouterr().err
    assert "Recompiling scale: " in message and guard in message


def test_global_value_is_guarded(backend):
    global FACTOR
    FACTOR = 2

    def use_global(x):
        return x * FACTOR

    fn = compiled(use_global, backend)
    x = torch.randn(3)
    torch.testing.assert_close(fn(x), x * 2)
    FACTOR = 5
    torch.testing.assert_close(fn(x), x * 5)
    assert len(fn.entries) == 2


def test_closure_value_is_guarded(backend):
    def make(k):
        def inner(x):
            return x + k

        return inner

    inner = make(1)
    fn = compiled(inner, backend)
    x = torch.randn(2)
    torch.testing.assert_close(fn(x), x + 1)
    inner.__closure__[0].cell_contents = 7
    torch.testing.assert_close(fn(x), x + 7)


def test_grad_mode_is_guarded(backend):
    fn = compiled(lambda x: x * 2, backend)
    x = torch.randn(3, requires_grad=True)
    assert fn(x).requires_grad
    with torch.no_grad():
        assert not fn(x).requires_grad
    assert len(fn.entries) == 2


def test_recompile_limit_then_eager(backend, capsys):
    fn = compiled(scale, backend, recompile_limit=3)
    x = torch.randn(2)
    for factor in range(6):
        torch.testing.assert_close(fn(x, factor), x * factor)
    assert len(fn.entries) == 3
    assert len(backend.graphs) == 3
    assert "hit the recompile limit (3)" in capsys.readouterr().err


def test_default_recompile_limit_is_eight(backend):
    fn = compiled(scale, backend)
    x = torch.randn(2)
    for factor in range(12):
        fn(x, factor)
    assert len(fn.entries) == 8


def test_force_eager_stance(backend):
    fn = compiled(scale, backend)
    with set_stance("force_eager"):
        torch.testing.assert_close(fn(torch.ones(2), 3), torch.full((2,), 3.0))
    assert not backend.graphs


def test_eager_on_recompile_stance(backend):
    fn = compiled(scale, backend)
    fn(torch.ones(2), 2)
    with set_stance("eager_on_recompile"):
        torch.testing.assert_close(fn(torch.ones(2), 3), torch.full((2,), 3.0))
    assert len(fn.entries) == 1


def test_fail_on_recompile_stance(backend):
    fn = compiled(scale, backend)
    fn(torch.ones(2), 2)
    with set_stance("fail_on_recompile"):
        fn(torch.ones(2), 2)  # a hit is fine
        with pytest.raises(RecompileError, match="factor"):
            fn(torch.ones(2), 3)


def test_eager_then_compile_stance(backend):
    fn = compiled(scale, backend)
    with set_stance("eager_then_compile"):
        fn(torch.ones(2), 2)
        assert not backend.graphs
        fn(torch.ones(2), 2)
        assert len(backend.graphs) == 1


def test_force_backend_stance(backend):
    other = type(backend)()
    fn = compiled(scale, backend)
    with set_stance("default", force_backend=other):
        fn(torch.ones(2), 2)
    assert len(other.graphs) == 1 and not backend.graphs


def test_reset_drops_entries(backend):
    fn = compiled(scale, backend)
    fn(torch.ones(2), 2)
    dynamo_capture.reset()
    fn(torch.ones(2), 2)
    assert len(backend.graphs) == 2


def test_disable_region_runs_compiled_code_eagerly(backend):
    fn = compiled(scale, backend)

    @dynamo_capture.disable
    def outer(x):
        return fn(x, 2)

    torch.testing.assert_close(outer(torch.ones(2)), torch.full((2,), 2.0))
    assert not backend.graphs


def test_guard_filter_drops_guards(backend):
    from guards import skip_all_guards_unsafe

    fn = compiled(scale, backend, guard_filter_fn=skip_all_guards_unsafe)
    fn(torch.ones(2), 2)
    assert fn(torch.ones(2), 3).tolist() == [2.0, 2.0]  # stale entry reused: documented unsafe


def test_guard_filter_sees_entries(backend):
    seen = []

    def keep_all(entries):
        seen.extend(entries)
        return [True] * len(entries)

    fn = compiled(scale, backend, guard_filter_fn=keep_all)
    fn(torch.ones(2), 2)
    kinds = {entry.guard_type for entry in seen}
    assert {"TENSOR_MATCH", "EQUALS_MATCH", "GLOBAL_STATE"} <= kinds
    assert any(entry.name == "L['x']" for entry in seen)


def test_guard_source_is_readable(backend):
    fn = compiled(scale, backend)
    fn(torch.ones(2, 3), 2)
    source = fn.last_artifacts.guard_code
    assert "L['x']" in source and "L['factor']" in source
    assert "___compiled(L['x'])" in fn.last_artifacts.entry_code


def test_logs_graph_and_guards(backend, capsys):
    fn = compiled(scale, backend)
    with logging_on("graph", "guards"):
        fn(torch.ones(2), 2)
    text = capsys.readouterr().err
    assert "def forward" in text and "def guard_check" in text


def test_aot_eager_then_compile_stance(backend):
    other = type(backend)()
    fn = dynamo_capture.optimize(scale, backend=backend, resolve_backend=lambda name: other)
    with set_stance("aot_eager_then_compile"):
        torch.testing.assert_close(fn(torch.ones(2), 2), torch.full((2,), 2.0))
        assert len(other.graphs) == 1 and not backend.graphs and not fn.entries
        fn(torch.ones(2), 2)
        assert len(backend.graphs) == 1


def test_missing_attribute_is_guarded(backend):
    class Holder:
        pass

    def fn(x, obj):
        if hasattr(obj, "bias"):
            return x + obj.bias
        return x

    holder = Holder()
    compiled_fn = compiled(fn, backend)
    x = torch.ones(2)
    torch.testing.assert_close(compiled_fn(x, holder), x)
    holder.bias = 3.0
    torch.testing.assert_close(compiled_fn(x, holder), x + 3)
    assert len(compiled_fn.entries) == 2


def test_identity_comparison_is_guarded(backend):
    sentinel = object()

    def fn(x, marker):
        if marker is sentinel:
            return x * 2
        return x

    compiled_fn = compiled(fn, backend)
    x = torch.ones(2)
    torch.testing.assert_close(compiled_fn(x, sentinel), x * 2)
    torch.testing.assert_close(compiled_fn(x, object()), x)


def test_appending_to_a_module_list_recompiles(backend):
    layers = torch.nn.ModuleList([torch.nn.Linear(2, 2)])

    def fn(x):
        for layer in layers:
            x = layer(x)
        return x

    compiled_fn = compiled(fn, backend)
    x = torch.randn(1, 2)
    compiled_fn(x)
    layers.append(torch.nn.Linear(2, 2))
    torch.testing.assert_close(compiled_fn(x), layers[1](layers[0](x)))


class _Stack(torch.nn.Module):
    def __init__(self, blocks: int = 1) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)) for _ in range(blocks)
        )

    def forward(self, x):
        for block in self.blocks:
            x = block(x).relu()
        return x


def test_the_entry_reads_a_module_shared_by_inputs_once():
    model = _Stack()  # 5 modules: too few for a module tree guard
    compiled = dynamo_capture.optimize(model, backend=lambda gm, _: gm.forward)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    entry = compiled.last_artifacts.entry_code
    blocks = "._modules['blocks']"
    assert entry.count(blocks) == 1, entry  # read into a local, then each layer from it
    assert entry.count("._parameters['weight']") == 2, entry
    with torch.no_grad():
        model.blocks[0][0].weight.mul_(2)  # the entry reads the current parameters
    torch.testing.assert_close(compiled(x), model(x))


def test_the_entry_takes_module_tensors_from_the_module_tree_guard():
    model = _Stack(blocks=3)  # 11 modules: one module tree guard
    compiled = dynamo_capture.optimize(model, backend=lambda gm, _: gm.forward)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    entry = compiled.last_artifacts.entry_code
    assert "___tree0_state.tensors" in entry and "_parameters" not in entry, entry
    torch.testing.assert_close(compiled(x), model(x))
    model.blocks[1][0].weight = torch.nn.Parameter(torch.randn(4, 4))  # same metadata
    torch.testing.assert_close(compiled(x), model(x))
    with dynamo_capture.set_stance(skip_guard_eval_unsafe=True):  # no check: read by path
        model.blocks[0][1].weight = torch.nn.Parameter(torch.randn(4))
        torch.testing.assert_close(compiled(x), model(x))
    del model.blocks[2][1].bias  # no longer a tensor: a new entry
    model.blocks[2][1].bias = None
    torch.testing.assert_close(compiled(x), model(x))
    assert len(compiled.entries) == 2


def _counting_checks(fn):
    """Wrap each entry's guard check; the list records which entry each check was of."""
    checked: list[int] = []
    for index, entry in enumerate(fn.entries):

        def counted(f_locals, f_globals, check=entry.check, index=index):
            checked.append(index)
            return check(f_locals, f_globals)

        entry.check = counted
    return checked


def test_entry_that_passed_last_is_checked_first(backend):
    fn = compiled(scale, backend)
    x = torch.randn(3)
    fn(x, 2)  # entry 0
    fn(x, 3)  # entry 1
    checked = _counting_checks(fn)
    for _ in range(4):
        torch.testing.assert_close(fn(x, 3), x * 3)
    assert checked == [1, 1, 1, 1]  # entry 0's guards never run for entry 1's calls
    checked.clear()
    torch.testing.assert_close(fn(x, 2), x * 2)
    torch.testing.assert_close(fn(x, 2), x * 2)
    assert checked == [1, 0, 0]
    assert len(backend.graphs) == 2


def test_entries_checked_in_any_order_still_run_the_entry_for_the_inputs(backend):
    fn = compiled(scale, backend)
    tensors = [torch.randn(3), torch.randn(4), torch.randn(3, dtype=torch.float64)]
    for _ in range(3):
        for x in tensors:
            for factor in (2, 3):
                torch.testing.assert_close(fn(x, factor), x * factor)
    assert len(backend.graphs) == 6
    assert sum(entry.hits for entry in fn.entries) == 12


def test_a_new_entry_is_checked_first_on_the_next_call(backend):
    fn = compiled(scale, backend)
    x = torch.randn(3)
    fn(x, 2)
    fn(x, 3)
    fn(x, 2)  # entry 0 passed last
    fn(x, 4)  # compiled: entry 2
    checked = _counting_checks(fn)
    torch.testing.assert_close(fn(x, 4), x * 4)
    assert checked == [2]
