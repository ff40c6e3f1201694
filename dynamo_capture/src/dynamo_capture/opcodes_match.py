"""Opcode handlers for `match` statements (structural pattern matching).

    match subject:                    MATCH_MAPPING   -> is the subject a mapping?
        case {"k": v}:                MATCH_KEYS      -> the values of "k"..., or None
        case [a, b, *rest]:           MATCH_SEQUENCE, GET_LEN -> a sequence? its length
        case Point(x, y=0):           MATCH_CLASS     -> x and y read from it, or None

Each reads the subject as Python does and pushes the result; the pattern's jumps and
unpacking are the ordinary opcodes. Mapping and sequence tests read the subject's type
flags (a str is no sequence here, a registered ABC subclass is); class patterns read
`__match_args__` and the attributes by their names, a missing attribute failing the
case. A subject whose reads capture cannot make (a user mapping's own `get`) breaks.
"""

from __future__ import annotations

import collections
from typing import Any

from dynamo_capture.builtin_calls import BUILTIN_HANDLERS, attr_or_missing
from dynamo_capture.bytecode import Instruction
from dynamo_capture.errors import Unsupported
from dynamo_capture.interpreter import Translator, opcode_handler
from dynamo_capture.operations import (
    NotConstant,
    as_constant,
    contains,
    dict_items,
    hashable_key,
    python_type_of,
    user_override,
)
from dynamo_capture.output_graph import is_constant
from dynamo_capture.values import DictValue, PythonValue, TupleValue, Value

__all__: list[str] = []

_SEQUENCE_FLAG = 1 << 5  # Py_TPFLAGS_SEQUENCE
_MAPPING_FLAG = 1 << 6  # Py_TPFLAGS_MAPPING
# the classes whose one positional sub-pattern matches the subject itself: `int(n)`
_MATCH_SELF = (bool, bytearray, bytes, dict, float, frozenset, int, list, set, str, tuple)
_PLAIN_MAPPINGS = (dict, collections.OrderedDict, collections.defaultdict)


def _subject_type(tx: Translator, subject: Value) -> type:
    """The subject's type, guarded where it comes from outside the frame."""
    if (
        isinstance(subject, PythonValue)
        and subject.source is not None
        and not is_constant(subject.obj)
    ):
        tx.ctx.guards.type_match(subject.source, subject.obj)
    return python_type_of(subject)


@opcode_handler("MATCH_MAPPING")
def match_mapping(tx: Translator, inst: Instruction) -> None:
    flags = _subject_type(tx, tx.stack[-1]).__flags__
    tx.push(PythonValue(bool(flags & _MAPPING_FLAG)))


@opcode_handler("MATCH_SEQUENCE")
def match_sequence(tx: Translator, inst: Instruction) -> None:
    flags = _subject_type(tx, tx.stack[-1]).__flags__
    tx.push(PythonValue(bool(flags & _SEQUENCE_FLAG)))


@opcode_handler("MATCH_KEYS")
def match_keys(tx: Translator, inst: Instruction) -> None:
    """[subject, keys] -> [subject, keys, values or None]: subject.get(key) of each key."""
    keys, subject = tx.stack[-1], tx.stack[-2]
    kind = _subject_type(tx, subject)
    plain = kind in _PLAIN_MAPPINGS or (
        isinstance(subject, DictValue)
        and not any(user_override(subject, name) for name in ("get", "__contains__"))
    )
    if not plain:
        raise Unsupported(f"a mapping pattern on a {kind.__name__} (its own get)")
    try:
        wanted = as_constant(keys)
    except NotConstant:
        raise Unsupported("a mapping pattern whose keys are known only when it runs") from None
    items = dict_items(tx, subject)
    values = []
    for key in wanted:
        # NOTE: get(), not [key]: a defaultdict's factory and a __missing__ do not run
        if not contains(tx, PythonValue(key), subject):
            tx.push(PythonValue(None))
            return
        values.append(items[hashable_key(PythonValue(key))])
    tx.push(TupleValue(values))


@opcode_handler("MATCH_CLASS")
def match_class(tx: Translator, inst: Instruction) -> None:
    """[subject, cls, names] -> [attributes or None]: `cls(p0, ..., name=...)`."""
    names_value = tx.pop()
    cls_value = tx.pop()
    subject = tx.pop()
    if not (isinstance(cls_value, PythonValue) and isinstance(cls_value.obj, type)):
        raise Unsupported("a class pattern whose class is not a class known now")
    cls = cls_value.obj
    names: tuple[str, ...] = as_constant(names_value)
    matched = BUILTIN_HANDLERS[isinstance](tx, [subject, cls_value], {})
    if not matched.obj:
        tx.push(PythonValue(None))
        return
    positional = _positional_names(cls, inst.arg)
    if positional is None:  # int(n): the subject itself
        tx.push(TupleValue([subject]))
        return
    wanted = (*positional, *names)
    if len(set(wanted)) != len(wanted):  # Python raises a TypeError naming the attribute
        raise Unsupported(f"a class pattern reading an attribute of {cls.__name__} twice")
    found = []
    for name in wanted:
        attr = attr_or_missing(tx, subject, name)
        if attr is None:
            tx.push(PythonValue(None))
            return
        found.append(attr)
    tx.push(TupleValue(found))


def _positional_names(cls: type, count: int) -> tuple[str, ...] | None:
    """The attribute names of `count` positional sub-patterns (None: the subject itself)."""
    if count == 0:
        return ()
    match_args: Any = getattr(cls, "__match_args__", None)
    if match_args is None and count == 1 and cls in _MATCH_SELF:
        return None
    if not isinstance(match_args, tuple) or len(match_args) < count:
        raise Unsupported(f"a class pattern with {count} positional parts for {cls.__name__}")
    return match_args[:count]
