"""The generated Python wrapper: allocates buffers, calls kernels and ATen, frees at last use.

Memory planning happens here: each buffer is deleted right after its last use,
unless a later kernel output of the same (dtype, elements) will take it over
without raising the call's peak: a buffer only kernels touched then goes to a
pool under that key, and the later allocation reuses its memory (the buffer
itself when the layouts are equal, else a view of it). A buffer nothing takes
over is never pooled, so it does not stay allocated until the call returns; one
that would wait across the peak of the plan is deleted too (`_reused`).

Each call costs as few Python operations as the plan allows: views are
`torch.as_strided` calls in the wrapper's own text, an ATen result's layout is
compared with the traced one inline (ensure_layout runs only when they differ),
and a buffer that several kernels read has its data pointer read once.

With symbolic sizes the wrapper first reads each size symbol from the inputs
(`s0 = x.size(0)`); allocations, views and extern calls then compute their sizes
from the symbols, and kernels take the symbols they use as arguments. Pool keys
are element counts as expressions, so memory is reused only between buffers
whose sizes are equal for every input size.
"""

from __future__ import annotations

import math
from collections import Counter

import sympy
import torch
import torch.utils._pytree as pytree

from inductor_codegen.codegen.kernel import KernelSource
from inductor_codegen.errors import DynamicShapeError
from inductor_codegen.indexing import contiguous_strides, is_symbolic, py_index, py_number
from inductor_codegen.ir import (
    ComputedBuffer,
    ExternBuffer,
    Layout,
    Pointwise,
    ScalarArg,
    TensorValue,
    expr_loads,
)
from inductor_codegen.lowering import BufferRef, GraphLowering, OpaqueInput
from inductor_codegen.runtime import IndexStatus, reinterpret
from inductor_codegen.scheduler import FusedKernel, Schedule, outer_vars
from inductor_codegen.symbols import bind_symbols, check_bound, layout_symbols

__all__ = ["WrapperSource", "generate_wrapper"]

_ADDMM, _MM = torch.ops.aten.addmm.default, torch.ops.aten.mm.default
# ATen products that always return a new row-major tensor: no stride check after them.
_ROW_MAJOR_RESULTS = frozenset(
    {_ADDMM, _MM, torch.ops.aten.bmm.default, torch.ops.aten.baddbmm.default}
)


# ATen ops (their default overloads) whose public torch function is the same op: the
# hot extern calls of model graphs (matmuls, convolutions, attention, lookups).
DIRECT_BINDINGS = frozenset(
    {
        "convolution",
        "addmm",
        "mm",
        "bmm",
        "baddbmm",
        "linear",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "index_select",
        "embedding",
        "cumsum",
    }
)


def direct_binding(op, kwargs) -> object | None:
    """`op`'s public torch function (torch.X or torch._C._nn.X) when it is in
    DIRECT_BINDINGS and every keyword in `kwargs` is keyword-only in its schema (the
    public functions name their first argument `input`, schemas `self`); else None."""
    if not isinstance(op, torch._ops.OpOverload) or op._overloadname != "default":
        return None
    namespace, _, name = op._schema.name.partition("::")
    if namespace != "aten" or name not in DIRECT_BINDINGS:
        return None
    keyword_only = {a.name for a in op._schema.arguments if a.kwarg_only}
    if not set(kwargs) <= keyword_only:
        return None
    return getattr(torch._C._VariableFunctions, name, None) or getattr(torch._C._nn, name, None)


class WrapperSource:
    """The wrapper's text and the objects its module namespace must hold."""

    def __init__(self):
        self.lines: list[str] = []
        self.namespace: dict[str, object] = {}
        self._bound = 0

    def use(self, name: str, value: object) -> str:
        """Put `value` in the namespace under the fixed `name` (a run-time helper)."""
        self.namespace[name] = value
        return name

    def bind(self, value: object, hint: str = "const") -> str:
        for name, existing in self.namespace.items():
            if existing is value:
                return name
        name = f"_{hint}{self._bound}"
        self._bound += 1
        self.namespace[name] = value
        return name

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _tuple(values) -> str:
    items = [py_index(v) for v in values]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _pool_key(layout: Layout) -> tuple:
    numel = layout.storage_numel()
    return (layout.dtype, int(numel) if numel.is_Integer else numel)


def _bytes(layout: Layout) -> int | None:
    """Bytes of a buffer of `layout`; None when its size is symbolic."""
    numel = layout.storage_numel()
    return int(numel) * layout.dtype.itemsize if numel.is_Integer else None


def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def layout_args(layout: Layout) -> str:
    return f"{_tuple(layout.size)}, {_tuple(layout.stride)}"


def _same_layout(a: Layout, b: Layout) -> bool:
    return a.dtype == b.dtype and a.size == b.size and a.stride == b.stride and a.offset == b.offset


class WrapperCodegen:
    """The one wrapper generator: binds sizes, allocates and reuses buffers, calls extern
    ops, frees each buffer after its last use, and returns the outputs.

    What a device changes are its hooks: `computes_in_place`, `allocation` (a new
    buffer), `prologue` (lines at the top of `call`), `held_names` (the locals a buffer
    lives in) and `kernel_call` (the lines that run one kernel). These defaults are the CPU's (C++
    kernels called through data pointers); `codegen/triton/wrapper.py` overrides them.
    """

    # Device hook: whether a kernel may take an input and an output that are one buffer
    # (`_in_place`). Not for C++: its kernels declare every pointer __restrict__.
    computes_in_place = False

    def __init__(self, graph: GraphLowering, schedule: Schedule, kernels: dict[str, KernelSource]):
        self.graph = graph
        self.schedule = schedule
        self.kernels = kernels
        self.out = WrapperSource()
        self.buffers = graph.buffer_by_name
        self.status: str | None = None
        # Kernel calls taking each buffer's pointer, and the locals holding pointers read once.
        self.pointer_uses: Counter[str] | None = None
        self.pointers: dict[str, str] = {}
        # Buffers allocated with the shape and strides of the one view every call reads
        # them through (see `_allocation_views`).
        self.alloc_layouts: dict[str, Layout] = {}
        # Kernel outputs computed into the memory of an input that dies there (`_in_place`).
        self.in_place: dict[str, str] = {}

    def render(self, value) -> str:
        """A Python expression for an extern-call argument."""
        if isinstance(value, BufferRef):
            if value.layout is None:
                return value.name
            lay = value.layout
            if value.name in self.graph.constants and not layout_symbols(lay):
                # Views of constants are made once, at load time.
                base = self.graph.constants[value.name]
                view = reinterpret(base, _ints(lay.size), _ints(lay.stride), int(lay.offset))
                return self.out.bind(view, f"{value.name}_view")
            return self.view(value.name, lay)
        if isinstance(value, sympy.Expr):
            return py_index(value)
        if isinstance(value, (ScalarArg, OpaqueInput)):
            return value.name
        if isinstance(value, list):
            return "[" + ", ".join(self.render(v) for v in value) + "]"
        if isinstance(value, tuple):
            inner = ", ".join(self.render(v) for v in value)
            return "(" + inner + ("," if len(value) == 1 else "") + ")"
        if isinstance(value, float) and not math.isfinite(value):
            return f"float('{value}')"
        if value is None or isinstance(value, (bool, int, float, str)):
            return repr(value)
        if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
            return str(value)
        if isinstance(value, torch.device):
            return f"torch.device({str(value)!r})"
        return self.out.bind(value)

    def view(self, name: str, layout: Layout) -> str:
        """A view of buffer `name` with `layout`, its offset counted from `name`'s own.

        `torch.as_strided` without an offset keeps the base's storage offset, so a view
        at offset 0 needs no storage_offset() call.
        """
        alloc = self.alloc_layouts.get(name)
        if alloc is not None and layout.offset == 0 and _same_layout(alloc, layout):
            return name
        as_strided = self.out.use("as_strided", torch.as_strided)
        if layout.offset == 0:
            return f"{as_strided}({name}, {layout_args(layout)})"
        return f"reinterpret({name}, {layout_args(layout)}, {py_index(layout.offset)})"

    def op_name(self, op, kwargs=None) -> str:
        """The name the wrapper calls `op` by, bound once.

        An op of DIRECT_BINDINGS called with keyword-only keywords alone goes through its
        public torch function (`torch.convolution`): the same ATen op, reached through
        the generated argument parser in less host time than the boxed call (5.5 us less
        per convolution on the H100 machine's host). Other OpOverloads are called through
        their C++ callable: `aten.mm.default(...)` would run OpOverload.__call__, a
        Python frame that only forwards to it.
        """
        direct = direct_binding(op, kwargs or {})
        if direct is not None:
            return self.out.use(f"torch_{direct.__name__}", direct)
        target = op._op if isinstance(op, torch._ops.OpOverload) else op
        text = str(op)
        if text.startswith("aten.") and text.replace(".", "_").isidentifier():
            return self.out.use(text.replace(".", "_"), target)
        return self.out.bind(target, "op")

    def generate(self) -> WrapperSource:
        out = self.out
        steps = self.schedule.steps
        uses = self._uses(steps)
        last_use: dict[str, int] = {}
        for position, names in enumerate(uses):
            for name in names:
                last_use[name] = position
        held = self._output_held()
        self.alloc_layouts = self._allocation_views(steps)
        # A fallback op may return a view of its input, so what it reads is never
        # reused; extern kernels (matmul, convolution, ...) return fresh tensors.
        extern_read = {
            n for s in steps if isinstance(s, ExternBuffer) and s.is_fallback for n in s.reads
        }
        freed = self._freed_after(steps, uses, last_use, held)
        self.in_place = self._in_place(steps, last_use, held, extern_read)
        taken = set(self.in_place.values())
        poolable = {name for names in freed for name in names if name not in extern_read | taken}
        reused = self._reused(steps, freed, poolable)
        pool: dict[tuple, list[str]] = {}
        lines = out.lines
        lines.append(
            '"""Generated by inductor_codegen: calls the compiled kernels of one graph."""'
        )
        lines.append("")
        lines.append("")
        lines.append("def call(args):")
        names = [i.name if not isinstance(i, str) else i for i in self.graph.inputs]
        if names:
            lines.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args")
        lines.append("    args.clear()")
        lines += [f"    {line}" for line in self._symbol_lines(names)]
        lines += [f"    {line}" for line in self.prologue(names)]
        for position, step in enumerate(steps):
            if isinstance(step, ExternBuffer):
                self._extern(step)
            else:
                self.kernel_call(step, pool)
            for name in freed[position]:
                if name in reused:
                    pool.setdefault(_pool_key(self.buffers[name].layout), []).append(name)
                    continue
                lines.append(f"    del {', '.join(self.held_names(name))}")
        lines.append(f"    return {self._outputs()}")
        return out

    def _freed_after(self, steps, uses, last_use, held) -> list[list[str]]:
        """The buffers and inputs whose last use is each step, in the order they are freed."""
        freed = []
        for position in range(len(steps)):
            freed.append(
                [
                    name
                    for name in sorted(uses[position])
                    if last_use.get(name) == position
                    and name not in held
                    and name not in self.graph.constants
                ]
            )
        return freed

    def _reused(self, steps, freed, poolable) -> set[str]:
        """The freed buffers a later kernel output takes over (see `_allocate_outputs`).

        Only these go to the pool; any other buffer is deleted at its last use. A pooled
        buffer stays allocated from its last use until the output that takes it over:
        one nothing takes would stay until the call returns (the input of an extern
        convolution, a weight converted to channels-last, a buffer of a size no later
        output has), and one held across the call's peak raises the peak by its size.
        So a buffer is taken over only when the bytes alive while it waits, plus its
        own, stay within the peak of the plan that reuses nothing (buffers of symbolic
        size are taken over as before: their bytes are not known here).

        Pools are stacks. A buffer the simulation below passes over (held too long) is
        taken out of it, so at each allocation the buffer it takes is on top of the
        stack of taken buffers alone, which is what `generate` pushes.
        """
        allocated, sizes = self._allocations(steps)
        taken = set(self.in_place.values())  # their memory lives on as their kernel's output
        live, profile = 0, []
        for position in range(len(steps)):
            live += sum(
                sizes[name] or 0 for name in allocated[position] if name not in self.in_place
            )
            profile.append(live)
            live -= sum(
                sizes[name] or 0 for name in freed[position] if name in sizes and name not in taken
            )
        peak = max(profile, default=0)
        pool: dict[tuple, list[tuple[str, int]]] = {}
        reused: set[str] = set()
        for position, step in enumerate(steps):
            if not isinstance(step, ExternBuffer):
                for arg in self.kernels[step.name].args:
                    if arg.kind != "out" or self._stored_into(arg.name) is not None:
                        continue
                    if arg.name in self.in_place:
                        continue
                    stack = pool.get(_pool_key(self.allocated_layout(arg.name)), [])
                    while stack:
                        name, since = stack.pop()
                        size = sizes.get(name)
                        waiting = range(since + 1, position)
                        if (
                            size is not None
                            and max((profile[t] for t in waiting), default=0) + size > peak
                        ):
                            continue  # held across the peak: deleted at its last use instead
                        for t in waiting:
                            profile[t] += size or 0
                        reused.add(name)
                        break
            for name in freed[position]:
                buf = self.buffers.get(name)
                if isinstance(buf, ComputedBuffer) and name in poolable:
                    pool.setdefault(_pool_key(buf.layout), []).append((name, position))
        return reused

    def _in_place(self, steps, last_use, held, extern_read) -> dict[str, str]:
        """Kernel outputs computed into the memory of an input of the same kernel that
        dies there: output -> input. A pointwise kernel of one buffer whose every load
        of the input is at the element it stores (same layout, same index) reads each
        element before it overwrites it, so the input's memory can hold the output
        (a GELU after its matmul: one activation fewer at the peak).

        The input must be memory the wrapper owns alone: a kernel output (not a mutated
        input's new value) or a matmul-like extern result, not a fallback's (it may be a
        view) and not read by a fallback, nor a graph input, constant or output.
        """
        in_place: dict[str, str] = {}
        if not self.computes_in_place:
            return in_place
        for position, step in enumerate(steps):
            if not isinstance(step, FusedKernel) or len(step.nodes) != 1:
                continue
            if step.items != step.nodes or step.name not in self.kernels:
                continue
            (name,) = step.nodes
            buf = self.buffers.get(name)
            if not isinstance(buf, ComputedBuffer) or not isinstance(buf.body, Pointwise):
                continue
            if buf.stored_into is not None or buf.body.ranges != buf.layout.size:
                continue
            layout = self.allocated_layout(name)
            if not _same_layout(layout, buf.layout) or _bytes(layout) is None:
                continue
            idx = outer_vars(len(buf.layout.size))
            loads = expr_loads(buf.body.loader(idx))
            store = buf.layout.index(idx)
            for candidate in dict.fromkeys(load.buffer for load in loads):
                if (
                    last_use.get(candidate) != position
                    or candidate in held
                    or candidate in extern_read
                    or candidate in in_place.values()
                    or not self._owned(candidate)
                ):
                    continue
                source = self.allocated_layout(candidate)
                if not _same_layout(source, buf.layout) or not _same_layout(
                    self.buffers[candidate].layout, buf.layout
                ):
                    continue
                if all(
                    (load.index == store or sympy.expand(load.index - store) == 0)
                    for load in loads
                    if load.buffer == candidate
                ):
                    in_place[name] = candidate
                    break
        return in_place

    def _owned(self, name: str) -> bool:
        """Whether buffer `name` is memory the wrapper allocated (or a matmul-like extern
        returned fresh) and nothing else holds."""
        buf = self.buffers.get(name)
        if name in self.graph.constants:
            return False
        if isinstance(buf, ComputedBuffer):
            return buf.stored_into is None
        if isinstance(buf, ExternBuffer):
            return not buf.is_fallback and not buf.tuple_result and buf.layout is not None
        return False

    def _allocations(self, steps) -> tuple[list[list[str]], dict[str, int | None]]:
        """The buffers each step allocates (kernel outputs, extern results) and their bytes
        (None when symbolic)."""
        allocated: list[list[str]] = []
        sizes: dict[str, int | None] = {}
        for step in steps:
            if isinstance(step, ExternBuffer):
                if step.tuple_result:
                    outputs = [
                        (f"{step.name}_{i}", lay) for i, lay in enumerate(step.layouts) if lay
                    ]
                else:
                    outputs = [(step.name, step.layout)] if step.layout is not None else []
            else:
                outputs = [
                    (a.name, self.allocated_layout(a.name))
                    for a in self.kernels[step.name].args
                    if a.kind == "out"
                ]
            allocated.append([name for name, _ in outputs])
            for name, layout in outputs:
                sizes[name] = _bytes(layout)
        return allocated, sizes

    def prologue(self, input_names: list[str]) -> list[str]:
        """Lines run once per call after the inputs are unpacked (none for C++)."""
        return []

    def held_names(self, name: str) -> list[str]:
        """The locals holding buffer `name`, deleted together after its last use."""
        return [name]

    def _uses(self, steps) -> list[set[str]]:
        uses = []
        for step in steps:
            if isinstance(step, ExternBuffer):
                names = set(step.reads)
                if step.tuple_result:
                    names |= {
                        f"{step.name}_{i}" for i, lay in enumerate(step.layouts) if lay is not None
                    }
                elif step.layouts:
                    names.add(step.name)
            else:
                names = {a.name for a in self.kernels[step.name].args if a.kind in ("in", "out")}
                # (an input a kernel output is computed into lives until that kernel)
                names |= {self._stored_into(n) for n in names} - {None}
            uses.append(names)
        return uses

    def _output_held(self) -> set[str]:
        held = set()
        for value in self.graph.outputs:
            if isinstance(value, TensorValue) and value.view is not None:
                held.add(value.view.buffer)
        return held

    def _extern(self, step: ExternBuffer) -> None:
        lines = self.out.lines
        kind = "fallback" if step.is_fallback else "extern kernel"
        linear = self._as_linear(step)
        if linear is not None:
            lines.append(f"    {step.name} = {linear}  # {kind}, {step.op} of a transposed weight")
        else:
            args = [self.render(a) for a in step.args]
            args += [f"{k}={self.render(v)}" for k, v in step.kwargs.items()]
            call = self.op_name(step.op, step.kwargs)
            lines.append(f"    {step.name} = {call}({', '.join(args)})  # {kind}")
        if step.tuple_result:
            for i, lay in enumerate(step.layouts):
                if lay is not None:
                    lines.append(
                        f"    {step.name}_{i} = ensure_layout({step.name}[{i}], {layout_args(lay)})"
                    )
            lines.append(f"    del {step.name}")
        elif step.layout is not None:
            # The common case (ATen chose the traced strides) costs one tuple compare.
            lay = step.layout
            if step.op in _ROW_MAJOR_RESULTS and lay.stride == contiguous_strides(lay.size):
                return
            lines.append(
                f"    if {step.name}.stride() != {_tuple(lay.stride)}: "
                f"{step.name} = ensure_layout({step.name}, {layout_args(lay)})"
            )

    def _as_linear(self, step: ExternBuffer) -> str | None:
        """`addmm(b, x, w.t())` or `mm(x, w.t())` as `linear(x, w, b)`: the same ATen
        kernel (linear calls addmm or mm on 2-D inputs), without the view or its frame."""
        if step.op is _ADDMM and not step.kwargs and len(step.args) == 3:
            bias, x, transposed = step.args
            if not (isinstance(bias, BufferRef) and self._rank(bias) == 1):
                return None
        elif step.op is _MM and not step.kwargs and len(step.args) == 2:
            bias, (x, transposed) = None, step.args
        else:
            return None
        if not (isinstance(x, BufferRef) and self._is_transpose(transposed)):
            return None
        linear = self.op_name(torch.ops.aten.linear.default)
        args = [self.render(x), transposed.name] + ([self.render(bias)] if bias else [])
        return f"{linear}({', '.join(args)})"

    def _base_layout(self, name: str) -> Layout | None:
        return getattr(self.buffers.get(name), "layout", None)

    def _rank(self, ref: BufferRef) -> int | None:
        layout = ref.layout or self._base_layout(ref.name)
        return None if layout is None else len(layout.size)

    def _is_transpose(self, ref) -> bool:
        """Whether `ref` is exactly `base.t()` of a 2-D buffer or input `base`."""
        if not isinstance(ref, BufferRef) or ref.layout is None or ref.name in self.graph.constants:
            return False
        base, view = self._base_layout(ref.name), ref.layout
        return (
            base is not None
            and len(base.size) == 2
            and base.offset == 0
            and view.offset == 0
            and view.dtype == base.dtype
            and view.size == base.size[::-1]
            and view.stride == base.stride[::-1]
        )

    def allocated_layout(self, name: str) -> Layout:
        """The shape and strides buffer `name`'s tensor is allocated with."""
        return self.alloc_layouts.get(name) or self.buffers[name].layout

    def _allocation_views(self, steps) -> dict[str, Layout]:
        """Computed buffers that every reference outside kernels (extern and fallback
        arguments, graph outputs) reads through one view at offset 0, of the same dtype and
        storage: a channels-last buffer, stored [N, H, W, C], passed to convolutions as
        NCHW. They are allocated with that view's shape and strides, so each call passes
        the buffer itself and not an `as_strided` view of it (kernels take pointers)."""
        seen: dict[str, set] = {}
        for step in steps:
            if not isinstance(step, ExternBuffer):
                continue
            for ref in pytree.tree_leaves((step.args, step.kwargs)):
                if isinstance(ref, BufferRef):
                    # `linear(x, w)` passes the base of a transposed weight itself.
                    plain = ref.layout is None or self._is_transpose(ref)
                    seen.setdefault(ref.name, set()).add(None if plain else ref.layout)
        for value in self.graph.outputs:
            if isinstance(value, TensorValue) and value.view is not None:
                seen.setdefault(value.view.buffer, set()).add(value.view.layout)
        views = {}
        for name, layouts in seen.items():
            buf = self.buffers.get(name)
            if not isinstance(buf, ComputedBuffer) or len(layouts) != 1:
                continue
            (layout,) = layouts
            if (
                layout is None
                or layout.offset != 0
                or layout.dtype != buf.layout.dtype
                or _same_layout(layout, buf.layout)
                or layout.storage_numel() != buf.layout.storage_numel()
            ):
                continue
            views[name] = layout
        return views

    def _allocate_outputs(self, source, pool) -> None:
        """Each kernel output: a freed buffer of the same layout from `pool`, or a new one."""
        lines = self.out.lines
        for arg in source.args:
            if arg.kind != "out":
                continue
            into = self._stored_into(arg.name)
            if into is not None:  # a mutated input's new value, computed in its memory
                lines.append(f"    {arg.name} = {into}")
                continue
            if arg.name in self.in_place:  # deleted after the kernel, its last use
                lines.append(f"    {arg.name} = {self.in_place[arg.name]}  # in place")
                continue
            layout = self.allocated_layout(arg.name)
            key = _pool_key(layout)
            if pool.get(key):
                old = pool[key].pop()
                if _same_layout(self.allocated_layout(old), layout):
                    view = old
                else:  # pooled buffers start at their storage's offset 0
                    view = self.view(old, Layout(layout.dtype, layout.size, layout.stride))
                lines.append(f"    {arg.name} = {view}  # reuses {old}")
                lines.append(f"    del {old}")
            else:
                lines.append(f"    {arg.name} = {self.allocation(layout)}")

    def _stored_into(self, name: str) -> str | None:
        """The input buffer `name` is computed into (ComputedBuffer.stored_into), or None."""
        return getattr(self.buffers.get(name), "stored_into", None)

    def allocation(self, layout: Layout) -> str:
        """A new CPU buffer of `layout`: torch.empty_strided itself, no helper frame."""
        device = self.out.use("_cpu", torch.device("cpu"))
        return f"torch.empty_strided({layout_args(layout)}, dtype={layout.dtype}, device={device})"

    def kernel_call(self, kernel: FusedKernel, pool) -> None:
        """Device hook: the lines that call one kernel (C++: through data pointers)."""
        lines = self.out.lines
        source = self.kernels[kernel.name]
        self._allocate_outputs(source, pool)
        if self._writes_nothing(source):
            # NOTE: every output is empty, so the kernel has nothing to do; calling it
            # could still read through a load hoisted above a loop of zero trips (an
            # index of an empty tensor).
            lines.append(f"    # {kernel.name}: every output has no elements, not called")
            return
        call_args = []
        for arg in source.args:
            if arg.kind in ("scalar", "size"):
                call_args.append(arg.name)
                continue
            if arg.kind == "status":
                call_args.append(f"{self._status()}.address")
                continue
            # ATen results need no check here: ensure_layout gave each its traced layout.
            call_args.append(self._pointer(arg.name))
        lines.append(f"    {kernel.name}({', '.join(call_args)})")
        if source.checks:
            status, checks = self._status(), self.out.bind(source.checks, "checks")
            lines.append(f"    if {status}.cells[0]: {status}.raise_error({checks})")

    def _writes_nothing(self, source) -> bool:
        """Whether every output of a kernel has a size of 0 in some dim (static sizes)."""
        outputs = [self.allocated_layout(a.name) for a in source.args if a.kind == "out"]
        return bool(outputs) and all(
            any(_is_zero(size) for size in layout.size) for layout in outputs
        )

    def _pointer(self, name: str) -> str:
        """`name`'s data pointer; read once into `name_ptr` when several kernels take it."""
        if self.pointer_uses is None:
            self.pointer_uses = Counter(
                a.name
                for step in self.schedule.steps
                if isinstance(step, FusedKernel)
                for a in self.kernels[step.name].args
                if a.kind in ("in", "out")
            )
        if name in self.pointers:
            return self.pointers[name]
        if self.pointer_uses[name] < 2:
            return f"{name}.data_ptr()"
        self.pointers[name] = f"{name}_ptr"
        self.out.lines.append(f"    {name}_ptr = {name}.data_ptr()")
        return self.pointers[name]

    def _status(self) -> str:
        """The IndexStatus kernels with bounds checks record failures in (one per graph)."""
        if self.status is None:
            self.status = self.out.bind(IndexStatus(), "index_status")
        return self.status

    def _outputs(self) -> str:
        rendered = [self._output(v) for v in self.graph.outputs]
        spec = self.graph.output_spec
        return _render_spec(spec, iter(rendered), self.out)

    def _output(self, value) -> str:
        if isinstance(value, TensorValue):
            base = value.view.buffer
            base_layout = self.allocated_layout(base)
            lay = value.view.layout
            if base_layout == lay:
                return base
            return self.view(base, lay)
        return self.render(value)

    def _symbol_lines(self, input_names: list[str]) -> list[str]:
        """`s0 = x.size(0)` for each size symbol the compiled graph uses."""
        needed = self._needed_symbols()
        if not needed:
            return []
        bindings = bind_symbols(
            self.graph.inputs, self.graph.symint_inputs, self.graph.float_inputs
        )
        check_bound(needed, bindings, "the compiled graph")
        lines = []
        for name, binding in bindings.items():
            if name not in needed or binding.source == name:
                continue
            if name in input_names or name in self.buffers:
                raise DynamicShapeError(
                    f"size symbol {name} has the name of a graph input or buffer "
                    "that holds another value; rename that placeholder"
                )
            lines.append(binding.line)
        for name, expr in self.graph.derived_scalars.items():
            lines.append(f"{name} = {py_number(expr)}")
        return lines

    def _needed_symbols(self) -> set[str]:
        """Names of the size symbols in buffer layouts, kernel and extern arguments, outputs."""
        needed: set = set()
        for expr in self.graph.derived_scalars.values():
            needed |= {s.name for s in expr.free_symbols}
        for buf in self.buffers.values():
            for layout in getattr(buf, "layouts", None) or (getattr(buf, "layout", None),):
                needed |= layout_symbols(layout)
        for source in self.kernels.values():
            needed |= {a.name for a in source.args if a.kind == "size"}
        values = [*self.graph.outputs]
        for step in self.schedule.steps:
            if isinstance(step, ExternBuffer):
                values += [step.args, step.kwargs]
        for value in _leaves(values):
            if isinstance(value, sympy.Expr) and is_symbolic(value):
                needed |= {s.name for s in value.free_symbols}
            elif isinstance(value, BufferRef):
                needed |= layout_symbols(value.layout)
            elif isinstance(value, TensorValue) and value.view is not None:
                needed |= layout_symbols(value.view.layout)
        return needed


def _leaves(value):
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    else:
        yield value


def _children(spec) -> list:
    """A TreeSpec's child specs (a method in newer torch, an attribute in older)."""
    method = getattr(spec, "children", None)
    return list(method()) if callable(method) else list(spec.children_specs)


def plain_spec(spec) -> bool:
    """Whether the output structure is nested tuples and lists only (printed in the wrapper)."""
    if spec.is_leaf():
        return True
    return spec.type in (tuple, list) and all(plain_spec(c) for c in _children(spec))


def _render_spec(spec, leaves, out: WrapperSource) -> str:
    if not plain_spec(spec):
        return "[" + ", ".join(leaves) + "]"
    if spec.is_leaf():
        return next(leaves)
    children = [_render_spec(c, leaves, out) for c in _children(spec)]
    if spec.type is tuple:
        return "(" + ", ".join(children) + ("," if len(children) == 1 else "") + ")"
    return "[" + ", ".join(children) + "]"


def generate_wrapper(
    graph: GraphLowering, schedule: Schedule, kernels: dict[str, KernelSource]
) -> WrapperSource:
    return WrapperCodegen(graph, schedule, kernels).generate()


def _is_zero(size) -> bool:
    """A size known to be 0 (a symbolic size never is: 0 and 1 stay static)."""
    try:
        return int(size) == 0
    except TypeError:
        return False
