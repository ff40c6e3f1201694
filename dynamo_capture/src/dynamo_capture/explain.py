"""`explain(fn)(*args)`: what capture makes of a callable on these inputs, without a backend.

report = explain(model)(x)
report.graph_count, report.graph_break_count
report.graphs[0].code          # the captured FX graph as Python
report.break_reasons[0]        # reason, user file, line and source text
report.eager_frames            # frames run eagerly: name, reason, user file and line
report.guards                  # the guard expressions of the entry
print(report)                  # all of the above, readable
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from dynamo_capture.errors import UserLocation
from dynamo_capture.fallbacks import EagerFallback

__all__ = ["ExplainOutput", "GraphBreak", "explain"]


@dataclass(frozen=True, slots=True)
class GraphBreak:
    """Why capture could not put (part of) a frame in a graph, and where."""

    reason: str
    where: tuple[UserLocation, ...]

    @property
    def location(self) -> UserLocation | None:
        return self.where[-1] if self.where else None

    def __str__(self) -> str:
        frames = "\n".join(f"  {loc}" for loc in self.where)
        return f"{self.reason}\n{frames}" if frames else self.reason


@dataclass
class ExplainOutput:
    """Graphs, graph breaks and guards of one call of a callable."""

    graphs: list[torch.fx.GraphModule] = field(default_factory=list)
    break_reasons: list[GraphBreak] = field(default_factory=list)
    eager_frames: list[EagerFallback] = field(default_factory=list)
    guards: list[str] = field(default_factory=list)
    compile_seconds: float = 0.0
    result: Any = None

    @property
    def graph_count(self) -> int:
        return len(self.graphs)

    @property
    def graph_break_count(self) -> int:
        return len(self.break_reasons)

    @property
    def ops_per_graph(self) -> list[list[Any]]:
        return [
            [node.target for node in graph.graph.nodes if node.op.startswith("call")]
            for graph in self.graphs
        ]

    def __str__(self) -> str:
        lines = [
            f"Graph count: {self.graph_count}",
            f"Graph break count: {self.graph_break_count}",
            f"Op count: {sum(len(ops) for ops in self.ops_per_graph)}",
            f"Compile time: {self.compile_seconds * 1000:.1f} ms",
        ]
        for index, reason in enumerate(self.break_reasons):
            lines.append(f"Break reason {index + 1}: {reason}")
        for fallback in self.eager_frames:
            lines.append(f"Eager frame: {fallback}")
        for index, (graph, ops) in enumerate(zip(self.graphs, self.ops_per_graph)):
            lines.append(f"Graph {index + 1} ({len(ops)} ops):{graph.code}")
        lines.append("Guards:")
        lines.extend(f"  {guard}" for guard in self.guards)
        return "\n".join(lines)


def explain(fn: Callable[..., Any], **settings: Any) -> Callable[..., ExplainOutput]:
    """A function that calls `fn(*args, **kwargs)` through capture and reports what happened."""
    from dynamo_capture.optimize import CompiledCallable

    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        report = ExplainOutput()

        def record(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
            report.graphs.append(gm)
            return gm.forward

        compiled = CompiledCallable(fn, backend=record, fullgraph=False, **settings)
        start = time.perf_counter()
        report.result = compiled(*args, **kwargs)
        report.compile_seconds = time.perf_counter() - start
        report.break_reasons = [GraphBreak(e.reason, e.where) for e in compiled.graph_breaks]
        report.eager_frames = list(compiled.eager_frames)
        # every compiled part's guards too: a frame split by a break is guarded per part
        for callable_ in (compiled, *compiled.parts):
            for entry in callable_.entries:
                report.guards.extend(guard.describe() for guard in entry.guards.guards)
        return report

    return run
