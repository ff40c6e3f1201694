"""The compile report: a compile trace (`ember.trace`) as one self-contained HTML page.

    python -m ember.report trace -o report.html

The page needs no server and no network (styles, the chart and the syntax
highlighter are inline). From the top: warnings (frames run eagerly, recompile
limits, ops run by ATen, slow stages, ember's logged warnings), a summary, the frame
tree with compile ids, where compiles and graph breaks happened in the user's code,
stage timings as a chart, then one section per compile: why it happened (the guard
each cached entry failed), its guards and a diff against the entry it replaces, and
every artifact (entry code, guards, captured graph, AOT graphs, schedule, kernels,
wrapper).
"""

from __future__ import annotations

import argparse
import difflib
import html
import json
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Compile", "Trace", "load_trace", "main", "render"]

SLOW_STAGE_SECONDS = 1.0  # a pass slower than this is a warning at the top
STAGE_COLORS = {
    "capture": "#4e79a7",
    "aot": "#f28e2b",
    "lower": "#e15759",
    "schedule": "#76b7b2",
    "codegen": "#59a14f",
    "build": "#edc948",
    "wrapper": "#b07aa1",
    "load": "#ff9da7",
    "other": "#9c755f",
}


@dataclass
class Compile:
    """One compile (a cache miss) of one frame, with everything the trace says of it."""

    compile_id: str
    frame: str = ""
    frame_id: int = -1
    attempt: int = 0
    parent_frame_id: int | None = None
    filename: str | None = None
    line: int | None = None
    source: str | None = None
    seconds: float = 0.0
    error: str | None = None
    entry: dict[str, Any] = field(default_factory=dict)
    breaks: list[dict[str, Any]] = field(default_factory=list)
    recompile: dict[str, Any] | None = None
    aot_graphs: list[dict[str, Any]] = field(default_factory=list)
    passes: list[dict[str, Any]] = field(default_factory=list)
    graphs: list[dict[str, Any]] = field(default_factory=list)
    hits: int = 0
    logs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return "c-" + self.compile_id.replace("/", "-")

    def total_seconds(self) -> float:
        """The compile's time, with the backend work deferred to the first call
        (aot_autograd's training graphs) that falls outside its scope."""
        return max(self.seconds, sum(self.stage_seconds().values()))

    def stage_seconds(self) -> dict[str, float]:
        """Seconds by stage: capture, aot, then each inductor pass."""
        stages: dict[str, float] = defaultdict(float)
        stages["capture"] = float(self.entry.get("capture_seconds") or 0.0)
        # forward and backward share the partition's time: counted once
        aot_passes = {(g["name"] in ("forward", "backward"), g.get("seconds") or 0.0)
                      for g in self.aot_graphs}  # fmt: skip
        stages["aot"] = sum(seconds for _, seconds in aot_passes)
        for one in self.passes:
            name = one["name"] if one["name"] in STAGE_COLORS else "other"
            stages[name] += float(one.get("seconds") or 0.0)
        return dict(stages)


@dataclass
class Trace:
    """Every compile of every traced process, and the warnings to show first."""

    processes: list[dict[str, Any]] = field(default_factory=list)
    compiles: dict[str, Compile] = field(default_factory=dict)
    logs: list[dict[str, Any]] = field(default_factory=list)
    # frame id -> the recompile event its next compile_start belongs to
    pending_recompiles: dict[str, dict[str, Any]] = field(default_factory=dict)

    def frames(self) -> dict[int, list[Compile]]:
        found: dict[int, list[Compile]] = defaultdict(list)
        for one in self.compiles.values():
            found[one.frame_id].append(one)
        return found

    def warnings(self) -> list[str]:
        found = []
        for one in self.compiles.values():
            for b in one.breaks:
                if "eagerly" in b.get("handling", ""):
                    found.append(f"{one.frame} [{one.compile_id}] runs eagerly: {b['reason']}")
            if one.recompile and one.recompile.get("limit_hit"):
                found.append(f"{one.frame} hit the recompile limit ({one.recompile['limit']})")
            for graph in one.graphs:
                if graph.get("fallbacks"):
                    ops = ", ".join(f"{op} x{n}" for op, n in graph["fallbacks"].items())
                    found.append(
                        f"{one.frame} [{one.compile_id}] {graph['role']}: ATen ops ({ops})"
                    )
            for name, seconds in one.stage_seconds().items():
                if seconds > SLOW_STAGE_SECONDS:
                    found.append(f"slow stage: {name} took {seconds:.1f} s in [{one.compile_id}]")
            if one.error:
                found.append(f"{one.frame} [{one.compile_id}] failed: {one.error}")
        for log in self.logs:
            if log.get("level") in ("WARNING", "ERROR", "CRITICAL"):
                found.append(f"{log['logger']}: {log['message']}")
        return found


def _resolve(value: Any, folder: Path) -> Any:
    """A field written to a file beside the trace, read back; other values unchanged."""
    if isinstance(value, dict) and set(value) == {"file", "chars"}:
        path = (folder / value["file"]).resolve()
        if folder.resolve() not in path.parents:  # NOTE: a trace names files inside it only
            return f"<{value['file']}: outside the trace folder, not read>"
        try:
            return path.read_text()
        except OSError as error:
            return f"<{value['file']}: {error}>"
    return value


def load_trace(folder: str | os.PathLike) -> Trace:
    """Read every `*.jsonl` trace file in `folder` (one per traced process)."""
    folder = Path(folder)
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no trace (*.jsonl) in {folder}: run with EMBER_TRACE_DIR set")
    trace = Trace()
    for path in files:
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:  # a process killed mid-line: keep what is whole
                continue
            event = {key: _resolve(value, folder) for key, value in event.items()}
            _add(trace, event, prefix=f"{path.stem.split('_')[2]}:" if len(files) > 1 else "")
    return trace


def _add(trace: Trace, event: dict[str, Any], prefix: str) -> None:
    kind = event["kind"]
    compile_id = event.get("compile_id")
    if compile_id is not None:
        compile_id = prefix + compile_id
    one = trace.compiles.get(compile_id) if compile_id is not None else None
    if kind == "process":
        trace.processes.append(event)
    elif kind == "compile_start":
        one = trace.compiles.setdefault(compile_id, Compile(compile_id))
        for key in (
            "frame",
            "frame_id",
            "attempt",
            "parent_frame_id",
            "filename",
            "line",
            "source",
        ):
            setattr(one, key, event.get(key))
        one.recompile = trace.pending_recompiles.pop(f"{prefix}{event.get('frame_id')}", None)
    elif kind == "recompile":
        trace.pending_recompiles[f"{prefix}{event.get('frame_id')}"] = event
    elif kind == "cache_hit":
        hit = trace.compiles.get(prefix + str(event.get("entry_compile_id")))
        if hit is not None:
            hit.hits = max(hit.hits, int(event.get("hits", 0)))
    elif kind == "log":
        trace.logs.append(event)
        if one is not None:
            one.logs.append(event)
    elif one is None:
        return
    elif kind == "compile_end":
        one.seconds, one.error = float(event.get("seconds") or 0.0), event.get("error")
    elif kind == "entry":
        one.entry = event
    elif kind == "graph_break":
        one.breaks.append(event)
    elif kind == "aot_graph":
        one.aot_graphs.append(event)
    elif kind == "inductor_pass":
        one.passes.append(event)
    elif kind == "compiled_graph":
        one.graphs.append(event)


# ------------------------------------------------------------------ HTML


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _code(text: str, language: str = "python") -> str:
    return f'<pre class="code" data-lang="{language}">{_e(text)}</pre>'


def _details(title: str, body: str, open_: bool = False) -> str:
    return f"<details{' open' if open_ else ''}><summary>{title}</summary>{body}</details>"


def _frame_tree(trace: Trace) -> str:
    frames = trace.frames()
    children: dict[int | None, list[int]] = defaultdict(list)
    for frame_id, compiles in sorted(frames.items()):
        children[compiles[0].parent_frame_id].append(frame_id)

    def node(frame_id: int) -> str:
        compiles = frames[frame_id]
        first = compiles[0]
        links = " ".join(
            f'<a class="cid" href="#{c.anchor}">[{_e(c.compile_id)}]</a>' for c in compiles
        )
        where = f"{first.filename}:{first.line}" if first.filename else ""
        breaks = sum(len(c.breaks) for c in compiles)
        note = f' <span class="brk">{breaks} graph break(s)</span>' if breaks else ""
        kids = "".join(node(k) for k in children.get(frame_id, []))
        return (
            f'<li><span class="frame">{_e(first.frame)}</span> {links}{note} '
            f'<span class="where">{_e(where)}</span>{"<ul>" + kids + "</ul>" if kids else ""}</li>'
        )

    roots = [f for f in children.get(None, [])]
    roots += [f for parent, fs in children.items() if parent not in frames and parent for f in fs]
    return '<ul class="tree">' + "".join(node(f) for f in roots) + "</ul>"


def _stack_trie(trace: Trace) -> str:
    """Where compiles and breaks happened: the user's frames as a trie, outermost first."""
    trie: dict[str, Any] = {}

    def insert(path: list[str], label: str) -> None:
        level = trie
        for step in path:
            level = level.setdefault(step, {})
        level.setdefault("", []).append(label)

    for one in trace.compiles.values():
        if one.filename:
            where = f"{one.filename}:{one.line} ({one.frame})"
            insert([where], f'<a href="#{one.anchor}">compile [{_e(one.compile_id)}]</a>')
        for b in one.breaks:
            path = [f"{w['filename']}:{w['line']} in {w['function']}: {w.get('text', '')}"
                    for w in b.get("where", [])]  # fmt: skip
            label = (
                f'<span class="brk">graph break</span> [{_e(one.compile_id)}]: {_e(b["reason"])}'
            )
            insert(path or [one.frame], label)

    def render(level: dict[str, Any]) -> str:
        items = []
        for key, value in level.items():
            if key == "":
                continue
            labels = "".join(f"<div>{label}</div>" for label in value.get("", []))
            items.append(f"<li><code>{_e(key)}</code>{labels}{render(value)}</li>")
        return f"<ul>{''.join(items)}</ul>" if items else ""

    return f'<div class="trie">{render(trie)}</div>'


def _chart(trace: Trace) -> str:
    """Stage timings: one stacked horizontal bar per compile, as inline SVG."""
    rows = [(c, c.stage_seconds()) for c in trace.compiles.values()]
    if not rows:
        return "<p>No compiles.</p>"
    longest = max(sum(stages.values()) for _, stages in rows) or 1.0
    width, label, bar_h = 640, 220, 18
    height = bar_h * len(rows) + 40
    parts = [f'<svg class="chart" width="{width + label + 80}" height="{height}" '
             f'xmlns="http://www.w3.org/2000/svg" font-size="11">']  # fmt: skip
    for i, (one, stages) in enumerate(rows):
        y = i * bar_h + 4
        name = f"[{one.compile_id}] {one.frame}"[:34]
        parts.append(f'<text x="0" y="{y + 12}">{_e(name)}</text>')
        x = float(label)
        for stage, seconds in stages.items():
            w = width * seconds / longest
            color = STAGE_COLORS.get(stage, STAGE_COLORS["other"])
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{max(w, 0):.1f}" height="{bar_h - 4}" '
                         f'fill="{color}"><title>{_e(stage)}: {seconds * 1000:.1f} ms</title></rect>')  # fmt: skip
            x += w
        total = sum(stages.values())
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 12}">{total * 1000:.0f} ms</text>')
    legend_y = len(rows) * bar_h + 20
    for i, (stage, color) in enumerate(STAGE_COLORS.items()):
        parts.append(f'<rect x="{label + i * 70}" y="{legend_y}" width="10" height="10" fill="{color}"/>'
                     f'<text x="{label + i * 70 + 14}" y="{legend_y + 9}">{stage}</text>')  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)


def _previous(trace: Trace, one: Compile) -> Compile | None:
    earlier = [c for c in trace.frames()[one.frame_id] if c.attempt < one.attempt and c.entry]
    return earlier[-1] if earlier else None


def _diff(before: str, after: str, name_before: str, name_after: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(), after.splitlines(), name_before, name_after, lineterm=""
    )
    out = []
    for line in lines:
        css = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "")
        out.append(f'<span class="{css}">{_e(line)}</span>')
    return '<pre class="diff">' + "\n".join(out) + "</pre>" if out else "<p>No difference.</p>"


def _compile_section(trace: Trace, one: Compile) -> str:
    entry = one.entry
    head = (
        f'<h3 id="{one.anchor}">[{_e(one.compile_id)}] {_e(one.frame)}</h3>'
        f'<p class="where">{_e(one.filename or "")}:{_e(one.line or "")} - '
        f"compile {one.seconds * 1000:.0f} ms, cache hits {one.hits}"
        f"{', runs eagerly' if entry.get('eager') else ''}</p>"
    )
    body = [head]
    if one.recompile:
        rows = "".join(
            f"<tr><td>{_e(f['compile_id'])}</td><td>{_e(f['reason'])}</td></tr>"
            for f in one.recompile.get("failures", [])
        )
        body.append(
            '<div class="recompile"><b>Recompiled</b>: the guard each cached entry failed'
            f"<table><tr><th>entry</th><th>failing guard</th></tr>{rows}</table></div>"
        )
    for b in one.breaks:
        where = "".join(
            f"<div><code>{_e(w['filename'])}:{_e(w['line'])}</code> in {_e(w['function'])}: "
            f"<code>{_e(w.get('text', ''))}</code></div>"
            for w in b.get("where", [])
        )
        body.append(
            f'<div class="break"><b>Graph break</b>: {_e(b["reason"])} '
            f"({_e(b.get('handling', ''))}){where}</div>"
        )
    guards = entry.get("guards") or []
    if guards:
        body.append(_details(f"Guards ({len(guards)})", _code("\n".join(guards), "guards")))
    previous = _previous(trace, one)
    if previous is not None:
        diffs = _diff("\n".join(previous.entry.get("guards") or []), "\n".join(guards),
                      f"guards [{previous.compile_id}]", f"guards [{one.compile_id}]")  # fmt: skip
        diffs += _diff(previous.entry.get("graph_code") or "", entry.get("graph_code") or "",
                       f"graph [{previous.compile_id}]", f"graph [{one.compile_id}]")  # fmt: skip
        body.append(_details(f"Diff against the entry it adds to [{previous.compile_id}]", diffs))
    artifacts = [
        ("Frame source (the user's function)", one.source, "python"),
        ("Entry code (the frame's new code)", entry.get("entry_code"), "python"),
        ("Guard function", entry.get("guard_code"), "python"),
        ("Captured graph", entry.get("graph_code"), "python"),
    ]
    artifacts += [(f"AOT {g['name']} graph", g.get("text"), "python") for g in one.aot_graphs]
    for p in one.passes:
        language = "cpp" if p["name"] == "codegen" and "extern" in (p.get("text") or "") else (
            "python" if p["name"] in ("codegen", "wrapper") else "text")  # fmt: skip
        title = {"codegen": "kernels", "schedule": "schedule (kernels and loop ranges)"}.get(
            p["name"], p["name"]
        )
        artifacts.append((f"{p['role']} {title} ({p.get('seconds', 0) * 1000:.1f} ms)",
                          p.get("text"), language))  # fmt: skip
    for title, text, language in artifacts:
        if text:
            body.append(_details(_e(title), _code(text, language)))
    return '<section class="compile">' + "".join(body) + "</section>"


def render(trace: Trace) -> str:
    """The report page of `trace`, as one HTML document."""
    warnings = trace.warnings()
    compiles = list(trace.compiles.values())
    kernels = sum(g.get("kernel_count") or 0 for c in compiles for g in c.graphs)
    summary = (
        f"{len(trace.frames())} frames, {len(compiles)} compiles, "
        f"{sum(1 for c in compiles if c.recompile)} recompiles, "
        f"{sum(len(c.breaks) for c in compiles)} graph breaks, {kernels} kernels, "
        f"{sum(c.total_seconds() for c in compiles):.2f} s compiling"
    )
    processes = "".join(
        f"<li>pid {_e(p.get('pid'))}: {_e(' '.join(p.get('argv', [])))} (python "
        f"{_e(p.get('python'))}, torch {_e(p.get('torch'))})</li>"
        for p in trace.processes
    )
    warning_box = (
        '<div id="warnings"><h2>Warnings</h2><ul>'
        + "".join(f"<li>{_e(w)}</li>" for w in warnings)
        + "</ul></div>"
        if warnings
        else '<div id="warnings" class="ok">No warnings.</div>'
    )
    sections = "".join(_compile_section(trace, c) for c in compiles)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ember compile report</title>
<style>{_CSS}</style></head><body>
<h1>ember compile report</h1>
{warning_box}
<p id="summary">{_e(summary)}</p><ul class="processes">{processes}</ul>
<h2>Frames</h2>{_frame_tree(trace)}
<h2>Where compiles and graph breaks happened</h2>{_stack_trie(trace)}
<h2>Stage timings</h2>{_chart(trace)}
<h2>Compiles</h2>{sections}
<script>{_HIGHLIGHTER}</script>
</body></html>
"""


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1200px}
pre{background:#f6f8fa;padding:.6em;overflow:auto;font:12px/1.35 monospace;max-height:40em}
#warnings{background:#fff4e5;border:1px solid #f0a020;padding:.3em 1em;margin-bottom:1em}
#warnings.ok{background:#eef8ee;border-color:#6a6}
.tree .frame{font-weight:600}.cid{font-family:monospace;margin-right:.3em}
.where{color:#666;font-size:12px}.brk{color:#b00;font-weight:600}
.compile{border-top:1px solid #ddd;margin-top:1em}
.recompile,.break{background:#fdf1f1;padding:.4em;margin:.4em 0}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
.kw{color:#a626a4;font-weight:600}.str{color:#50a14f}.com{color:#a0a1a7;font-style:italic}
.num{color:#986801}.add{color:#22863a;background:#e6ffed}.del{color:#b31d28;background:#ffeef0}
.hunk{color:#6f42c1}summary{cursor:pointer;margin:.2em 0}
"""

# A small highlighter: keywords, strings, comments and numbers of Python and C++.
_HIGHLIGHTER = r"""
(function(){
  var KW={python:"def return if else elif for while in not and or is None True False import from as with lambda class pass raise try except finally yield assert del global",
          cpp:"extern void const float double int int64_t int32_t bool auto for if else return struct static inline char unsigned long template typename pragma omp"};
  var RULES=[["com",/#[^\n]*|\/\/[^\n]*|\/\*[\s\S]*?\*\//y],["str",/"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'/y],
             ["num",/\d+(\.\d+)?([eE][-+]?\d+)?[fL]?/y],["id",/[A-Za-z_]\w*/y],["ws",/\s+/y],["op",/[\s\S]/y]];
  function esc(s){return s.replace(/&/g,"&amp;").replace(/</g,"&lt;").replace(/>/g,"&gt;");}
  function highlight(pre){
    var lang=pre.getAttribute("data-lang"); var kw=KW[lang]; if(!kw) return;
    var words={}; kw.split(" ").forEach(function(w){words[w]=1;});
    var text=pre.textContent, out=[], m, at=0;
    while(at<text.length){
      for(var i=0;i<RULES.length;i++){ RULES[i][1].lastIndex=at; m=RULES[i][1].exec(text); if(m) break; }
      var tok=m[0], kind=RULES[i][0]; at+=tok.length;
      if(kind==="id"&&words[tok]) kind="kw";
      out.push(kind==="com"||kind==="str"||kind==="num"||kind==="kw" ? '<span class="'+kind+'">'+esc(tok)+'</span>' : esc(tok));
    }
    pre.innerHTML=out.join(""); pre.setAttribute("data-highlighted","1");
  }
  document.querySelectorAll("pre.code").forEach(highlight);
})();
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ember.report",
        description="Render an ember compile trace (EMBER_TRACE_DIR) as one HTML page.",
    )
    parser.add_argument("trace_dir", help="the folder EMBER_TRACE_DIR or ember.trace() wrote")
    parser.add_argument("-o", "--output", default="report.html", help="the page to write")
    args = parser.parse_args(argv)
    try:
        trace = load_trace(args.trace_dir)
    except FileNotFoundError as error:
        print(f"ember.report: {error}", file=sys.stderr)
        return 1
    Path(args.output).write_text(render(trace), encoding="utf-8")
    print(f"wrote {args.output}: {len(trace.compiles)} compiles, {len(trace.warnings())} warnings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
