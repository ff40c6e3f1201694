"""Every stage's artifacts of a compile, for every part of a frame split by graph breaks.

    compiled = ember.compile(model)
    compiled(x)
    artifacts = ember.last_artifacts(compiled)
    for part in artifacts.parts:          # in the order the parts ran
        print(part.frame_name, part.compile_id)
        print(part.graph_code)            # the captured graph
        print(part.aot_graphs["forward"]) # joint/forward/backward/inference ATen graphs
        print(part.kernels)               # generated kernel sources
        print(part.wrapper)               # the Python wrapper that calls them
    print(artifacts.kernels)              # every part's kernels, in order

The built-in backends keep a `BackendRecord` on the callable they return
(`stage_artifacts`): the AOT graphs and each compiled graph's pass artifacts
(`inductor_codegen.CompiledGraph.artifacts`). With a trace recording
(`ember.trace`), the record also sends those artifacts as trace events.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from guards.trace_events import current_compile_id, emit, tracing, within_compile

__all__ = ["BackendRecord", "CompileArtifacts", "PartArtifacts", "StageArtifact"]


@dataclass(frozen=True, slots=True)
class StageArtifact:
    """One pass's readable output: the stage, the graph's role, the pass, its text and time."""

    stage: str  # "aot" or "inductor"
    role: str  # "joint", "forward", "backward", "inference"
    name: str  # the pass: "lower", "schedule", "codegen", "build", "wrapper", "load", ...
    text: str
    seconds: float


class BackendRecord:
    """What a built-in backend made of one captured graph; kept on the callable it returns."""

    def __init__(self) -> None:
        self.compile_id = current_compile_id()
        self.aot: Any = None  # aot_autograd's AotCallable (its `graphs`)
        self.compiled: list[tuple[str, Any]] = []  # (role, inductor_codegen.CompiledGraph)

    def compiler(
        self, role: str, compile_graph: Callable[[Any, list], Any]
    ) -> Callable[[Any, list], Any]:
        """`compile_graph` for graphs of `role`; what it returns is recorded (and traced)."""

        def compile_part(graph: Any, inputs: list) -> Any:
            emit("stage_start", stage="inductor", role=role)  # cheap: for the progress line
            compiled = compile_graph(graph, inputs)
            emit("stage_end", stage="inductor", role=role,
                 kernel_count=getattr(compiled, "kernel_count", None))  # fmt: skip
            self.compiled.append((role, compiled))
            if tracing():
                self._emit(role, compiled)
            return compiled

        return compile_part

    def _emit(self, role: str, compiled: Any) -> None:
        for artifact in getattr(compiled, "artifacts", ()):
            emit("inductor_pass", role=role, name=artifact.name, text=artifact.text,
                 seconds=artifact.seconds)  # fmt: skip
        emit(
            "compiled_graph",
            role=role,
            kernel_count=getattr(compiled, "kernel_count", None),
            fallbacks=dict(getattr(compiled, "fallbacks", {}) or {}),
            wrapper_path=str(getattr(compiled, "wrapper_path", "") or ""),
        )

    def attach(self, run: Callable[..., Any]) -> Callable[..., Any]:
        """`run` carrying this record; while tracing, its calls belong to this compile.

        aot_autograd compiles a graph for training on its first call: events of that
        compile are then attributed to the compile that captured the graph.
        """
        self.aot = getattr(run, "aot", None)
        if tracing() and self.compile_id is not None:
            compile_id, inner = self.compile_id, run

            def run(*args: Any) -> Any:  # noqa: F811 - the same callable, traced
                with within_compile(compile_id):
                    return inner(*args)

            run.aot = self.aot  # type: ignore[attr-defined]
        run.stage_artifacts = self  # type: ignore[attr-defined]
        return run

    def artifacts(self) -> list[StageArtifact]:
        """The AOT graphs, then each compiled graph's passes, in the order they were made."""
        found = []
        graphs = getattr(self.aot, "graphs", {}) if self.aot is not None else {}
        for role, graph in graphs.items():
            found.append(StageArtifact("aot", role, "graph", graph.code, 0.0))
        for role, compiled in self.compiled:
            for artifact in getattr(compiled, "artifacts", ()):
                found.append(
                    StageArtifact("inductor", role, artifact.name, artifact.text, artifact.seconds)
                )
        return found


class PiecesRecord(BackendRecord):
    """The records of a graph compiled as pieces (ember.regions), each distinct piece once."""

    def __init__(self, records: list[BackendRecord]) -> None:
        super().__init__()
        self.records = records

    def artifacts(self) -> list[StageArtifact]:
        return [artifact for record in self.records for artifact in record.artifacts()]


@dataclass
class PartArtifacts:
    """The artifacts of one compiled part: capture's, then the backend's."""

    frame_name: str
    compile_id: str
    graph_code: str
    guard_code: str
    entry_code: str
    graph_break_reason: str | None
    capture_seconds: float
    backend_seconds: float
    stages: list[StageArtifact] = field(default_factory=list)

    @property
    def aot_graphs(self) -> dict[str, str]:
        """The ATen graphs by role: "joint" (after decompositions), "forward", "backward",
        "inference"."""
        return {a.role: a.text for a in self.stages if a.stage == "aot"}

    def _pass(self, name: str) -> str:
        return "\n".join(a.text for a in self.stages if a.stage == "inductor" and a.name == name)

    @property
    def kernels(self) -> str:
        """The generated kernel sources (C++ or Triton) of every graph of this part."""
        return self._pass("codegen")

    @property
    def schedule(self) -> str:
        """The fused kernels with their loop ranges (their launch configuration)."""
        return self._pass("schedule")

    @property
    def wrapper(self) -> str:
        """The Python wrapper that allocates buffers and calls the kernels."""
        return self._pass("wrapper")

    def __str__(self) -> str:
        sections = [
            (f"{self.frame_name} [{self.compile_id}] entry code", self.entry_code),
            ("guards", self.guard_code),
            ("graph break", self.graph_break_reason or ""),
            ("captured graph", self.graph_code),
            *((f"aot {role} graph", text) for role, text in self.aot_graphs.items()),
            ("schedule", self.schedule),
            ("kernels", self.kernels),
            ("wrapper", self.wrapper),
        ]
        return "\n".join(f"===== {title} =====\n{text}" for title, text in sections if text)


@dataclass
class CompileArtifacts:
    """The artifacts of the last compile of a compiled callable, one `PartArtifacts` per part.

    `parts[0]` is the frame itself; a frame split by graph breaks is followed by its
    parts (the code before a break, the resume function after it, the functions it
    called), in the order they ran. The properties join every part's text.
    """

    parts: list[PartArtifacts]

    def _joined(self, name: str) -> str:
        return "\n".join(text for part in self.parts if (text := getattr(part, name)))

    @property
    def graph_code(self) -> str:
        return self._joined("graph_code")

    @property
    def guard_code(self) -> str:
        return self._joined("guard_code")

    @property
    def entry_code(self) -> str:
        return self._joined("entry_code")

    @property
    def kernels(self) -> str:
        return self._joined("kernels")

    @property
    def wrapper(self) -> str:
        return self._joined("wrapper")

    @property
    def capture_seconds(self) -> float:
        return sum(part.capture_seconds for part in self.parts)

    @property
    def backend_seconds(self) -> float:
        return sum(part.backend_seconds for part in self.parts)

    @property
    def aot_graphs(self) -> list[dict[str, str]]:
        return [part.aot_graphs for part in self.parts if part.aot_graphs]

    def __str__(self) -> str:
        return "\n\n".join(str(part) for part in self.parts)


def part_artifacts(capture: Any) -> PartArtifacts:
    """A `PartArtifacts` from capture's `CaptureArtifacts` and its backend's record."""
    record = getattr(capture.compiled, "stage_artifacts", None)
    return PartArtifacts(
        frame_name=capture.frame_name,
        compile_id=capture.compile_id,
        graph_code=capture.graph_code,
        guard_code=capture.guard_code,
        entry_code=capture.entry_code,
        graph_break_reason=capture.graph_break_reason,
        capture_seconds=capture.capture_seconds,
        backend_seconds=capture.backend_seconds,
        stages=record.artifacts() if isinstance(record, BackendRecord) else [],
    )


def last_compile(runner: Any) -> CompileArtifacts | None:
    """The frame's newest compile and the newest compile of each part that ran after it."""
    history = runner.artifacts  # every compile of the frame and its parts, oldest first
    own = [i for i, a in enumerate(history) if _frame_of(a) == _frame_of(runner)]
    if not own:
        return None
    start = own[-1]
    newest: dict[str, Any] = {}
    for capture in history[start + 1 :]:
        newest[_frame_of(capture)] = capture  # a part compiled again replaces its older one
    chosen = [history[start], *newest.values()]
    return CompileArtifacts([part_artifacts(capture) for capture in chosen])


def _frame_of(compiled: Any) -> str:
    """The frame id of a compile id ("<frame id>/<attempt>")."""
    return compiled.compile_id.split("/")[0]
