"""Guard check cost: ember's generated guard function next to torch.compile's per-call overhead.

For a function taking 1, 10 and 100 tensors and for a module with 50
parameters, this builds the guards capture would install (a tensor match per
tensor, the module identity and training flags, global state, no aliasing
between tensor inputs), compiles them with `GuardSet.compile()` and times one
check. In the same run it times `torch.compile(fn, backend="eager")` on the
same inputs, after warm-up, minus the eager call: torch's whole per-call
overhead, whose guards run in C++; and torch's guard check alone (its cache
entry's guard manager, called on the same frame locals).

The function bodies do one op (`torch.stack` of every input), since torch
skips frames without a graph and would then guard nothing.

The model rows (GPT2, BERT, ViT of benchmarks/models.py, in eval mode) time the
guard function `ember.compile(model)` installs, called on the frame of the
model call, next to torch's guard check for the same model's forward (its cache
entry's guard manager; torch.compile with backend="eager"). The "checks"
column counts the `if` tests in the generated function. Models need
`transformers` and every package's src folder on PYTHONPATH; they are skipped
otherwise, or with `--no-models`.

The depth rows time the same for a Sequential of 10 and of 100 small blocks
(`--depth` runs them even with `--no-models`), and print the whole call's
overhead over eager for ember and torch.compile on stderr.

`--trees` prints only the guard check `ember.compile(model, backend="eager")`
installs (eval, no_grad) for host_overhead_bench.py's models (mlp10, mlp100,
resnet50) and the depth rows' Sequentials, with their parameter and buffer
counts: the cost of a module tree against depth. `EMBER_BENCH_CLOCK=cpu` times
every row in the thread's CPU time, which waiting for a core on a loaded machine
does not inflate.

`--layers` prints, for GPT-2 decoders (eval, no_grad, width 64) of 2, 12 and 24
layers, with the guards the layers share checked as one loop (`guards.block_loops`)
and without: the lines of generated guard code (the entry's function and its module
tree's full check), the time to generate and compile them (`GuardSet.compile`), the
entry's check per call, and the module tree's full check (run after a module
mutation). Needs `transformers`.

    python benchmarks/guards_bench.py [--no-models] [--depth] [--trees] [--layers]
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from guards import AttrSource, GuardSet, ItemSource, LocalSource, NNModuleSource

REPEATS = 7
CLOCK = {"wall": time.perf_counter, "cpu": time.thread_time}[
    os.environ.get("EMBER_BENCH_CLOCK", "wall")
]


@dataclass(frozen=True, slots=True)
class Row:
    case: str
    guards: int
    ember: float
    torch_guards: float
    torch_overhead: float
    checks: int = 0


def checks_of(compiled) -> int:
    """The number of `if` tests in a generated guard function."""
    return compiled.source.count("\n        if not (")


def best_microseconds(call, args, number: int) -> float:
    """Best mean time of `call(*args)` over REPEATS runs of `number` calls, in microseconds."""
    for _ in range(200):
        call(*args)
    best = float("inf")
    for _ in range(REPEATS):
        start = CLOCK()
        for _ in range(number):
            call(*args)
        best = min(best, (CLOCK() - start) / number)
    return best * 1e6


def function_case(count: int) -> Row:
    names = [f"x{i}" for i in range(count)]
    source = f"def f({', '.join(names)}):\n    return torch.stack(({', '.join(names)},))\n"
    namespace: dict = {"torch": torch}
    # a real file name: torch skips frames whose code comes from "<string>"
    exec(compile(source, f"{__file__}:f{count}", "exec"), namespace)
    fn = namespace["f"]
    tensors = [torch.randn(8, 16) for _ in names]
    guards = GuardSet()
    for name, tensor in zip(names, tensors, strict=True):
        guards.add_tensor(LocalSource(name), tensor)
    guards.add_global_state()
    guards.add_no_aliasing([LocalSource(name) for name in names])
    compiled = guards.compile(name=f"f with {count} tensors")
    frame_locals = dict(zip(names, tensors, strict=True))
    assert compiled(frame_locals, namespace)
    ember = best_microseconds(compiled.check, (frame_locals, namespace), 20000 // count + 200)
    eager = best_microseconds(fn, tensors, 20000)
    optimized = torch.compile(fn, backend="eager")
    torch_call = best_microseconds(optimized, tensors, 5000)
    torch_guards = torch_guard_check(fn.__code__, frame_locals, 20000 // count + 200)
    return Row(
        f"function, {count} tensor(s)",
        len(compiled),
        ember,
        torch_guards,
        torch_call - eager,
        checks_of(compiled),
    )


class FiftyParameters(torch.nn.Module):
    """50 registered parameters; forward stacks them with the input (one op).

    The parameters are also kept in a plain tuple attribute, so that eager
    reaches them without nn.Module.__getattr__ and the eager time is the op's.
    """

    def __init__(self) -> None:
        super().__init__()
        for index in range(50):
            self.register_parameter(f"p{index}", torch.nn.Parameter(torch.randn(4, 4)))
        self.params = tuple(self._parameters.values())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack((x, *self.params))


def module_case() -> Row:
    model = FiftyParameters()
    x = torch.randn(4, 4)
    me = NNModuleSource(LocalSource("self"))
    guards = GuardSet()
    guards.add_nn_module(me, model)
    guards.add_tensor(LocalSource("x"), x)
    params = AttrSource(me, "params")
    guards.add_length(params, model.params)
    for index, param in enumerate(model.params):
        guards.add_tensor(ItemSource(params, index), param)
    guards.add_global_state()
    compiled = guards.compile(name="50-parameter module")
    frame_locals = {"self": model, "x": x}
    assert compiled(frame_locals, {})
    ember = best_microseconds(compiled.check, (frame_locals, {}), 2000)
    eager = best_microseconds(model, (x,), 5000)
    optimized = torch.compile(model, backend="eager")
    torch_call = best_microseconds(optimized, (x,), 5000)
    torch_guards = torch_guard_check(FiftyParameters.forward.__code__, frame_locals, 2000)
    return Row(
        "nn.Module, 50 parameters",
        len(compiled),
        ember,
        torch_guards,
        torch_call - eager,
        checks_of(compiled),
    )


def model_case(name: str) -> Row | None:
    """The guard check of `ember.compile(model)` for a model of benchmarks/models.py."""
    try:
        from models import MODELS

        import ember

        case = MODELS[name]()
    except ImportError as error:
        print(f"skipping {name}: {error}", file=sys.stderr)
        return None
    model = case.model.eval()
    optimized = ember.compile(model, backend="eager")
    optimized(*case.inputs)
    runner = optimized.__dict__["_ember_compiled"]
    compiled = runner.entries[0].guards
    frame_locals = runner.frame.bind(case.inputs, {})
    frame_globals = runner.frame.globals
    assert compiled(frame_locals, frame_globals), compiled.why_failed(frame_locals, frame_globals)
    ember_us = best_microseconds(compiled.check, (frame_locals, frame_globals), 1000)
    torch_guards = float("nan")
    try:
        torch._dynamo.reset()
        torch.compile(model, backend="eager")(*case.inputs)
        forward = type(model).forward
        bound = inspect.signature(forward, follow_wrapped=False).bind(model, *case.inputs)
        bound.apply_defaults()
        torch_locals = dict(bound.arguments)
        cells = zip(forward.__code__.co_freevars, forward.__closure__ or (), strict=True)
        torch_locals.update((free, cell.cell_contents) for free, cell in cells)
        torch_guards = torch_guard_check(type(model).forward.__code__, torch_locals, 1000)
    except Exception as error:  # noqa: BLE001 - the reference is optional
        print(f"torch reference for {name} failed: {error}", file=sys.stderr)
    return Row(
        f"{name} (ember.compile)",
        len(compiled),
        ember_us,
        torch_guards,
        float("nan"),
        checks_of(compiled),
    )


class DepthBlock(torch.nn.Module):
    """One layer of the depth rows: Linear, LayerNorm, ReLU and a residual."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.norm = torch.nn.LayerNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.norm(self.fc(x)))


def depth_case(depth: int) -> Row:
    """A Sequential of `depth` DepthBlocks (3 modules, 4 parameters each), eval, no_grad.

    "ember guard check" is the guard function `ember.compile(model, backend="eager")`
    installs; the torch columns are torch's guard manager and torch.compile's
    (backend="eager") whole call minus the eager call.
    """
    import ember

    model = torch.nn.Sequential(*[DepthBlock() for _ in range(depth)]).eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        optimized = ember.compile(model, backend="eager")
        optimized(x)
        runner = optimized.__dict__["_ember_compiled"]
        compiled = runner.entries[0].guards
        frame_locals = runner.frame.bind((x,), {})
        frame_globals = runner.frame.globals
        assert compiled(frame_locals, frame_globals)
        ember_us = best_microseconds(compiled.check, (frame_locals, frame_globals), 200)
        eager = best_microseconds(model, (x,), 200)
        ember_call = best_microseconds(optimized, (x,), 200)
        torch._dynamo.reset()
        reference = torch.compile(model, backend="eager")
        torch_call = best_microseconds(reference, (x,), 200)
        forward = type(model).forward
        torch_locals = {"self": model, "input": x}
        torch_guards = torch_guard_check(forward.__code__, torch_locals, 200)
    print(
        f"depth {depth}: eager call {eager:.1f} us, ember call {ember_call:.1f} us "
        f"(overhead {ember_call - eager:.1f}), torch.compile call {torch_call:.1f} us "
        f"(overhead {torch_call - eager:.1f})",
        file=sys.stderr,
    )
    return Row(
        f"Sequential of {depth} blocks ({4 * depth} parameters)",
        len(compiled),
        ember_us,
        torch_guards,
        torch_call - eager,
        checks_of(compiled),
    )


def torch_guard_check(code, frame_locals: dict, number: int) -> float:
    """Time of torch's own guard check for the first cache entry of `code` (NaN if none)."""
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        entries = _debug_get_cache_entry_list(code)
        manager = entries[0].guard_manager
        if not manager.check(frame_locals):
            return float("nan")
    except Exception:  # noqa: BLE001 - torch's internals differ between versions
        return float("nan")
    return best_microseconds(manager.check, (frame_locals,), number)


def tree_case(name: str) -> str:
    """The guard check of `ember.compile(model)` (eval, no_grad) for one model, as text."""
    from host_overhead_bench import CASES

    import ember

    torch.manual_seed(0)
    if name.startswith("blocks"):
        depth = int(name.removeprefix("blocks"))
        model, x = torch.nn.Sequential(*[DepthBlock() for _ in range(depth)]), torch.randn(2, 4)
    else:
        model, x = CASES[name]()
    model.eval()
    with torch.no_grad():
        optimized = ember.compile(model, backend="eager")
        optimized(x)
        runner = optimized.__dict__["_ember_compiled"]
        compiled = runner.entries[0].guards
        frame_locals = runner.frame.bind((x,), {})
        assert compiled(frame_locals, runner.frame.globals)
        check = best_microseconds(compiled.check, (frame_locals, runner.frame.globals), 200)
    modules = sum(1 for _ in model.modules())
    tensors = sum(1 for _ in model.parameters()) + sum(1 for _ in model.buffers())
    return f"| {name} | {modules} | {tensors} | {check:.1f} |"


def layers_case(layers: int, looped: bool) -> str:
    """The guards of `ember.compile(gpt2)` for a GPT-2 of `layers` layers, as a table row."""
    import linecache

    from transformers import GPT2Config, GPT2Model

    import ember
    from guards import block_loops, guard_codegen

    block_loops.ENABLED = looped
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=layers, n_embd=64, n_head=4, vocab_size=128, n_positions=64,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = GPT2Model(config).eval()
    ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        optimized = ember.compile(model, backend="eager")
        optimized(ids)
        runner = optimized.__dict__["_ember_compiled"]
        frame_locals = runner.frame.bind((ids,), {})
        frame_globals = runner.frame.globals
        guard_set = GuardSet(runner.entries[0].guards.guards)
        timings = []
        for _ in range(REPEATS):
            guard_codegen._compiled.cache_clear()  # Python's compile of the source too
            start = CLOCK()
            compiled = guard_set.compile(name=f"gpt2 of {layers} layers {looped}")
            timings.append(CLOCK() - start)
        assert compiled(frame_locals, frame_globals)
        check = best_microseconds(compiled.check, (frame_locals, frame_globals), 200)
        full = sum(
            best_microseconds(tree.structure, (frame_locals, frame_globals), 50)
            for tree in compiled.trees
        )
    lines = len(compiled.source.splitlines()) + sum(
        len(linecache.getlines(tree.structure.__code__.co_filename)) for tree in compiled.trees
    )
    block_loops.ENABLED = True
    return (
        f"| {layers} | {'loop' if looped else 'one by one'} | {len(compiled.guards)} | {lines} "
        f"| {min(timings) * 1e3:.1f} | {check:.1f} | {full:.1f} |"
    )


def main() -> None:
    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).parent))
    if "--layers" in sys.argv:
        print(
            "| layers | shared guards | guards | generated lines | compile (ms) "
            "| check per call (us) | tree full check (us) |"
        )
        print("|---:|---|---:|---:|---:|---:|---:|")
        for layers in (2, 12, 24):
            for looped in (False, True):
                print(layers_case(layers, looped))
        return
    if "--trees" in sys.argv:
        print("| model | modules | parameters and buffers | guard check (us) |")
        print("|---|---:|---:|---:|")
        for name in ("mlp10", "mlp100", "resnet50", "blocks10", "blocks100"):
            print(tree_case(name))
        return
    rows = [function_case(1), function_case(10), function_case(100), module_case()]
    if "--no-models" not in sys.argv or "--depth" in sys.argv:
        rows += [depth_case(10), depth_case(100)]
    if "--no-models" not in sys.argv:
        rows += [row for name in ("gpt2", "bert", "vit") if (row := model_case(name))]
    print(f"torch {torch.__version__}; microseconds per call, best of {REPEATS} runs\n")
    print(
        "| case | ember guards | ember checks | ember guard check | torch guard check (C++) "
        "| torch.compile per-call overhead | ember / torch overhead |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row.case} | {row.guards} | {row.checks} | {row.ember:.2f} "
            f"| {row.torch_guards:.2f} | {row.torch_overhead:.2f} "
            f"| {row.ember / row.torch_overhead:.2f} |"
        )
    one, hundred = rows[0].ember, rows[2].ember
    print(f"\nember per tensor input: {(hundred - one) / 99:.3f} us (1- and 100-tensor rows)")


if __name__ == "__main__":
    main()
