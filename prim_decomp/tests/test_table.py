"""DecompositionTable: composition, shrinking, growing, and what it prints."""

from __future__ import annotations

import pytest
import torch

from prim_decomp import (
    DecompositionTable,
    DuplicateDecompositionError,
    FrozenTableError,
    core_aten,
    inductor_default,
    prims,
)

aten = torch.ops.aten


def _first(*args, **kwargs):
    return "first"


def _second(*args, **kwargs):
    return "second"


def test_or_right_side_wins_and_operands_unchanged():
    left = DecompositionTable({aten.gelu.default: _first, aten.silu.default: _first}, name="l")
    right = DecompositionTable({aten.gelu.default: _second}, name="r")
    merged = left | right
    assert merged[aten.gelu.default] is _second
    assert merged[aten.silu.default] is _first
    assert left[aten.gelu.default] is _first and len(left) == 2
    assert len(right) == 1
    assert (right | left)[aten.gelu.default] is _first


def test_or_accepts_plain_dicts_on_either_side():
    table = DecompositionTable({aten.gelu.default: _first})
    assert (table | {aten.gelu.default: _second})[aten.gelu.default] is _second
    assert ({aten.gelu.default: _second} | table)[aten.gelu.default] is _first


def test_without_accepts_overloads_packets_and_lists():
    table = DecompositionTable(
        {aten.var.correction: _first, aten.var.dim: _first, aten.gelu.default: _first}
    )
    assert aten.gelu.default not in table.without(aten.gelu.default)
    no_var = table.without(aten.var)
    assert aten.var.correction not in no_var and aten.var.dim not in no_var
    assert len(table.without([aten.var.dim, aten.gelu])) == 1
    assert len(table) == 3
    assert len(table.without(aten.mm.default)) == 3


def test_without_rejects_what_is_not_an_op():
    with pytest.raises(TypeError, match="OpOverload"):
        core_aten.without("aten::gelu")


def test_register_grows_and_duplicates_are_errors():
    table = DecompositionTable(name="mine")

    @table.register(aten.gelu.default)
    def my_gelu(x, approximate="none"):
        return x

    assert table.get(aten.gelu.default) is my_gelu
    with pytest.raises(DuplicateDecompositionError, match="replace=True"):
        table.register(aten.gelu.default)(_first)
    table.register(aten.gelu.default, replace=True)(_second)
    assert table[aten.gelu.default] is _second


def test_register_packet_takes_every_overload():
    table = DecompositionTable()
    table.register(aten.var)(_first)
    assert aten.var.correction in table and aten.var.dim in table


def test_named_tables_are_frozen_and_copies_grow():
    with pytest.raises(FrozenTableError, match="copy"):
        core_aten.register(aten.gelu.default)(_first)
    mine = inductor_default.copy()
    mine.register(aten.gelu.default, replace=True)(_first)
    assert mine[aten.gelu.default] is _first
    assert inductor_default[aten.gelu.default] is not _first


def test_mapping_protocol():
    table = DecompositionTable({aten.gelu.default: _first})
    assert list(table) == [aten.gelu.default]
    assert len(table) == 1 and aten.gelu.default in table and aten.silu.default not in table
    assert table.get(aten.silu.default) is None
    assert table.get(aten.silu.default, _second) is _second
    assert dict(table.items()) == {aten.gelu.default: _first}


def test_describe_lists_ops_and_locations():
    text = core_aten.describe()
    assert "aten.silu.default" in text
    line = next(line for line in text.splitlines() if "aten.silu.default" in line)
    assert "prim_decomp.decompositions.activations:" in line
    module, lineno = core_aten.location(aten.silu.default).rsplit(":", 1)
    assert int(lineno) > 0 and module.endswith("activations")
    assert f"{len(core_aten)} ops" in repr(core_aten)


def test_named_tables_hold_what_they_promise():
    assert aten.silu.default in core_aten and aten._softmax.default not in core_aten
    assert aten._softmax.default in inductor_default
    assert aten.mm.default not in inductor_default
    assert aten.addmm.default not in inductor_default
    assert aten.add.Tensor not in inductor_default
    assert aten._softmax.default in prims


def test_core_aten_decomposes_only_ops_outside_the_core_set():
    """core ATen ops (other than composite-implicit ones) are targets, never sources."""
    offenders = []
    for op in core_aten:
        implicit = torch._C._dispatch_has_kernel_for_dispatch_key(
            op.name(), "CompositeImplicitAutograd"
        )
        if torch.Tag.core in op.tags and not implicit:
            offenders.append(str(op))
    assert not offenders, offenders


def test_fingerprint_follows_the_rules():
    assert core_aten.fingerprint() == core_aten.copy().fingerprint()
    assert core_aten.fingerprint() != core_aten.without(aten.silu).fingerprint()
    swapped = core_aten.copy()
    swapped.register(aten.silu.default, replace=True)(_first)
    assert swapped.fingerprint() != core_aten.fingerprint()
