"""In-place ops whose source overlaps the written tensor at other elements
(`x[1:].copy_(x[:-1])`, `x[:, 1:] += x[:, :-1]`), on inputs and intermediates.

| footgun                                                        | rank          |
|----------------------------------------------------------------|---------------|
| a partial overlap computed as if through a temporary           | wrong result  |
| eager's partial-overlap error not raised                       | missing error |

Where both are dense eager raises its error, and so does the compiled code; where one
is not, eager's result depends on its loop order, which the graph cannot express: the
call runs the graph's ops eagerly, with an EagerCallWarning; where each element reads
only what it writes itself, both agree.
"""

from __future__ import annotations

import pytest
import torch

import ember
from aot_autograd import EagerCallWarning

BACKENDS = ["aot_eager", "inductor"]


def _on_input(write):
    def program(x):
        write(x)
        return x * 1

    return program


def _on_intermediate(write):
    def program(x):
        y = x * 2
        write(y)
        return y + 1

    return program


def _augmented(x):
    x[:, 1:] += x[:, :-1]


EAGER_RAISES = {
    "copy_shifted_rows": lambda x: x[1:].copy_(x[:-1]),
    "copy_shifted_back": lambda x: x[:-1].copy_(x[1:]),
    "copy_transposed": lambda x: x.copy_(x.t()),
    "add_transposed": lambda x: x.add_(x.t()),
    "addcmul_shifted": lambda x: x[1:].addcmul_(x[:-1], x[:-1]),
    "add_a_row": lambda x: x.add_(x[0]),
}
ORDER_DEPENDENT = {
    "add_shifted_columns": lambda x: x[:, 1:].add_(x[:, :-1]),
    "augmented_shifted_columns": _augmented,
    "copy_shifted_columns": lambda x: x[:, 1:].copy_(x[:, :-1]),
    "mul_shifted_diagonal_block": lambda x: x[1:, 1:].mul_(x[:-1, :-1]),
}
WELL_DEFINED = {
    "copy_column_into_row": lambda x: x[0].copy_(x[:, 0]),
    "copy_even_into_odd_columns": lambda x: x[:, 1::2].copy_(x[:, ::2]),
    "add_same_view": lambda x: x[:, 1:].add_(x[:, 1:]),
    "add_first_column_broadcast": lambda x: x[:, 1:].add_(x[:, :1]),
    "mul_flipped_copy": lambda x: x.mul_(x.flip(0)),
    "setitem_of_a_sum": lambda x: x.__setitem__(
        (slice(None), slice(1, None)), x[:, 1:] + x[:, :-1]
    ),
}


@pytest.mark.parametrize("place", [_on_input, _on_intermediate], ids=["input", "intermediate"])
@pytest.mark.parametrize("name", sorted(EAGER_RAISES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_overlap_of_dense_source_raises_eagers_error(backend, name, place):
    program = place(EAGER_RAISES[name])
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        program(torch.randn(4, 4))
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        ember.compile(program, backend=backend)(torch.randn(4, 4))


@pytest.mark.parametrize("place", [_on_input, _on_intermediate], ids=["input", "intermediate"])
@pytest.mark.parametrize("name", sorted(ORDER_DEPENDENT))
@pytest.mark.parametrize("backend", BACKENDS)
def test_order_dependent_overlapping_write_runs_eagerly_with_eagers_result(backend, name, place):
    program = place(ORDER_DEPENDENT[name])
    x = torch.randn(4, 40)
    eager_x, got_x = x.clone(), x.clone()
    compiled = ember.compile(program, backend=backend)
    with pytest.warns(EagerCallWarning, match="depends on the order"):
        got = compiled(got_x)
    torch.testing.assert_close(got, program(eager_x))
    torch.testing.assert_close(got_x, eager_x)


@pytest.mark.parametrize("place", [_on_input, _on_intermediate], ids=["input", "intermediate"])
@pytest.mark.parametrize("name", sorted(WELL_DEFINED))
@pytest.mark.parametrize("backend", BACKENDS)
def test_overlapping_write_reading_only_its_own_elements_matches_eager(backend, name, place):
    program = place(WELL_DEFINED[name])
    x = torch.randn(4, 4)
    eager_x, got_x = x.clone(), x.clone()
    expected = program(eager_x)
    got = ember.compile(program, backend=backend)(got_x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_x, eager_x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_overlapping_write_with_symbolic_sizes_is_checked_at_the_compiled_sizes(backend):
    compiled_copy = ember.compile(
        _on_input(EAGER_RAISES["copy_shifted_rows"]), backend=backend, dynamic=True
    )
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        compiled_copy(torch.randn(4, 40))
    compiled_add = ember.compile(
        _on_input(ORDER_DEPENDENT["add_shifted_columns"]), backend=backend, dynamic=True
    )
    x = torch.randn(4, 40)
    eager_x, got_x = x.clone(), x.clone()
    with pytest.warns(EagerCallWarning, match="depends on the order"):
        got = compiled_add(got_x)
    torch.testing.assert_close(got, _on_input(ORDER_DEPENDENT["add_shifted_columns"])(eager_x))
    torch.testing.assert_close(got_x, eager_x)
    well_defined = _on_input(WELL_DEFINED["copy_even_into_odd_columns"])
    compiled = ember.compile(well_defined, backend=backend, dynamic=True)
    for shape in [(4, 6), (5, 8)]:
        x = torch.randn(shape)
        eager_x, got_x = x.clone(), x.clone()
        torch.testing.assert_close(compiled(got_x), well_defined(eager_x))
        torch.testing.assert_close(got_x, eager_x)


def _fixed_length_copy_from_the_end(x):
    x[:3].copy_(x[-3:])
    return x * 2


def _fixed_width_add_from_the_right(x):
    x[:, :3].add_(x[:, -3:])
    return x * 2


def _three_from_the_middle(x):
    x[:3].mul_(x[x.shape[0] // 2 :][:3])
    return x * 2


@pytest.mark.parametrize(
    ("program", "overlapping_sizes"),
    [(_fixed_length_copy_from_the_end, [5, 4]), (_three_from_the_middle, [5])],
    ids=["fixed_length_copy", "three_from_the_middle"],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_overlapping_write_at_sizes_newly_overlapping_is_refused_after_compiling(
    backend, program, overlapping_sizes
):
    # Compiled where source and destination are disjoint, called where they overlap.
    compiled = ember.compile(program, backend=backend, dynamic=True)
    for size in [8, 10]:
        x = torch.randn(size)
        eager_x, got_x = x.clone(), x.clone()
        torch.testing.assert_close(compiled(got_x), program(eager_x))
        torch.testing.assert_close(got_x, eager_x)
    for size in overlapping_sizes:
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            program(torch.randn(size))
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            compiled(torch.randn(size))


@pytest.mark.parametrize("backend", BACKENDS)
def test_order_dependent_write_at_sizes_newly_overlapping_runs_eagerly(backend):
    compiled = ember.compile(_fixed_width_add_from_the_right, backend=backend, dynamic=True)
    for columns in [8, 9]:
        x = torch.randn(4, columns)
        eager_x, got_x = x.clone(), x.clone()
        torch.testing.assert_close(compiled(got_x), _fixed_width_add_from_the_right(eager_x))
        torch.testing.assert_close(got_x, eager_x)
    # the static entry a recompile makes runs its graph op by op at its first call and is
    # compiled at its second (deferred_recompiles): the warning comes with the compile
    with pytest.warns(EagerCallWarning, match="depends on the order"):
        for _ in range(2):
            x = torch.randn(4, 5)
            eager_x, got_x = x.clone(), x.clone()
            got = compiled(got_x)
            torch.testing.assert_close(got, _fixed_width_add_from_the_right(eager_x))
            torch.testing.assert_close(got_x, eager_x)
