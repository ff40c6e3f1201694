"""GraphLowering: walks an FX graph of ATen ops and builds the loop IR.

The result is a list of buffers in program order (computed and extern), the
graph inputs, and the outputs as `TensorValue`s (views of buffers or inputs).
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from dataclasses import dataclass, replace

import sympy
import torch
import torch.fx
import torch.utils._pytree as pytree

from guards import artifact_logger
from inductor_codegen.errors import DynamicShapeError, LoweringError, UnsupportedGraphError
from inductor_codegen.indexing import as_index, is_symbolic
from inductor_codegen.ir import (
    ComputedBuffer,
    Constant,
    ExternBuffer,
    InputBuffer,
    Layout,
    Load,
    Op,
    Pointwise,
    Reduction,
    ScalarArg,
    TensorValue,
    expr_loads,
    expr_size,
)
from inductor_codegen.lowering.common import size_hint, size_hints_scope
from inductor_codegen.lowering.registry import LoweringTable
from inductor_codegen.lowering.reinplace import (
    INPLACE_SCATTERS,
    inplace_writes,
    nested_writes,
    store_old_values,
)
from inductor_codegen.runtime import written_through

__all__ = [
    "BufferRef",
    "GraphLowering",
    "SUPPORTED_DTYPES",
    "SAVED_OUTPUTS",
    "USER_VISIBLE_OUTPUTS",
    "dense_layout",
    "inline_size",
    "load_order",
    "meta_layout",
    "readers",
]

aten = torch.ops.aten
# ATen calls whose result layout does not depend on their operands' strides and
# that read any dense operand in place (BLAS takes either orientation of a
# matrix): an operand computed for them is stored in the order its loads read.
ANY_ORDER_OPERANDS = frozenset(
    {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default}
)

# ATen ops whose result depends on where their first operand's elements lie in memory
# (not only on its values): that operand is stored in its traced layout. (`as_strided`
# itself reads its base's storage: see its lowering.)
STORAGE_ADDRESSING_OPS = frozenset({aten.as_strided_scatter.default})

# ATen kernels that allocate an output like one of their operands (`empty_like`: the
# operand's stride order): op -> (operand, output). A computed operand is stored in the
# traced output's stride order, so the result comes back in the layout the kernels were
# generated for; stored row-major, it would come back row-major and be copied.
OUTPUT_LIKE_OPERAND = {
    # CPU flash attention's output follows the query (a RoPE'd query traced as a
    # transposed (batch, seq, heads, dim) view).
    aten._scaled_dot_product_flash_attention_for_cpu.default: (0, 0),
}

SUPPORTED_DTYPES = frozenset(
    {
        torch.float32,
        torch.float64,
        torch.bfloat16,
        torch.float16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    }
)
# The output node's meta key listing the flat output positions the caller hands to
# the user as they are (aot_autograd sets it on inference graphs). Nothing else reads
# their strides, so a padded matmul result among them is returned as its window.
# Without the key, every output gets the traced graph's strides.
USER_VISIBLE_OUTPUTS = "user_visible_output_idxs"
# The output node's meta key listing the flat output positions that only the graph's
# own backward reads (aot_autograd sets it on forward graphs: the saved activations).
# Nobody outside the compiled pair sees their strides: a layout a lowering chose for
# such a value (channels-last) is returned as it is, and the compiled graph reports
# it (`output_strides`) for the backward to be compiled against.
SAVED_OUTPUTS = "saved_output_idxs"
# Pointwise values larger than this are stored to a buffer instead of inlined.
MAX_INLINE_SIZE = 80
# A value read by several nodes is recomputed by each when it is this small
# (cheaper than a round trip through memory), and stored otherwise.
MAX_SHARED_INLINE_SIZE = 12


def _read_items(node) -> set[int] | None:
    """The indices of a tuple-valued node that live getitem users read; None if used whole."""
    read = set()
    for user in node.users:
        if user.op != "call_function" or user.target is not operator.getitem:
            return None
        if user.users:  # a getitem nothing reads is dead code
            read.add(user.args[1])
    return read


@dataclass(frozen=True, slots=True)
class BufferRef:
    """A tensor argument of an extern call: buffer `name`, seen through `layout` if given."""

    name: str
    layout: Layout | None = None


class GraphLowering:
    """Lowers `gm` (functional ATen graph with meta["val"]) to loop IR buffers."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs,
        lowerings: LoweringTable,
        *,
        reinplace: bool = True,
    ):
        self.gm = gm
        self.reinplace = reinplace
        self.example_inputs = list(example_inputs)
        self.lowerings = lowerings
        self.buffers: list[ComputedBuffer | ExternBuffer] = []
        self.buffer_by_name: dict[str, ComputedBuffer | ExternBuffer | InputBuffer] = {}
        self.inputs: list[InputBuffer | ScalarArg | str] = []
        self.constants: dict[str, torch.Tensor] = {}
        self.input_devices: dict[str, torch.device] = {}  # each tensor input's device
        self.env: dict[torch.fx.Node, object] = {}
        self.fallbacks: Counter[str] = Counter()
        self.outputs: list[TensorValue | object] = []
        self.output_spec = None
        # Symbolic sizes: SymInt inputs (name -> expression) and whether any size is symbolic.
        self.symint_inputs: dict[str, sympy.Expr] = {}
        # Floats computed from sizes (SymFloat nodes): name -> expression over the symbols.
        self.derived_scalars: dict[str, sympy.Expr] = {}
        # Float input symbols (a Python float passed as a 0-d tensor, read with
        # `aten._local_scalar_dense`, or such a value saved for the backward): symbol
        # name -> the Python expression the wrapper reads it with (`scale.item()`).
        self.float_inputs: dict[str, str] = {}
        self.symbolic = False
        # Each size symbol's example value (the sizes of the call compiled for), by name.
        self.size_hints: dict[str, int] = {}
        self._symbols_seen = False  # a size node with a symbol (data-dependent sizes included)
        self._counter = 0
        self._log = artifact_logger("perf_hints")
        # id(inline value) -> (the value, its buffer's view): a value is stored once, however
        # many extern calls (or arguments of one call) read it
        self._realized: dict[int, tuple[TensorValue, TensorValue]] = {}
        # Buffers holding a matmul padded to aligned rows (see triton/padding.py): a graph
        # output the user sees may stay the (M, N) window of one, rows N_pad apart.
        self.padded_products: set[str] = set()
        # Scatter nodes stored into the mutated input they scatter over -> its index
        # (see reinplace); the run time does not copy those inputs back.
        self.inplace_writes: dict[torch.fx.Node, int] = {}
        # Buffers that are a graph input's memory (an in-place scatter's result, an ATen
        # view of one) -> that input's name: a write to the input changes them.
        self.input_aliases: dict[str, str] = {}
        self.nested_writes: dict = {}  # see reinplace.nested_writes
        self._read_names: set[str] | None = None
        # Buffers stored in a layout a lowering chose (channels-last), which a saved
        # output (SAVED_OUTPUTS) returns as they are.
        self.private_layouts: set[str] = set()
        # Nodes some output position other than a saved one returns: their strides are
        # eager's (see `layout_is_visible`).
        self._visible_outputs = _visible_output_nodes(gm)
        # Per flat output, its strides (ints) where static, else None; set by the output.
        self.output_strides: tuple[tuple[int, ...] | None, ...] = ()

    # -------------------------------------------------------------- driver

    def run(self) -> GraphLowering:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(self.example_inputs):
            raise LoweringError(
                f"the graph has {len(placeholders)} inputs but {len(self.example_inputs)} "
                "example inputs were given; pass one example per placeholder"
            )
        for node in self.gm.graph.nodes:
            schema = getattr(node.target, "_schema", None)
            if node.op == "call_function" and schema is not None and schema.is_mutable:
                raise UnsupportedGraphError(
                    f"node {node.name} calls {node.target}, which mutates its input; "
                    "inductor_codegen takes functional graphs (aot_autograd functionalizes them)"
                )
        self.inplace_writes = inplace_writes(self.gm) if self.reinplace else {}
        self.nested_writes = nested_writes(self.gm, self.inplace_writes)
        for node, example in zip(placeholders, self.example_inputs):
            self.env[node] = self._lower_placeholder(node, example)
        vals = [n.meta.get("val") for n in placeholders] + self.example_inputs
        hints = _size_hints(vals)
        self.size_hints = {
            str(symbol): int(hint)
            for symbol, hint in hints.items()
            if isinstance(hint, int) or getattr(hint, "is_Integer", False)
        }
        with size_hints_scope(hints):
            self._lower_nodes()
        return self

    @property
    def inputs_written_in_place(self) -> frozenset[int]:
        """Placeholder indices of the mutated inputs the compiled graph writes itself."""
        # (a chain of scatters writes its input only where its last one, the returned
        # value, was stored there too)
        return frozenset(
            index
            for node, index in self.inplace_writes.items()
            if any(user.op == "output" for user in node.users)
        )

    def _lower_nodes(self) -> None:
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                self._lower_output(node)
            elif node.op == "get_attr":
                self.env[node] = self._lower_constant(node)
            elif node.op == "call_function":
                self.env[node] = self._lower_call(node)
            else:
                raise LoweringError(f"node {node.name}: op {node.op!r} is not supported")

    def _lower_placeholder(self, node, example):
        meta = node.meta.get("val")
        if isinstance(meta, torch.SymInt) or isinstance(example, torch.SymInt):
            return self._lower_symint_input(
                node, meta if isinstance(meta, torch.SymInt) else example
            )
        if isinstance(example, torch.Tensor):
            # (An example may be the traced value itself: aot_autograd compiles a backward
            # for its placeholders' values.)
            symbolic = isinstance(meta, torch.Tensor) and _has_symbolic_size(meta)
            source = meta if symbolic else example
            layout = layout_of(source, where=f"input {node.name}")
            self.symbolic = self.symbolic or symbolic
            buf = InputBuffer(node.name, layout)
            self.inputs.append(buf)
            self.buffer_by_name[node.name] = buf
            self.input_devices[node.name] = example.device
            return TensorValue.of_buffer(node.name, layout)
        if isinstance(example, bool | torch.SymBool):
            arg = ScalarArg(node.name, torch.bool)
        elif isinstance(example, int):
            arg = ScalarArg(node.name, torch.int64)
        elif isinstance(example, float | torch.SymFloat):
            # a SymFloat input (a float of sizes the forward saved) is a plain scalar per call;
            # one that is a float input's symbol binds that symbol
            arg = ScalarArg(node.name, torch.float64)
            if isinstance(meta, torch.SymFloat) and meta.node.expr.is_Symbol:
                self.float_inputs.setdefault(meta.node.expr.name, node.name)
        else:
            self.inputs.append(node.name)
            return OpaqueInput(node.name)
        self.inputs.append(arg)
        return arg

    def _lower_symint_input(self, node, value):
        """A SymInt input: its value is the expression of its size symbols (bound by the wrapper)."""
        expr = as_index(value)
        self.symint_inputs[node.name] = expr
        self.symbolic = self.symbolic or is_symbolic(expr)
        self.inputs.append(ScalarArg(node.name, torch.int64))
        return expr

    def _lower_constant(self, node):
        value = getattr(self.gm, node.target)
        if not isinstance(value, torch.Tensor):
            return value
        name = "const_" + node.target.replace(".", "_")
        self.constants[name] = value
        layout = layout_of(value, where=f"constant {node.target}")
        buf = InputBuffer(name, layout)
        self.buffer_by_name[name] = buf
        return TensorValue.of_buffer(name, layout)

    def _lower_call(self, node):
        args, kwargs = pytree.tree_map_only(
            torch.fx.Node, self.env.__getitem__, (node.args, node.kwargs)
        )
        if node.target is operator.getitem:
            # One element of a lowered tuple: stored here, once, when several nodes read it.
            return self._maybe_realize(node, args[0][args[1]])
        val = node.meta.get("val")
        if node.target is aten._local_scalar_dense.default and self._is_float_input_read(node):
            return self._lower_float_input_read(node, val)
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self._lower_size_value(node, val)
        if _is_size_list(val):  # aten.size and friends: sizes, not tensors
            return tuple(self._lower_size_value(node, v) for v in val)
        if self.symbolic or self._symbols_seen:  # a static graph has no symbolic arguments
            args, kwargs = self._symbolic_arguments(node, args, kwargs)
        if node in self.inplace_writes and node.target in INPLACE_SCATTERS:
            return self._write_in_place(node, args, kwargs)
        lowering = self.lowerings.get(node.target)
        if lowering is None or not self._dtypes_supported(node):
            return self._maybe_realize(node, self.fallback(node, args, kwargs))
        if not self.symbolic:
            return self._maybe_realize(node, lowering(self, node, *args, **kwargs))
        try:
            return self._maybe_realize(node, lowering(self, node, *args, **kwargs))
        except (DynamicShapeError, TypeError) as error:
            if isinstance(error, TypeError) and not _is_symbolic_size_error(error):
                raise
            self._log.info(
                "node %s (%s) is lowered for static sizes only: %s", node.name, node.target, error
            )
            return self._maybe_realize(node, self.fallback(node, args, kwargs))

    def _symbolic_arguments(self, node, args, kwargs):
        """`args` and `kwargs` with SymInts as index expressions and SymFloats as scalars."""
        args, kwargs = pytree.tree_map_only(torch.SymInt, as_index, (args, kwargs))
        args, kwargs = pytree.tree_map_only(torch.SymFloat, self.derived_scalar, (args, kwargs))
        for leaf in pytree.tree_leaves((args, kwargs)):
            if isinstance(leaf, torch.SymBool):
                raise DynamicShapeError(
                    f"node {node.name} ({node.target}) takes a symbolic "
                    f"{type(leaf).__name__} ({leaf}); generated code computes integer sizes only"
                )
        return args, kwargs

    def _write_in_place(self, node, args, kwargs) -> TensorValue:
        """The scatter `node` as its in-place form on the input itself (see reinplace): an
        ATen call whose result, the input, later kernels read in the input's own layout
        (a fallback's result, for the alignment checks of Triton launches)."""
        base = node.args[0]
        source = self._source_of(node)
        memory = {source} | {name for name, of in self.input_aliases.items() if of == source}
        inner = node.args[1] if len(node.args) > 1 else None
        if inner in self.nested_writes and inner in self.inplace_writes:
            # the source was written into the place this scatter writes it to
            if not _views_memory(args[0], memory):
                del self.inplace_writes[node]
                return self._lower_call(node)
            return self._alias_extern(node, written_through, args[:2], source)
        nested = self.nested_writes.get(node)
        if nested is not None:  # a scatter over a view of the input's memory
            if not _views_memory(args[0], memory):
                del self.inplace_writes[node]
                return self._lower_call(node)
            base, chain = nested.base, nested.chain
        elif base.op != "placeholder" and base not in self.inplace_writes:
            del self.inplace_writes[node]  # the scatter before was not stored in place
            return self._lower_call(node)
        else:
            chain = frozenset()
        if any(_views_memory(v, memory) for v in pytree.tree_leaves((args[1:], kwargs))):
            del self.inplace_writes[node]  # an operand is a view of the input's own memory
            return self._lower_call(node)
        # values read from the old memory after the write are stored before it
        if not store_old_values(self, node, base, memory, chain):
            del self.inplace_writes[node]
            return self._lower_call(node)
        args, kwargs = pytree.tree_map_only(
            torch.fx.Node, self.env.__getitem__, (node.args, node.kwargs)
        )
        if self.symbolic or self._symbols_seen:
            args, kwargs = self._symbolic_arguments(node, args, kwargs)
        return self._alias_extern(node, INPLACE_SCATTERS[node.target], args, source, kwargs)

    def _alias_extern(self, node, op, args, source: str, kwargs=None) -> TensorValue:
        """An ATen call (or the wrapper's `*_into`) returning its first argument, a view of
        input `source`'s memory: its result is read in that view's layout, from its own
        data pointer (offset 0)."""
        view = args[0].view
        layout = replace(view.layout, offset=sympy.Integer(0))
        value = self.extern(node, op, args, kwargs or {}, is_fallback=True, layout=layout)
        self.input_aliases[value.view.buffer] = source
        return value

    def _store_into_input(self, node, value):
        """`node`'s pointwise value computed into the memory of the input it is the new
        value of (see reinplace), where each element reads that input only at itself and
        no other buffer reads the input; otherwise `value`, and the input is copied back."""
        source = self.buffer_by_name[self._source_of(node)]
        layout = source.layout
        index = tuple(
            sympy.Symbol(f"i{d}", integer=True, nonnegative=True) for d in range(len(layout.size))
        )
        own = layout.index(index)
        if (
            not isinstance(value, TensorValue)
            or value.view is not None
            or value.dtype != layout.dtype
            or tuple(value.size) != tuple(layout.size)
            or any(
                load.buffer == source.name and sympy.expand(load.index - own) != 0
                for load in expr_loads(value.loader(index))
            )
            or source.name in self._names_read_by_buffers()
        ):
            del self.inplace_writes[node]
            return value
        buf = ComputedBuffer(
            self.new_name(), layout, Pointwise(value.size, value.loader), stored_into=source.name
        )
        self.add_buffer(buf)
        return TensorValue.of_buffer(buf.name, layout)

    def _source_of(self, node) -> str:
        """The placeholder name of the input `node` (in `inplace_writes`) is the new value of."""
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        return placeholders[self.inplace_writes[node]].name

    def _names_read_by_buffers(self) -> set[str]:
        """Every buffer or input some buffer lowered before the outputs reads (all of them
        where a body is not a plain loader). Computed once: the buffers the outputs add
        read no input written in place (reinplace's rule on the graph)."""
        if self._read_names is None:
            self._read_names = self._buffer_reads()
        return self._read_names

    def _buffer_reads(self) -> set[str]:
        names: set[str] = set()
        for buf in self.buffers:
            if isinstance(buf, ExternBuffer):
                names.update(buf.reads)
                continue
            body = buf.body
            n = len(body.ranges)
            index = tuple(sympy.Symbol(f"i{d}", integer=True, nonnegative=True) for d in range(n))
            if isinstance(body, Pointwise):
                expr = body.loader(index)
            elif isinstance(body, Reduction):
                r = len(body.reduction_ranges)
                rindex = tuple(
                    sympy.Symbol(f"r{d}", integer=True, nonnegative=True) for d in range(r)
                )
                expr = body.loader(index, rindex)
            else:  # a scatter: its reads are not walked here
                return set(self.buffer_by_name)
            names.update(load.buffer for load in expr_loads(expr))
        return names

    def _is_float_input_read(self, node) -> bool:
        """Whether `node` reads a float input: a 0-d floating tensor input's value, traced
        as a symbol (a SymFloat that is one symbol)."""
        val = node.meta.get("val")
        source = node.args[0]
        if not isinstance(val, torch.SymFloat) or not val.node.expr.is_Symbol:
            return False
        buffer = self.buffer_by_name.get(source.name) if isinstance(source, torch.fx.Node) else None
        return (
            isinstance(buffer, InputBuffer)
            and source.op == "placeholder"
            and not buffer.layout.size
        )

    def _lower_float_input_read(self, node, val):
        """The float input's symbol, read once per call by the wrapper (`f0 = s.item()`) and
        passed to kernels as a scalar argument, as size symbols are."""
        self._symbols_seen = True  # later nodes take this scalar as an argument
        self.float_inputs.setdefault(val.node.expr.name, f"{node.args[0].name}.item()")
        return self.derived_scalar(val)

    def _lower_size_value(self, node, val):
        """A node computing a size (sym_size, size arithmetic): its expression over the symbols."""
        if isinstance(val, int):
            return sympy.Integer(val)
        self._symbols_seen = True  # later nodes may take this symbol as an argument
        if isinstance(val, torch.SymFloat):
            return self.derived_scalar(val)
        if not isinstance(val, torch.SymInt):
            raise DynamicShapeError(
                f"node {node.name} ({node.target}) computes a symbolic {type(val).__name__}; "
                "generated code computes integer sizes only"
            )
        return as_index(val)

    def derived_scalar(self, val: torch.SymFloat):
        """A float computed from sizes (a SymFloat, e.g. n / (n - 1)): a scalar the wrapper
        computes once per call from the size symbols and passes to kernels and ATen."""
        constant = val.node.maybe_as_float()
        if constant is not None:
            return constant
        expr = val.node.expr
        for name, known in self.derived_scalars.items():
            if known == expr:
                return ScalarArg(name, torch.float64)
        name = f"sym_float{len(self.derived_scalars)}"
        self.derived_scalars[name] = expr
        return ScalarArg(name, torch.float64)

    def layout_is_visible(self, node: torch.fx.Node) -> bool:
        """Whether something outside the graph reads `node`'s strides: a graph output
        other than a saved one (SAVED_OUTPUTS) returns it. A lowering may choose the
        layout of a value where this is False."""
        return node in self._visible_outputs

    def _lower_output(self, node):
        flat, spec = pytree.tree_flatten(node.args[0])
        self.output_spec = spec
        user_visible = set(node.meta.get(USER_VISIBLE_OUTPUTS, ()))
        saved = set(node.meta.get(SAVED_OUTPUTS, ()))
        for index, item in enumerate(flat):
            is_node = isinstance(item, torch.fx.Node)  # else a constant or a SymInt (unhashable)
            value = self.env[item] if is_node else item
            if is_node and item in self.inplace_writes and item.target not in INPLACE_SCATTERS:
                value = self._store_into_input(item, value)  # may drop it from inplace_writes
            if is_node and item in self.inplace_writes:
                pass  # the input itself: the caller does not read this output
            elif (
                isinstance(value, TensorValue)
                and not (
                    index in user_visible
                    and value.view is not None
                    and value.view.buffer in self.padded_products
                )
                and not (
                    index in saved
                    and value.view is not None
                    and value.view.buffer in self.private_layouts
                    and value.view.layout.offset == 0
                )
            ):
                value = self._in_traced_layout(value, meta_layout(item))
            self.outputs.append(value)
        self.output_strides = tuple(_static_strides(v) for v in self.outputs)

    def _in_traced_layout(self, value: TensorValue, traced: Layout | None) -> TensorValue:
        """An output in the layout of the traced graph's meta["val"] where that one is dense.

        Graphs handed to each other (aot_autograd's forward saving activations for the
        backward) compile their inputs' strides in, so an output already stored in
        another layout (a buffer an extern call read first) is copied.
        """
        if value.view is None:
            return self.realize(value, layout_hint=traced)
        layout = value.view.layout
        if traced is None or traced.size != layout.size or traced.dtype != layout.dtype:
            return value
        if all(
            a == b or size == 1
            for a, b, size in zip(layout.stride, traced.stride, layout.size, strict=True)
        ):
            return value  # (the offset is the wrapper's: a view keeps its base's storage)
        copy = TensorValue(value.dtype, value.size, value.loader)
        return self.realize(copy, layout_hint=traced)

    def _dtypes_supported(self, node) -> bool:
        vals = [node.meta.get("val")]
        vals += [a.meta.get("val") for a in node.all_input_nodes]
        for v in pytree.tree_leaves(vals):
            if isinstance(v, torch.Tensor) and v.dtype not in SUPPORTED_DTYPES:
                return False
        return True

    def _maybe_realize(self, node, value):
        if not isinstance(value, TensorValue) or value.view is not None or not node.users:
            return value  # a value nothing reads (max pooling's unused indices) is never computed
        size = inline_size(value)
        if (
            size > MAX_INLINE_SIZE
            or (readers(node) > 1 and self._worth_sharing(value, size))
            # Each matrix product stores its operands: two of them (a gradient read
            # as is and transposed) would store two copies of one value.
            or _matrix_product_readers(node) > 1
        ):
            # A value the graph also returns is stored once, in the layout it is returned
            # in (a RoPE'd query saved for the backward pass, laid out as eager's view).
            returned = any(user.op == "output" for user in node.users)
            return self.realize(value, layout_hint=meta_layout(node) if returned else None)
        return value

    def _worth_sharing(self, value: TensorValue, size: int) -> bool:
        """Whether a value several nodes read is stored once rather than recomputed in
        each: when it is large or calls an expensive function, unless it reads no buffer
        as large as itself (a one-hot row from a per-row target, a mask from indices),
        which each reader recomputes from registers and cache for less than a store and
        the loads of every element."""
        if _has_expensive_op(value):
            return True
        if size <= MAX_SHARED_INLINE_SIZE:
            return False
        from inductor_codegen.lowering.shared_reads import heavy_reads  # (imports this module)

        return heavy_reads(self, value) > 0

    # -------------------------------------------------------------- buffers

    def new_name(self) -> str:
        name = f"buf{self._counter}"
        self._counter += 1
        return name

    def realize(
        self, value: TensorValue, layout_hint: Layout | None = None, order: tuple | None = None
    ) -> TensorValue:
        """Store `value` in a new buffer (a Pointwise node); return a view of it.

        `order` (dims outermost to innermost): store it densely in that order, the
        loop running along memory (`layout_hint` is then ignored).
        """
        if value.view is not None:
            return value
        layout = layout_hint
        if order is not None:
            layout = dense_layout(value.dtype, value.size, order)
        elif layout is None or layout.size != value.size or layout.dtype != value.dtype:
            layout = Layout.contiguous(value.dtype, value.size)
        known = self._realized.get(id(value))
        if known is not None and known[0] is value and known[1].view.layout == layout:
            return known[1]
        if order is not None:
            return self._store_in_order(value, layout, order)
        buf = ComputedBuffer(self.new_name(), layout, Pointwise(value.size, value.loader))
        self.add_buffer(buf)
        stored = TensorValue.of_buffer(buf.name, layout)
        self._realized[id(value)] = (value, stored)
        return stored

    def _store_in_order(self, value: TensorValue, layout: Layout, order: tuple) -> TensorValue:
        """`value` computed over its dims in `order` into a contiguous buffer; returned as the
        view with its own dims (`layout`). Channels-last copies are this with N, H, W, C."""
        loader = value.loader
        position = {d: k for k, d in enumerate(order)}

        def in_order(idx, _load=loader, _position=position):
            return _load(tuple(idx[_position[d]] for d in range(len(_position))))

        sizes = tuple(value.size[d] for d in order)
        buf = ComputedBuffer(
            self.new_name(), Layout.contiguous(value.dtype, sizes), Pointwise(sizes, in_order)
        )
        self.add_buffer(buf)
        stored = TensorValue.of_buffer(buf.name, layout)
        self._realized[id(value)] = (value, stored)
        return stored

    def reduction(self, dtype, ranges, reduction_ranges, reduction_type, loader) -> TensorValue:
        layout = Layout.contiguous(dtype, tuple(ranges))
        body = Reduction(tuple(ranges), tuple(reduction_ranges), reduction_type, loader)
        buf = ComputedBuffer(self.new_name(), layout, body)
        self.add_buffer(buf)
        return TensorValue.of_buffer(buf.name, layout)

    def add_buffer(self, buf) -> None:
        self.buffers.append(buf)
        self.buffer_by_name[buf.name] = buf

    def extern_arg(self, value, any_order: bool = False):
        """An argument for an extern call: tensors become BufferRefs (realized if needed).

        `any_order`: the call reads matrices in either orientation, so a computed
        operand is stored in its loads' order (`load_order`) and passed as a view:
        the cast of a weight used transposed is a contiguous copy, not a transpose.
        """
        if isinstance(value, TensorValue):
            order = None
            if any_order and value.view is None:
                order = load_order(value)
                if order is not None and value.ndim - 1 - order[-1] >= 2:
                    order = None  # BLAS wants one of the matrix dims innermost
            value = self.realize(value, order=order)
            view = value.view
            base_layout = self.buffer_by_name[view.buffer].layout
            if base_layout is not None and base_layout == view.layout:
                return BufferRef(view.buffer)
            return BufferRef(view.buffer, view.layout)
        if isinstance(value, (list, tuple)):
            return type(value)(self.extern_arg(v, any_order) for v in value)
        return value

    def extern(self, node, op, args, kwargs, *, is_fallback: bool, layout: Layout | None = None):
        """Call ATen `op` from the wrapper; its outputs become buffers with meta layouts
        (or, for a single tensor, `layout` where given)."""
        if op in OUTPUT_LIKE_OPERAND:
            args = self._store_like_output(node, args, *OUTPUT_LIKE_OPERAND[op])
        ext_args = self.extern_arg(tuple(args), op in ANY_ORDER_OPERANDS)
        ext_kwargs = {k: self.extern_arg(v) for k, v in kwargs.items()}
        reads = tuple(
            ref.name
            for ref in pytree.tree_leaves((ext_args, ext_kwargs))
            if isinstance(ref, BufferRef)
        )
        val = node.meta.get("val")
        name = self.new_name()
        if _returns_an_alias(op):  # an ATen view of an input's memory is that memory
            for read in reads:
                source = self.input_aliases.get(read, read if read in self.input_devices else None)
                if source is not None:
                    self.input_aliases.setdefault(name, source)
        if isinstance(val, torch.Tensor):
            layout = layout or _fresh_output_layout(
                op, 0, layout_of(val, where=f"node {node.name}")
            )
            buf = ExternBuffer(name, op, ext_args, ext_kwargs, (layout,), is_fallback, reads)
            self.add_buffer(buf)
            return TensorValue.of_buffer(name, layout)
        if isinstance(val, (tuple, list)):
            # NOTE: only the tensors the graph reads get a buffer (and a layout check): an
            # ATen kernel may return another size than its meta rule for one nobody reads
            # (`_embedding_bag_forward_only`'s offset2bag is empty on CPU).
            read = _read_items(node)
            layouts = tuple(
                _fresh_output_layout(op, i, layout_of(v, where=f"node {node.name}"))
                if isinstance(v, torch.Tensor) and (read is None or i in read)
                else None
                for i, v in enumerate(val)
            )
            buf = ExternBuffer(
                name, op, ext_args, ext_kwargs, layouts, is_fallback, reads, tuple_result=True
            )
            self.add_buffer(buf)
            for i, lay in enumerate(layouts):
                if lay is not None:
                    # Each tensor of a tuple result is a named buffer of its own.
                    self.buffer_by_name[f"{name}_{i}"] = InputBuffer(f"{name}_{i}", lay)
            return tuple(
                TensorValue.of_buffer(f"{name}_{i}", lay) if lay is not None else None
                for i, lay in enumerate(layouts)
            )
        if val is None and not node.users:
            buf = ExternBuffer(name, op, ext_args, ext_kwargs, (), is_fallback, reads)
            self.add_buffer(buf)
            return None
        raise UnsupportedGraphError(
            f"node {node.name} ({op}) returns {type(val).__name__}; only tensors and tuples "
            "of tensors can come back from an ATen call"
        )

    def _store_like_output(self, node, args, operand: int, output: int) -> tuple:
        """`args` with a computed `args[operand]` stored in the stride order of `node`'s
        traced output `output` (for an op that lays that output out like that operand)."""
        val = node.meta.get("val")
        value = args[operand] if len(args) > operand else None
        if not isinstance(value, TensorValue) or value.view is not None:
            return tuple(args)  # already stored: ensure_layout copies if the result differs
        if not isinstance(val, (tuple, list)) or not isinstance(val[output], torch.Tensor):
            return tuple(args)
        target = val[output]
        strides = target.stride()
        if not all(isinstance(s, int) for s in (*strides, *target.shape)):
            return tuple(args)
        if tuple(target.shape) != tuple(int(s) for s in value.size):
            return tuple(args)
        order = tuple(sorted(range(target.ndim), key=lambda d: (-strides[d], d)))
        if dense_layout(value.dtype, value.size, order).stride != tuple(strides):
            return tuple(args)  # not dense: no stride order to follow
        stored = self.realize(value, order=order)
        return (*args[:operand], stored, *args[operand + 1 :])

    def fallback(self, node, args, kwargs):
        if not isinstance(node.target, torch._ops.OpOverload):
            raise UnsupportedGraphError(
                f"node {node.name} calls {node.target}, which is not an ATen OpOverload; "
                "inductor_codegen takes functional ATen graphs (run aot_autograd first)"
            )
        self.fallbacks[str(node.target)] += 1
        self._log.info("no lowering for %s (node %s): calling ATen", node.target, node.name)
        if node.target in STORAGE_ADDRESSING_OPS and isinstance(args[0], TensorValue):
            # The op addresses its input's storage: store the input as eager lays it out.
            value, hint = args[0], meta_layout(node.args[0])
            if (
                value.view is not None
                and hint is not None
                and value.view.layout.stride != hint.stride
            ):
                value = TensorValue(value.dtype, value.size, value.loader)
            args = (self.realize(value, layout_hint=hint), *args[1:])
        return self.extern(node, node.target, args, kwargs, is_fallback=True)


@dataclass(frozen=True, slots=True)
class OpaqueInput:
    """A graph input that is neither a tensor nor a number (passed through to ATen calls)."""

    name: str


def _is_size_list(val) -> bool:
    return (
        isinstance(val, (list, tuple))
        and len(val) > 0
        and all(isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool) for v in val)
    )


def _size_hints(values) -> dict:
    """Each size symbol's example value, from the shape environment of `values`' sizes."""
    for value in pytree.tree_leaves(values):
        sizes = (*value.shape, *value.stride()) if isinstance(value, torch.Tensor) else (value,)
        for size in sizes:
            if isinstance(size, torch.SymInt):
                env = size.node.shape_env
                if hasattr(env, "symbol_hints"):  # guards' ShapeEnv
                    return dict(env.symbol_hints())
                # torch's ShapeEnv (backed_var_to_val from torch 2.12, var_to_val before)
                hints = getattr(env, "backed_var_to_val", None)
                return dict(hints if hints is not None else getattr(env, "var_to_val", {}))
    return {}


def _has_symbolic_size(value: torch.Tensor) -> bool:
    return any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride()))


def _is_symbolic_size_error(error: TypeError) -> bool:
    """Whether sympy refused to turn a symbolic size into an int or a bool."""
    text = str(error)
    return any(
        words in text
        for words in ("symbol", "Symbol", "truth value of Relational", "should be of numeric type")
    )


def _fresh_output_layout(op, index: int, layout: Layout) -> Layout:
    """`layout`, or a row-major one where it repeats elements (a stride 0 on a dim of size
    above 1) though output `index` of `op` is a new tensor, not a view: ATen never returns
    such a tensor (torch 2.11's meta rule of `slice_scatter` on an expanded input says
    stride 0 where the kernel returns a dense tensor, and copying the result into the
    repeating layout would keep one element of each repeated run: a wrong value)."""
    if not any(stride == 0 and size != 1 for size, stride in zip(layout.size, layout.stride)):
        return layout
    returns = getattr(getattr(op, "_schema", None), "returns", ())
    if index >= len(returns) or returns[index].alias_info is not None:
        return layout  # a view: its elements may share memory
    return Layout.contiguous(layout.dtype, layout.size)


def layout_of(value: torch.Tensor, where: str) -> Layout:
    return Layout(
        value.dtype,
        tuple(as_index(s) for s in value.shape),
        tuple(as_index(s) for s in value.stride()),
    )


def load_order(value: TensorValue) -> tuple[int, ...] | None:
    """`value`'s dims from outermost to innermost in the memory its first full load
    reads (a load indexing every dim of size > 1 linearly), when that is not its own
    row-major order; None when it is, or when no load says (sizes symbolic,
    index math with division, two dims at one stride)."""
    n = value.ndim
    if n < 2 or not all(isinstance(s, sympy.Integer) for s in value.size):
        return None
    xs = tuple(sympy.Symbol(f"o{d}", integer=True, nonnegative=True) for d in range(n))
    for load in expr_loads(value.loader(xs)):
        index = sympy.expand(load.index)
        coeffs = [index.coeff(x) for x in xs]
        if not all(c.is_Integer and c >= 0 for c in coeffs):
            continue
        if (index - sum(c * x for c, x in zip(coeffs, xs))).free_symbols:
            continue  # division or modulo of a dim
        wide = [d for d in range(n) if value.size[d] != 1]
        if any(coeffs[d] == 0 for d in wide):
            continue  # broadcast along a dim: says nothing of its order
        if len({coeffs[d] for d in wide}) != len(wide):
            return None
        order = tuple(sorted(range(n), key=lambda d: -coeffs[d] if d in wide else -math.inf))
        return None if [d for d in order if d in wide] == wide else order
    return None


def dense_layout(dtype: torch.dtype, size: tuple, order: tuple[int, ...]) -> Layout:
    """A dense layout of `size` with dims `order` from outermost to innermost."""
    stride = [sympy.Integer(0)] * len(size)
    running = sympy.Integer(1)
    for d in reversed(order):
        stride[d] = running
        running = running * size[d]
    return Layout(dtype, tuple(size), tuple(stride))


def meta_layout(node) -> Layout | None:
    """The layout eager would give `node`'s output, when it is dense (no overlap, no holes)."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    layout = layout_of(val, where=node.name)
    # (Symbolic strides are ordered by their example values, then checked exactly.)
    hints = [(size_hint(st), size_hint(sz)) for st, sz in zip(layout.stride, layout.size)]
    if any(h is None for pair in hints for h in pair):
        return None
    order = sorted(range(len(layout.size)), key=lambda d: hints[d])
    if _dense_in_order(layout, order, lambda size: size):
        return layout
    # NOTE: eager's TensorIterator strides a dim after a symbolic size n by max(1, n)
    # (`65*Max(1, FloorDiv(s0, 2))`): the same dense layout wherever the tensor has
    # elements, built here from the sizes themselves (strides over max() are not indexed).
    if _dense_in_order(layout, order, lambda size: sympy.Max(1, size)):
        return dense_layout(layout.dtype, layout.size, tuple(reversed(order)))
    return None


def _dense_in_order(layout: Layout, order: list[int], extent) -> bool:
    """Whether `layout` is dense with dims `order` innermost first, each dim's stride the
    product of `extent(size)` of the dims inside it (dims of size 1 aside)."""
    expected = sympy.Integer(1)
    for d in order:
        if layout.size[d] == 1:
            continue
        if sympy.expand(layout.stride[d] - expected) != 0:
            return False
        expected = expected * extent(layout.size[d])
    return True


# Ops that cost far more than a load from cache: a value computed with one of
# them is stored once rather than recomputed by each of its readers.
EXPENSIVE_OPS = frozenset(
    {
        "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
        "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
        "erf", "erfc", "lgamma", "pow", "atan2", "hypot", "sigmoid", "floordiv",
        "remainder", "fmod",
    }
)  # fmt: skip


# How many pointwise steps past a node its users' paths are followed to find where they meet.
REJOIN_DEPTH = 6


def _elementwise(node: torch.fx.Node) -> bool:
    target = node.target
    return node.op == "call_function" and (
        target is aten._to_copy.default or torch.Tag.pointwise in getattr(target, "tags", ())
    )


def readers(node: torch.fx.Node) -> int:
    """How many places read `node`'s value: its user count, or 1 when every user is an
    elementwise op and their paths meet again through elementwise ops within
    REJOIN_DEPTH steps (hardswish's `x * clamp(x + 3, 0, 6)`). Such users are parts of
    one expression, fused into one kernel that loads each element once, so inlining
    the value there costs no second read."""
    users = list(node.users)
    if len(users) < 2 or not all(_elementwise(u) for u in users):
        return len(users)

    def reached(start: torch.fx.Node) -> set:
        seen, frontier = {start}, [start]
        for _ in range(REJOIN_DEPTH):
            frontier = [u for n in frontier if _elementwise(n) for u in n.users if u not in seen]
            seen.update(frontier)
        return seen

    common = reached(users[0])
    for user in users[1:]:
        common &= reached(user)
        if not common:
            return len(users)
    return 1


def _has_expensive_op(value: TensorValue) -> bool:
    index = tuple(sympy.Symbol(f"i{d}", integer=True, nonnegative=True) for d in range(value.ndim))
    stack = [value.loader(index)]
    while stack:
        expr = stack.pop()
        if isinstance(expr, Op):
            if expr.name in EXPENSIVE_OPS:
                return True
            stack.extend(expr.args)
    return False


def _matrix_product_readers(node: torch.fx.Node) -> int:
    """How many matrix products (ANY_ORDER_OPERANDS) read `node`, directly or through
    views of it."""
    count = 0
    for user in node.users:
        if user.target in ANY_ORDER_OPERANDS:
            count += 1
        elif _returns_a_view(user):
            count += _matrix_product_readers(user)
    return count


def _views_memory(value, memory: set[str]) -> bool:
    """Whether `value` is a view of one of the buffers `memory` names."""
    return isinstance(value, TensorValue) and value.view is not None and value.view.buffer in memory


def _returns_an_alias(op) -> bool:
    """Whether ATen `op` may return one of its operands' memory (a view or an in-place op)."""
    schema = getattr(op, "_schema", None)
    return schema is not None and any(r.alias_info is not None for r in schema.returns)


def _returns_a_view(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None:
        return False
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def inline_size(value: TensorValue) -> int:
    """How many ops `value` would inline into each reader (0 for a plain load or constant)."""
    index = tuple(sympy.Symbol(f"i{d}", integer=True, nonnegative=True) for d in range(value.ndim))
    expr = value.loader(index)
    if isinstance(expr, (Load, Constant)):
        return 0
    return expr_size(expr, MAX_INLINE_SIZE + 1)


def _visible_output_nodes(gm: torch.fx.GraphModule) -> frozenset:
    """The nodes a graph output outside SAVED_OUTPUTS returns (all outputs without it)."""
    output = next((n for n in gm.graph.nodes if n.op == "output"), None)
    if output is None:
        return frozenset()
    saved = set(output.meta.get(SAVED_OUTPUTS, ()))
    flat, _ = pytree.tree_flatten(output.args[0])
    return frozenset(
        item for i, item in enumerate(flat) if isinstance(item, torch.fx.Node) and i not in saved
    )


def _static_strides(value) -> tuple[int, ...] | None:
    """A stored output's strides as ints, or None (not a tensor, not stored, symbolic)."""
    if not isinstance(value, TensorValue) or value.view is None:
        return None
    stride = value.view.layout.stride
    if not all(isinstance(s, (int, sympy.Integer)) for s in stride):
        return None
    return tuple(int(s) for s in stride)
