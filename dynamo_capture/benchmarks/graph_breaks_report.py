"""How much of the capture corpus and of the model set is captured as one graph.

    python dynamo_capture/benchmarks/graph_breaks_report.py [--no-models] [--torch]

Capture corpus: every program of tests/test_corpus_*.py (PROGRAMS tables), compiled
without fullgraph; "one graph" means no break and at most one graph. Model set:
benchmarks/models.py (mlp, cnn, gpt2, bert, llama, t5, vit), inference, compiled
without fullgraph; graphs and breaks per model, and whether the result equals eager.
Also the break programs of tests/test_graph_breaks*.py, counted. `--torch` instead
compiles every corpus program with torch.compile too (a counting backend) and reports,
per corpus file, how many programs give the same number of graphs.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import io
import pathlib
import sys
import time
from typing import Any

import torch

import dynamo_capture

HERE = pathlib.Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
ROOT = HERE.parent.parent


class Counting:
    def __init__(self) -> None:
        self.graphs: list[Any] = []

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        self.graphs.append(gm)
        return gm.forward


def _load(path: pathlib.Path) -> Any:
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _count(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int, bool]:
    backend = Counting()
    compiled = dynamo_capture.optimize(fn, backend=backend)
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            compiled(*args, **kwargs)
        except Exception:  # noqa: BLE001 - reported as not captured
            return len(backend.graphs), len(compiled.graph_breaks), False
    return len(backend.graphs), len(compiled.graph_breaks), True


def _programs() -> list[tuple[str, Any, tuple[Any, ...]]]:
    """(kind:name, fn, args) of every PROGRAMS table of tests/test_corpus_*.py."""
    programs = []
    for path in sorted(TESTS.glob("test_corpus_*.py")):
        module = _load(path)
        for name, (fn, args) in getattr(module, "PROGRAMS", {}).items():
            programs.append((f"{path.stem[12:]}:{name}", fn, args))
    return programs


def corpus() -> list[tuple[str, int, int, bool]]:
    return [(name, *_count(fn, args, {})) for name, fn, args in _programs()]


def _torch_graphs(fn: Any, args: tuple[Any, ...]) -> int | None:
    """Graphs torch.compile makes of `fn(*args)` (None where it raises)."""
    import torch._dynamo  # the reference, in this report only

    torch._dynamo.reset()
    backend = Counting()
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            torch.compile(fn, backend=backend)(*copy.deepcopy(args))
        except Exception:  # noqa: BLE001 - reported as failed
            return None
    return len(backend.graphs)


def against_torch() -> None:
    """Per corpus kind: programs whose graph count equals torch.compile's, same run."""
    kinds: dict[str, list[int]] = {}
    differ = []
    for name, fn, args in _programs():
        ours, _, ok = _count(fn, copy.deepcopy(args), {})
        theirs = _torch_graphs(fn, args)
        kind = name.split(":")[0]
        counts = kinds.setdefault(kind, [0, 0, 0])
        counts[0] += 1
        if theirs is None:
            counts[2] += 1
        elif ok and ours == theirs:
            counts[1] += 1
        else:
            differ.append(f"  {name}: ember {ours if ok else 'failed'}, torch.compile {theirs}")
    total = [sum(c[i] for c in kinds.values()) for i in range(3)]
    print("capture corpus against torch.compile (graph counts, same run):")
    print(f"  {'kind':12} {'programs':>8} {'same count':>10} {'torch fails':>11}")
    for kind, (programs, same, failed) in sorted(kinds.items()):
        print(f"  {kind:12} {programs:8d} {same:10d} {failed:11d}")
    print(f"  {'all':12} {total[0]:8d} {total[1]:10d} {total[2]:11d}")
    print("\n".join(differ))


def model_rows() -> list[tuple[str, int, int, bool, float]]:
    models = _load(ROOT / "benchmarks" / "models.py")
    rows = []
    for name, make in models.MODELS.items():
        try:
            case = make()
        except ImportError:
            continue
        case.model.eval()
        backend = Counting()
        compiled = dynamo_capture.optimize(case.model, backend=backend)
        start = time.perf_counter()
        with torch.no_grad():
            got = compiled(*case.inputs)
            expected = case.model(*case.inputs)
        seconds = time.perf_counter() - start
        same = _same(got, expected)
        rows.append((name, len(backend.graphs), len(compiled.graph_breaks), same, seconds))
    return rows


def _same(got: Any, expected: Any) -> bool:
    if hasattr(expected, "to_tuple"):  # logits / last hidden state (caches are not tensors)
        got, expected = got.to_tuple()[0], expected.to_tuple()[0]
    try:
        torch.testing.assert_close(got, expected)
    except AssertionError:
        return False
    return True


def printing_model_rows() -> list[tuple[str, int, int, bool]]:
    """The models of tests/test_graph_breaks_models.py, with a print in their MLP's forward."""
    module = _load(TESTS / "test_graph_breaks_models.py")
    tests_models = sys.modules["test_models"]
    rows = []
    for name, make in module.MODELS.items():
        torch.manual_seed(0)
        model, spec, mlp_class = make()
        model.eval()
        original = mlp_class.forward
        module._ORIGINAL[mlp_class.__name__] = original
        mlp_class.forward = module.printing_mlp_forward
        try:
            inputs = tests_models.make_inputs(spec)
            backend = Counting()
            compiled = dynamo_capture.optimize(model, backend=backend)
            with contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
                same = _same(compiled(**inputs), model(**inputs))
        finally:
            mlp_class.forward = original
        rows.append((name, len(backend.graphs), len(compiled.graph_breaks), same))
    return rows


def break_programs() -> int:
    total = 0
    for path in sorted(TESTS.glob("test_graph_breaks*.py")):
        module = _load(path)
        for table in ("PROGRAMS", "CASES", "MODELS"):
            total += len(getattr(module, table, ()))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-models", action="store_true", help="skip the model set")
    parser.add_argument(
        "--torch", action="store_true", help="compare the corpus's graph counts with torch.compile"
    )
    options = parser.parse_args()
    if options.torch:
        against_torch()
        return
    rows = corpus()
    one = sum(1 for _, graphs, breaks, ok in rows if ok and breaks == 0 and graphs <= 1)
    print(f"capture corpus: {one}/{len(rows)} programs captured as one graph")
    for name, graphs, breaks, ok in rows:
        if breaks or graphs > 1 or not ok:
            print(f"  {name}: {graphs} graphs, {breaks} breaks{'' if ok else ', failed'}")
    print(f"break programs in tests/test_graph_breaks*.py: {break_programs()}")
    if options.no_models:
        return
    models = model_rows()
    single = sum(1 for _, graphs, breaks, same, _ in models if graphs == 1 and not breaks and same)
    print(f"model set: {single}/{len(models)} models captured as one graph")
    print(f"  {'model':8} {'graphs':>6} {'breaks':>6} {'== eager':>8} {'first call s':>12}")
    for name, graphs, breaks, same, seconds in models:
        print(f"  {name:8} {graphs:6d} {breaks:6d} {str(same):>8} {seconds:12.2f}")
    print("models with a print in each layer's MLP (2 layers):")
    for name, graphs, breaks, same in printing_model_rows():
        print(f"  {name:8} {graphs:6d} {breaks:6d} {str(same):>8}")


if __name__ == "__main__":
    main()
