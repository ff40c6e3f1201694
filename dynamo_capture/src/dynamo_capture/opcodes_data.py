"""Opcode handlers for the stack, names, attributes, operators and building values."""

from __future__ import annotations

import builtins
import inspect
import operator
import types
from typing import Any

import torch

from dynamo_capture.attributes import delete_attr as delete_outside_attr
from dynamo_capture.attributes import get_attr, set_attr
from dynamo_capture.bytecode import BINARY_OPERATORS, INTRINSICS, Instruction
from dynamo_capture.errors import Unsupported, raised_by_python
from dynamo_capture.graph_printouts import name_stored_node
from dynamo_capture.interpreter import Translator, opcode_handler
from dynamo_capture.lazy_iterators import check_side_effect
from dynamo_capture.operations import (
    BINARY,
    NotConstant,
    as_constant,
    binary_op,
    compare_op,
    contains,
    dict_items,
    get_item,
    guard_same_object,
    hashable_key,
    is_op,
    missing_key,
    python_type_of,
    sequence_items,
    set_item,
    unary_op,
    user_override,
)
from dynamo_capture.output_graph import TRUSTED_MODULES
from dynamo_capture.resume import UNBOUND, generated_from
from dynamo_capture.sources import AttrSource, CellContentsSource, ClosureSource, ItemSource
from dynamo_capture.sym_numbers import concrete_numbers
from dynamo_capture.values import (
    NULL,
    CellValue,
    DictValue,
    FunctionValue,
    ListValue,
    ObjectValue,
    PythonValue,
    SetValue,
    SuperValue,
    TensorValue,
    TupleValue,
    Value,
)


@opcode_handler("NOP")
def nop(tx: Translator, inst: Instruction) -> None:
    pass


@opcode_handler("POP_TOP")
def pop_top(tx: Translator, inst: Instruction) -> None:
    tx.pop()


@opcode_handler("PUSH_NULL")
def push_null(tx: Translator, inst: Instruction) -> None:
    tx.push(NULL)


@opcode_handler("COPY")
def copy(tx: Translator, inst: Instruction) -> None:
    tx.push(tx.stack[-inst.arg])


@opcode_handler("SWAP")
def swap(tx: Translator, inst: Instruction) -> None:
    stack, i = tx.stack, inst.arg
    stack[-1], stack[-i] = stack[-i], stack[-1]


@opcode_handler("END_FOR")
def end_for(tx: Translator, inst: Instruction) -> None:
    tx.popn(2)


# ----- names -------------------------------------------------------------
@opcode_handler("LOAD_CONST")
def load_const(tx: Translator, inst: Instruction) -> None:
    tx.push(PythonValue(inst.argval))


@opcode_handler("LOAD_FAST")
def load_fast(tx: Translator, inst: Instruction) -> None:
    value = tx.locals.get(inst.argval)
    if value is None:
        if inst.offset >= generated_from(tx.code):
            # a split frame's part reads its locals where it stops: unbound ones go on
            # as UNBOUND (its epilogue does the same when it runs)
            tx.push(PythonValue(UNBOUND))
            return
        raise Unsupported(f"UnboundLocalError: local {inst.argval!r} read before assignment")
    tx.push(value)


@opcode_handler("LOAD_FAST_AND_CLEAR")
def load_fast_and_clear(tx: Translator, inst: Instruction) -> None:
    tx.push(tx.locals.pop(inst.argval, NULL))


@opcode_handler("STORE_FAST")
def store_fast(tx: Translator, inst: Instruction) -> None:
    value = tx.pop()
    if value is NULL:
        tx.locals.pop(inst.argval, None)
    else:
        if isinstance(value, TensorValue):  # the node takes the local's name, as in torch
            name_stored_node(value.node, inst.argval, tx.ctx.named_nodes)
        tx.locals[inst.argval] = value


@opcode_handler("DELETE_FAST")
def delete_fast(tx: Translator, inst: Instruction) -> None:
    tx.locals.pop(inst.argval, None)


@opcode_handler("LOAD_GLOBAL")
def load_global(tx: Translator, inst: Instruction) -> None:
    name = inst.argval
    if inst.push_null:
        tx.push(NULL)
    written = tx.ctx.global_writes.get((id(tx.f_globals), name))
    if written is not None:
        tx.ctx.written_reads += 1
        tx.push(written[1])
        return
    if id(tx.f_globals) in tx.ctx.shadows:  # `globals()[name] = v` or a module's __dict__
        raise Unsupported(f"reading the global {name!r} of a globals dict the frame changed")
    if name in tx.f_globals:
        value = tx.f_globals[name]
        module = str(tx.f_globals.get("__name__", ""))
        if (
            module.split(".")[0] in TRUSTED_MODULES
            and callable(value)
            or isinstance(value, types.ModuleType)
        ):
            if module.split(".")[0] in TRUSTED_MODULES and not isinstance(value, torch.Tensor):
                tx.push(PythonValue(value))  # torch's own globals: fixed, not guarded
                return
        tx.push(tx.ctx.wrap(value, tx.global_source(name)))
        return
    builtin_scope = tx.f_globals.get("__builtins__", builtins)
    scope = builtin_scope if isinstance(builtin_scope, dict) else vars(builtin_scope)
    if name not in scope:
        raise Unsupported(f"NameError: name {name!r} is not defined")
    module = str(tx.f_globals.get("__name__", ""))
    if module.split(".")[0] not in TRUSTED_MODULES:
        tx.ctx.guards.builtin_not_shadowed(tx.f_globals, name)  # a global `abs = ...` later
    tx.push(PythonValue(scope[name]))


@opcode_handler("STORE_GLOBAL")
def store_global(tx: Translator, inst: Instruction) -> None:
    """A global assignment: read back while capturing, replayed after the graph."""
    check_side_effect(tx, f"the assignment of the global {inst.argval!r}")
    tx.ctx.global_writes[(id(tx.f_globals), inst.argval)] = (tx.f_globals, tx.pop())


@opcode_handler("MAKE_CELL")
def make_cell(tx: Translator, inst: Instruction) -> None:
    tx.cells[inst.argval] = CellValue(tx.locals.pop(inst.argval, None))


@opcode_handler("LOAD_DEREF")
def load_deref(tx: Translator, inst: Instruction) -> None:
    cell = tx.cell(inst.argval)
    if cell.contents is None:
        raise Unsupported(f"NameError: free variable {inst.argval!r} read before assignment")
    tx.push(cell.contents)


@opcode_handler("STORE_DEREF")
def store_deref(tx: Translator, inst: Instruction) -> None:
    value = tx.pop()
    if inst.argval in tx.code.co_freevars:  # a cell of an enclosing function
        check_side_effect(tx, f"the assignment of the closure variable {inst.argval!r}")
    cell = tx.cell(inst.argval, read=False)
    if isinstance(value, TensorValue):
        name_stored_node(value.node, inst.argval, tx.ctx.named_nodes)
    if cell.source is not None:
        frame_cell = _frame_cell(tx, cell)
        if frame_cell is None:
            raise Unsupported(
                f"assignment to the closure variable {inst.argval!r} of an outer function"
            )
        # a real cell (of a split frame, or of a closure's): written after the graph
        tx.ctx.attr_writes[(id(frame_cell[0]), "cell_contents")] = (*frame_cell, value)
    cell.contents = value


def _frame_cell(tx: Translator, cell: CellValue) -> tuple[Any, Any] | None:
    """The real cell behind `cell` and where the cell object is found (None: the cell
    is a constant of the compiled frame, one of its own function's closure cells)."""
    if isinstance(cell.source, ClosureSource):
        cell_source = None
    else:
        cell_source = _cell_object_source(cell.source)
        if cell_source is None:
            return None
    for real, value in tx.ctx.real_cell_values.values():
        if value is cell:
            return real, cell_source
    return None


def _cell_object_source(source: Any) -> Any:
    """Where the cell object itself is found, given where its contents are."""
    if isinstance(source, AttrSource) and source.member == "cell_contents":
        return source.source  # a split frame's cell, a local of its part
    if isinstance(source, CellContentsSource):  # a cell of a function's closure
        return ItemSource(AttrSource(source.source, "__closure__"), source.index)
    return None


@opcode_handler("LOAD_CLOSURE")
def load_closure(tx: Translator, inst: Instruction) -> None:
    if inst.argval not in tx.cells and inst.argval not in tx.real_cells:
        tx.cells[inst.argval] = CellValue(tx.locals.pop(inst.argval, None))
    tx.push(tx.cell(inst.argval))


@opcode_handler("IMPORT_NAME")
def import_name(tx: Translator, inst: Instruction) -> None:
    level, fromlist = tx.popn(2)
    module = __import__(inst.argval, tx.f_globals, None, as_constant(fromlist), as_constant(level))
    tx.push(PythonValue(module))


@opcode_handler("IMPORT_FROM")
def import_from(tx: Translator, inst: Instruction) -> None:
    tx.push(get_attr(tx, tx.stack[-1], inst.argval))


# ----- attributes --------------------------------------------------------
@opcode_handler("LOAD_ATTR")
def load_attr(tx: Translator, inst: Instruction) -> None:
    target = tx.pop()
    try:
        value = get_attr(tx, target, inst.argval)
    except AttributeError as error:
        from dynamo_capture.builtin_calls import missing_attribute

        raise missing_attribute(tx, target, inst.argval, error) from None
    if inst.method:
        tx.push(NULL)
    tx.push(value)


@opcode_handler("LOAD_SUPER_ATTR")
def load_super_attr(tx: Translator, inst: Instruction) -> None:
    self_value = tx.pop()
    cls_value = tx.pop()
    tx.pop()  # the global `super`
    value = get_attr(tx, SuperValue(cls_value.obj, self_value), inst.argval)  # type: ignore[attr-defined]
    if inst.method:
        tx.push(NULL)
    tx.push(value)


@opcode_handler("STORE_ATTR")
def store_attr(tx: Translator, inst: Instruction) -> None:
    target = tx.pop()
    value = tx.pop()
    set_attr(tx, target, inst.argval, value)


@opcode_handler("DELETE_ATTR")
def delete_attr(tx: Translator, inst: Instruction) -> None:
    """del obj.name: on an instance made while capturing; on an outside object, logged
    and replayed after the graph (attributes.delete_attr)."""
    delete_attribute(tx, tx.pop(), inst.argval)


def delete_attribute(tx: Translator, target: Value, name: str) -> None:
    """`del target.name` (or `delattr(target, name)`)."""
    check_side_effect(tx, f"del .{name}")
    if isinstance(target, ObjectValue) and target.source is None:
        deleter = inspect.getattr_static(target.cls, "__delattr__", None)
        if isinstance(deleter, types.FunctionType):
            raise Unsupported(f"del on a {target.cls.__name__}, whose class defines __delattr__")
        if name not in target.attrs:
            raise Unsupported(f"AttributeError while capturing: del of a missing {name!r}")
        del target.attrs[name]
        return
    delete_outside_attr(tx, target, name)


@opcode_handler("LOAD_ASSERTION_ERROR")
def load_assertion_error(tx: Translator, inst: Instruction) -> None:
    tx.push(PythonValue(AssertionError))


# ----- operators ---------------------------------------------------------
@opcode_handler("BINARY_OP")
def binary(tx: Translator, inst: Instruction) -> None:
    right = tx.pop()
    left = tx.pop()
    tx.push(binary_op(tx, BINARY[BINARY_OPERATORS[inst.arg]], left, right))


@opcode_handler("COMPARE_OP")
def compare(tx: Translator, inst: Instruction) -> None:
    right = tx.pop()
    left = tx.pop()
    tx.push(compare_op(tx, inst.argval, left, right))


def _is_unbound(value: Value) -> bool:
    return isinstance(value, PythonValue) and value.obj is UNBOUND


@opcode_handler("IS_OP")
def is_(tx: Translator, inst: Instruction) -> None:
    right = tx.pop()
    left = tx.pop()
    for operand in (left, right):  # torch wraps an input where it is inspected
        if isinstance(operand, TensorValue):
            tx.ctx.note_realized(operand.node)
    if not (_is_unbound(left) or _is_unbound(right)):
        # (whether a local is UNBOUND is guarded where capture starts: _frame_locals)
        guard_same_object(tx, left, right)
    tx.push(PythonValue(is_op(left, right) != bool(inst.arg)))


@opcode_handler("CONTAINS_OP")
def contains_(tx: Translator, inst: Instruction) -> None:
    container = tx.pop()
    item = tx.pop()
    tx.push(PythonValue(contains(tx, item, container) != bool(inst.arg)))


@opcode_handler("UNARY_NEGATIVE")
def unary_negative(tx: Translator, inst: Instruction) -> None:
    tx.push(unary_op(tx, operator.neg, tx.pop()))


@opcode_handler("UNARY_POSITIVE")
def unary_positive(tx: Translator, inst: Instruction) -> None:
    tx.push(unary_op(tx, operator.pos, tx.pop()))


@opcode_handler("UNARY_INVERT")
def unary_invert(tx: Translator, inst: Instruction) -> None:
    tx.push(unary_op(tx, operator.invert, tx.pop()))


@opcode_handler("UNARY_NOT")
def unary_not(tx: Translator, inst: Instruction) -> None:
    tx.push(unary_op(tx, operator.not_, tx.pop()))


@opcode_handler("CALL_INTRINSIC_1")
def call_intrinsic_1(tx: Translator, inst: Instruction) -> None:
    kind = INTRINSICS.get(inst.arg, "UNKNOWN")
    if kind == "UNARY_POSITIVE":
        tx.push(unary_op(tx, operator.pos, tx.pop()))
    elif kind == "LIST_TO_TUPLE":
        tx.push(TupleValue(sequence_items(tx, tx.pop())))
    else:
        raise Unsupported(f"intrinsic {kind} in captured code")


@opcode_handler("BINARY_SUBSCR")
def binary_subscr(tx: Translator, inst: Instruction) -> None:
    index = tx.pop()
    container = tx.pop()
    tx.push(get_item(tx, container, index))


@opcode_handler("STORE_SUBSCR")
def store_subscr(tx: Translator, inst: Instruction) -> None:
    index = tx.pop()
    container = tx.pop()
    value = tx.pop()
    set_item(tx, container, index, value)


@opcode_handler("DELETE_SUBSCR")
def delete_subscr(tx: Translator, inst: Instruction) -> None:
    index = tx.pop()
    container = tx.pop()
    check_side_effect(tx, "del container[index]")
    override = user_override(container, "__delitem__")
    if override is not None:
        from dynamo_capture.calls import call

        call(tx, PythonValue(override), [container, index], {})
        return
    if isinstance(container, ListValue | DictValue) and container.source is None:
        key = as_constant(index)
        try:
            del container.items[key]
        except KeyError:
            raise missing_key(container, key) from None
        except IndexError as error:  # a list's own message
            if python_type_of(container) is not list:
                raise Unsupported(f"IndexError while capturing: {error}") from None
            raise raised_by_python(error) from None
        return
    raise Unsupported("del container[index] on a container outside the frame (a side effect)")


def _slice(start: Value, stop: Value, step: Value | None = None) -> Value:
    parts = [start, stop] + ([step] if step is not None else [])
    try:
        return PythonValue(slice(*(as_constant(part) for part in parts)))
    except NotConstant:
        raise Unsupported("a slice whose bounds are known only when it runs") from None


@opcode_handler("BINARY_SLICE")
def binary_slice(tx: Translator, inst: Instruction) -> None:
    stop = tx.pop()
    start = tx.pop()
    container = tx.pop()
    tx.push(get_item(tx, container, _slice(start, stop)))


@opcode_handler("STORE_SLICE")
def store_slice(tx: Translator, inst: Instruction) -> None:
    stop = tx.pop()
    start = tx.pop()
    container = tx.pop()
    value = tx.pop()
    set_item(tx, container, _slice(start, stop), value)


@opcode_handler("GET_LEN")
def get_len(tx: Translator, inst: Instruction) -> None:
    from dynamo_capture.builtin_calls import BUILTIN_HANDLERS

    tx.push(BUILTIN_HANDLERS[len](tx, [tx.stack[-1]], {}))


# ----- building values ---------------------------------------------------
@opcode_handler("BUILD_TUPLE")
def build_tuple(tx: Translator, inst: Instruction) -> None:
    tx.push(TupleValue(tx.popn(inst.arg)))


@opcode_handler("BUILD_LIST")
def build_list(tx: Translator, inst: Instruction) -> None:
    tx.push(ListValue(tx.popn(inst.arg)))


@opcode_handler("BUILD_SET")
def build_set(tx: Translator, inst: Instruction) -> None:
    items = tx.popn(inst.arg)
    try:
        tx.push(SetValue({hashable_key(item) for item in items}))
    except NotConstant:
        raise Unsupported("a set of values that are not capture-time constants") from None


@opcode_handler("BUILD_MAP")
def build_map(tx: Translator, inst: Instruction) -> None:
    flat = tx.popn(2 * inst.arg)
    items = {}
    for key, value in zip(flat[::2], flat[1::2], strict=True):
        items[hashable_key(key)] = value
    tx.push(DictValue(items))


@opcode_handler("BUILD_CONST_KEY_MAP")
def build_const_key_map(tx: Translator, inst: Instruction) -> None:
    keys = as_constant(tx.pop())
    values = tx.popn(inst.arg)
    tx.push(DictValue(dict(zip(keys, values, strict=True))))


@opcode_handler("BUILD_STRING")
def build_string(tx: Translator, inst: Instruction) -> None:
    parts = tx.popn(inst.arg)
    tx.push(PythonValue("".join(as_constant(part) for part in parts)))


@opcode_handler("BUILD_SLICE")
def build_slice(tx: Translator, inst: Instruction) -> None:
    parts = tx.popn(inst.arg)
    tx.push(_slice(*parts))


@opcode_handler("FORMAT_VALUE")
def format_value(tx: Translator, inst: Instruction) -> None:
    flags = inst.arg or 0
    spec = as_constant(tx.pop()) if flags & 0x04 else ""
    value = tx.pop()
    try:
        real = as_constant(value)
    except NotConstant:
        raise Unsupported("an f-string of a value known only when it runs (a tensor?)") from None
    real = concrete_numbers(real, "an f-string of a symbolic number")  # its value, guarded
    conversion = {0: None, 1: str, 2: repr, 3: ascii}[flags & 0x03]
    if conversion is not None:
        real = conversion(real)
    tx.push(PythonValue(format(real, spec)))


def _built_container(tx: Translator, inst: Instruction, method: str) -> Value:
    """The list, dict or set a display (`[a, *b]`, `{**d}`) is building, at `inst.arg`
    below the top. One handed on below a break (`{**f()}` where f breaks: the part
    resuming gets the `{}` made before as an outside object) is written through its
    shadow, as a method call on it would be."""
    from dynamo_capture import side_effects

    target = tx.stack[-inst.arg]
    if isinstance(target, PythonValue):
        target = side_effects.for_write(tx, target, method)
        tx.stack[-inst.arg] = target
    return target


@opcode_handler("LIST_APPEND")
def list_append(tx: Translator, inst: Instruction) -> None:
    value = tx.pop()
    _built_container(tx, inst, "append").items.append(value)  # type: ignore[attr-defined]


@opcode_handler("LIST_EXTEND")
def list_extend(tx: Translator, inst: Instruction) -> None:
    values = sequence_items(tx, tx.pop())
    _built_container(tx, inst, "extend").items.extend(values)  # type: ignore[attr-defined]


@opcode_handler("LIST_TO_TUPLE")
def list_to_tuple(tx: Translator, inst: Instruction) -> None:
    tx.push(TupleValue(sequence_items(tx, tx.pop())))


@opcode_handler("SET_ADD")
def set_add(tx: Translator, inst: Instruction) -> None:
    value = tx.pop()
    _built_container(tx, inst, "add").items.add(hashable_key(value))  # type: ignore[attr-defined]


@opcode_handler("SET_UPDATE")
def set_update(tx: Translator, inst: Instruction) -> None:
    values = sequence_items(tx, tx.pop())
    target = _built_container(tx, inst, "update")
    target.items.update(as_constant(v) for v in values)  # type: ignore[attr-defined]


@opcode_handler("MAP_ADD")
def map_add(tx: Translator, inst: Instruction) -> None:
    value = tx.pop()
    key = tx.pop()
    target = _built_container(tx, inst, "__setitem__")
    target.items[hashable_key(key)] = value  # type: ignore[attr-defined]


@opcode_handler("DICT_UPDATE", "DICT_MERGE")
def dict_update(tx: Translator, inst: Instruction) -> None:
    other = tx.pop()
    target = _built_container(tx, inst, "update")
    target.items.update(dict_items(tx, other))  # type: ignore[attr-defined]


@opcode_handler("UNPACK_SEQUENCE")
def unpack_sequence(tx: Translator, inst: Instruction) -> None:
    sequence = tx.pop()
    items = sequence_items(tx, sequence)
    if len(items) != inst.arg:
        raise _unpack_error(sequence, len(items), f"[{'_, ' * inst.arg}]")
    tx.stack.extend(reversed(items))


def _unpack_error(sequence: Value, count: int, target: str) -> Unsupported:
    """The ValueError unpacking `count` items into `target` raises (Python's own message),
    for a sequence whose items are all known (a list or tuple); a break for others (an
    iterator, read past what eager reads, or a user class's own iteration)."""
    if python_type_of(sequence) not in (list, tuple, torch.Size):
        return Unsupported(f"ValueError: unpacking {count} values into {target}")
    try:
        exec(f"{target} = _items", {}, {"_items": (None,) * count})  # noqa: S102
    except ValueError as error:
        return raised_by_python(error)
    raise AssertionError("the unpack was expected to fail")


@opcode_handler("UNPACK_EX")
def unpack_ex(tx: Translator, inst: Instruction) -> None:
    before, after = inst.arg & 0xFF, inst.arg >> 8
    sequence = tx.pop()
    items = sequence_items(tx, sequence)
    if len(items) < before + after:
        raise _unpack_error(sequence, len(items), f"[{'_, ' * before}*_{', _' * after}]")
    middle = ListValue(items[before : len(items) - after])
    tail = items[len(items) - after :] if after else []
    tx.stack.extend(reversed([*items[:before], middle, *tail]))


@opcode_handler("MAKE_FUNCTION")
def make_function(tx: Translator, inst: Instruction) -> None:
    flags = inst.arg or 0
    code = tx.pop().obj  # type: ignore[attr-defined]
    closure = tuple(tx.pop().items) if flags & 0x08 else ()  # type: ignore[attr-defined]
    annotations = tx.pop() if flags & 0x04 else None
    kwdefaults = dict_items(tx, tx.pop()) if flags & 0x02 else {}
    defaults = tuple(sequence_items(tx, tx.pop())) if flags & 0x01 else ()
    tx.push(
        FunctionValue(
            code,
            tx.f_globals,
            code.co_name,
            defaults,
            kwdefaults,
            closure,  # type: ignore[arg-type]
            annotations=annotations,
        )
    )
