"""The opcode table, the handler registry, instruction decoding and the stack-depth check."""

from __future__ import annotations

import dis
import sys
import types

import pytest
import torch

import dynamo_capture
from dynamo_capture.bytecode import OPCODE_TABLE, PY312, decode, expected_stack_effect
from dynamo_capture.interpreter import HANDLERS, check_registry, checks_enabled, opcode_handler

VERSION = sys.version_info[:2]


def test_every_handler_name_in_the_table_is_registered():
    check_registry()
    for handler, versions in OPCODE_TABLE.values():
        if VERSION in versions:
            assert handler in HANDLERS


def test_registering_an_unknown_or_duplicate_handler_fails():
    with pytest.raises(RuntimeError, match="not a handler name"):
        opcode_handler("NOT_AN_OPCODE")(lambda tx, inst: None)
    with pytest.raises(RuntimeError, match="two handlers"):
        opcode_handler("NOP")(lambda tx, inst: None)


def test_table_names_exist_in_this_python():
    for name, (_, versions) in OPCODE_TABLE.items():
        if VERSION in versions:
            assert name in dis.opmap, name


def _code_objects(module):
    seen = set()
    stack = [value for value in vars(module).values()]
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, type) and value.__module__ == module.__name__:
            stack.extend(vars(value).values())
        elif isinstance(value, staticmethod | classmethod):
            stack.append(value.__func__)
        elif isinstance(value, property):
            stack.extend(f for f in (value.fget, value.fset) if f is not None)
        elif isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            stack.append(value.__code__)
        elif isinstance(value, types.CodeType):
            yield value
            stack.extend(c for c in value.co_consts if isinstance(c, types.CodeType))


@pytest.mark.parametrize(
    "module_name",
    [
        "torch.nn.modules.transformer",
        "torch.nn.modules.activation",
        "torch.nn.functional",
        "collections",
        "dataclasses",
    ],
)
def test_every_opcode_of_ordinary_code_is_in_the_table(module_name):
    """The opcodes real library code uses are all named in the table (handled or named Unsupported)."""
    import importlib

    module = importlib.import_module(module_name)
    missing = set()
    for code in _code_objects(module):
        for inst in dis.get_instructions(code):
            entry = OPCODE_TABLE.get(inst.opname)
            if (
                inst.opname != "CACHE"
                and not inst.opname.startswith("INSTRUMENTED")
                and (entry is None or VERSION not in entry[1])
            ):
                missing.add(inst.opname)
    assert not missing


def test_decode_normalizes_jumps_and_flags():
    def fn(xs):
        total = 0
        for x in xs:
            total += len(x)
        return total

    instructions = decode(fn.__code__)
    loads = [inst for inst in instructions if inst.opname == "LOAD_GLOBAL"]
    assert loads and loads[0].push_null
    for_iter = next(inst for inst in instructions if inst.opname == "FOR_ITER")
    after = next(inst for inst in instructions if inst.offset == for_iter.target)
    assert after.opname != "END_FOR"
    assert all(inst.line is not None for inst in instructions)
    if PY312:
        assert any(inst.opname == "END_FOR" for inst in instructions)


def test_stack_effect_for_calls_counts_both_halves():
    call = next(inst for inst in decode((lambda f, x: f(x)).__code__) if inst.opname == "CALL")
    assert expected_stack_effect(call, False) == -(call.arg + 1)


def test_checks_are_on_in_tests():
    assert checks_enabled()


def test_stack_check_catches_a_broken_handler(monkeypatch):
    from dynamo_capture import interpreter

    monkeypatch.setitem(interpreter.HANDLERS, "POP_TOP", lambda tx, inst: None)

    def fn(x):
        x.sin()  # result popped by POP_TOP
        return x

    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward, fullgraph=True)
    with pytest.raises(dynamo_capture.Unsupported, match="stack depth check"):
        compiled(torch.ones(2))


def test_returned_input_is_the_same_object():
    def fn(x, y):
        return x, y.view(-1), y

    compiled = dynamo_capture.optimize(fn, backend=lambda gm, ex: gm.forward, fullgraph=True)
    x, y = torch.randn(2), torch.randn(2, 2)
    a, b, c = compiled(x, y)
    assert a is x and c is y
    assert b._base is y  # a view of the input, as in eager
    b.add_(1)
    torch.testing.assert_close(y.view(-1), b)
