"""Iterators whose items are made when they are read, in eager's order.

    def f(x):
        acc = []
        squares = (acc.append(i) or i * x for i in range(3))   # nothing runs yet
        first = next(squares)                                  # one append
        return first + len(acc)

A generator made in the frame (a generator function's call, a generator
expression), a `map`, a `filter`, and a `zip` or `enumerate` over one of those is
an `IteratorValue` with a `produce` function: each read steps the generator's
Translator to its next `yield` (`stop_at_yield`), or calls the mapped function on
the next items, so a side effect of the body happens when eager's would, and a
consumer that stops early (`next`, `for ... break`, `any`, `all`, `in`, a shorter
`zip` argument) leaves the rest unrun. Items read are kept in `items`, so a
consumer that reads a whole iterator (`list`, `sum`, unpacking) reads them as
before; once its end is met `produce` is dropped and the iterator is a plain one.

An iterator left unfinished where the compiled part ends (returned, or live at a
graph break) is never read ahead there: that would read the tensors, lists and objects
its body uses before the code after the break (or the caller) writes them, where
eagerly its items see those writes (`g = map(f, xs)`, a break, `xs[1].add_(1)`,
`next(g)`). A map, filter, zip or enumerate (`LazySteps`) over iterators that can be
made again as they are (over the same list at the same index, the items a range or
tuple has left, a reversed() of a dict) is made again as the same builtin over them,
its function the same, so the code after the break reads it as eagerly; any other (a
generator, one over a set or a dict's forward iterator) runs the frame eagerly.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dynamo_capture.errors import ExceptionRaised, Unsupported
from dynamo_capture.values import IteratorValue, ListValue, PythonValue, TupleValue, Value

if TYPE_CHECKING:
    from dynamo_capture.interpreter import Translator

__all__ = [
    "LazySteps",
    "ListSteps",
    "MappingSteps",
    "check_no_pending_cleanup",
    "check_side_effect",
    "drain",
    "each_item",
    "generator_iterator",
    "generator_steps",
    "is_lazy",
    "lazy_enumerate",
    "lazy_filter",
    "lazy_map",
    "lazy_zip",
    "list_iterator",
    "mapping_iterator",
    "ReversedMappingIterator",
    "reversed_mapping_iterator",
    "next_item",
]


def is_lazy(value: Value) -> bool:
    """Whether reading `value` runs code capture has not run yet."""
    return isinstance(value, IteratorValue) and value.produce is not None


def next_item(tx: Translator, iterator: IteratorValue) -> Value | None:
    """The iterator's next item (made now, for a lazy or endless one); None at its end."""
    if iterator.position == len(iterator.items):
        if iterator.endless is not None:
            from dynamo_capture.polyfills import endless_item

            endless_item(iterator)
        elif iterator.produce is not None:
            produce, iterator.produce = iterator.produce, None  # finished unless it gives one
            item = produce(tx)
            if item is not None:
                iterator.produce = produce
                iterator.items.append(item)
    if iterator.position < len(iterator.items):
        iterator.position += 1
        return iterator.items[iterator.position - 1]
    return None


def each_item(tx: Translator, value: Value) -> Iterator[Value]:
    """The items iterating `value` gives, a lazy iterator's made one at a time as they are
    taken: a consumer that writes each item before the next is made (`l.extend(gen)`,
    whose generator may read `l`) sees the writes as eagerly."""
    if is_lazy(value):
        assert isinstance(value, IteratorValue)
        while (item := next_item(tx, value)) is not None:
            yield item
        return
    from dynamo_capture.operations import sequence_items

    yield from sequence_items(tx, value)


def drain(tx: Translator, iterator: IteratorValue) -> list[Value]:
    """The items the iterator has yet to give, all read now (made in order)."""
    if iterator.endless is not None:
        raise Unsupported("consuming an endless iterator (itertools.count, repeat, cycle)")
    items = []
    while (item := next_item(tx, iterator)) is not None:
        items.append(item)
    return items


def check_side_effect(tx: Translator, what: str) -> None:
    """Refuse a side effect while an unfinished iterator is read ahead of eager's order."""
    reading = tx.ctx.reading_ahead
    if reading is not None:
        raise Unsupported(
            f"{what} in {reading}, left unfinished where the compiled part ends: eagerly it "
            "runs later, as the rest is read"
        )


# ----- generators ----------------------------------------------------------------------
class _GeneratorSteps:
    """The `produce` of a generator made in the frame: its Translator run to its next yield."""

    def __init__(self, child: Translator) -> None:
        child.stop_at_yield = True
        self.child = child
        self.started = False
        # what the body returned when the last step finished it (StopIteration.value)
        self.returned: Value | None = None

    def __call__(self, tx: Translator) -> Value | None:
        child = self.child
        if child.done:
            return None
        self.started = True
        try:
            child.run_until_yield()
        except ExceptionRaised as raised:
            child.done = True  # a generator that raised is finished
            if raised.stop_iteration:  # PEP 479: StopIteration leaving a generator
                error = RuntimeError("generator raised StopIteration")
                raise ExceptionRaised(PythonValue(error)) from None
            raise
        except Unsupported as error:
            if child.depth == 1:
                # a break inside a generator the compiled frame made: no part could hand
                # the paused generator on, so the frame runs eagerly (its calls compiled),
                # as torch.compile skips it
                error.cannot_resume = True
            raise
        if not child.suspended:
            self.returned = child.result
            return None
        assert child.yielded is not None
        return child.yielded.pop()

    def send(self, value: Value) -> None:
        """What the paused `yield` evaluates to when it next runs."""
        self.child.stack[-1] = value


def generator_iterator(child: Translator) -> IteratorValue:
    """The generator object of a call of a generator function, its body not yet run."""
    steps = _GeneratorSteps(child)
    child.ctx.generators.append(steps)
    return IteratorValue([], kind="generator", produce=steps)


def check_no_pending_cleanup(tx: Translator) -> None:
    """Refuse a frame that leaves a generator paused inside a try/finally or `with` block.

    Eagerly the generator's cleanup (its `finally`, its context's `__exit__`) runs when
    the generator is closed or collected (`del g`, the frame's end), which capture does
    not see; the frame runs eagerly instead.
    """
    from dynamo_capture.errors import NeedsEagerFrame

    for steps in tx.ctx.generators:
        child = steps.child
        if steps.started and not child.done and child.suspended and _in_cleanup_block(child):
            raise NeedsEagerFrame(
                f"the generator {child.code.co_name} is left paused inside a try/finally or "
                "`with` block, whose cleanup runs eagerly when it is closed or collected"
            )


def _in_cleanup_block(child: Translator) -> bool:
    """Whether the paused yield lies in a try or `with` block of the generator, past the
    handler every generator has that turns a StopIteration leaving it into a RuntimeError."""
    from dynamo_capture.interpreter import _exception_entries

    assert child.current is not None
    offset = child.current.offset
    for entry in _exception_entries(child.code):
        if entry.start <= offset < entry.end:
            handler = child.instructions[child.index_of[entry.target]]
            if handler.opname != "CALL_INTRINSIC_1":  # STOPITERATION_ERROR (3.12)
                return True
    return False


def generator_steps(iterator: IteratorValue) -> Any:
    """The generator Translator stepper of a lazy generator, or None."""
    produce = iterator.produce
    return produce if isinstance(produce, _GeneratorSteps) else None


# ----- builtin iterators -----------------------------------------------------------------
class ListSteps:
    """The `produce` of iter(a list): item i read when it is reached, so a write to the
    list after the iterator was made (an append inside the loop) is seen, as eagerly.
    `list` is a list made in the frame, or an outside list (a PythonValue with a source,
    its length guarded), read through its shadow once the frame writes to it. Where a
    compiled part ends, it is made again as an iterator over the same list, at the same
    index."""

    def __init__(self, items: ListValue | PythonValue) -> None:
        self.list = items
        self.index = 0

    def __call__(self, reader: Translator) -> Value | None:
        from dynamo_capture import side_effects
        from dynamo_capture.sources import item_source

        current = side_effects.current(reader, self.list)
        if isinstance(current, ListValue):
            if self.index >= len(current.items):
                return None
            item = current.items[self.index]
        else:
            assert isinstance(current, PythonValue)
            if self.index >= len(current.obj):
                return None
            real = current.obj[self.index]
            item = reader.ctx.wrap(real, item_source(current.source, self.index))
        self.index += 1
        return item


def list_iterator(items: ListValue | PythonValue) -> IteratorValue:
    """iter(a list made in the frame, or an outside list), read as it is then."""
    return IteratorValue([], produce=ListSteps(items))


class MappingSteps:
    """The `produce` of iter(a dict, one of its views, or a set made in the frame), or of
    reversed(a dict or one of its views) (`reverse`): the keys it had when the iterator
    was made, each item read when reached (a value written since is seen). A change of
    size raises Python's RuntimeError at the next step, as eagerly; keys changed at the
    same size (which CPython reports only later, or not at all for reversed(), whose
    items then follow the dict's table) are Unsupported. `kind` is "keys", "values",
    "items" (a dict) or "set". `size`: the container's size when the iterator was made,
    where it was made by an earlier part (ReversedMappingIterator)."""

    def __init__(
        self,
        tx: Translator,
        container: Value,
        kind: str,
        *,
        reverse: bool = False,
        index: int = 0,
        size: int | None = None,
    ) -> None:
        from dynamo_capture.operations import sequence_items

        self.container = container
        self.kind = kind
        self.reverse = reverse
        sequence_items(tx, container)  # iterated as before: its checks, its keys guarded
        self.keys = self._keys(tx)
        self.size = len(self.keys) if size is None else size
        self.index = index

    def changed(self, reader: Translator) -> str | None:
        """How the container changed since the iterator was made: "size", "keys" or None."""
        keys = self._keys(reader)
        if len(keys) != self.size:
            return "size"
        return "keys" if keys != self.keys else None

    def _current(self, reader: Translator) -> Value:
        from dynamo_capture import side_effects

        return side_effects.current(reader, self.container)

    def _keys(self, reader: Translator) -> list[Any]:
        current = self._current(reader)
        if isinstance(current, PythonValue):  # a dict from outside the frame, not written
            return list(current.obj)
        return list(current.items)  # type: ignore[attr-defined]

    def __call__(self, reader: Translator) -> Value | None:
        from dynamo_capture.errors import raised_by_python
        from dynamo_capture.operations import key_value
        from dynamo_capture.sources import item_source

        change = self.changed(reader)
        if change == "size":
            what = "Set" if self.kind == "set" else "dictionary"
            raise raised_by_python(RuntimeError(f"{what} changed size during iteration"))
        if change == "keys":
            raise Unsupported("a dict whose keys changed (at the same size) while iterated")
        keys = self.keys
        if self.index >= len(keys):
            return None
        key = keys[len(keys) - 1 - self.index] if self.reverse else keys[self.index]
        self.index += 1
        if self.kind in ("keys", "set"):
            return key_value(key)
        current = self._current(reader)
        if isinstance(current, PythonValue):
            value = reader.ctx.wrap(current.obj[key], item_source(current.source, key))
        else:
            value = current.items[key]  # type: ignore[attr-defined]
        return value if self.kind == "values" else TupleValue([key_value(key), value])


def mapping_iterator(
    tx: Translator, container: Value, kind: str, iterator_kind: str
) -> IteratorValue:
    """iter(a dict, a view of one, or a set): see MappingSteps."""
    return IteratorValue([], kind=iterator_kind, produce=MappingSteps(tx, container, kind))


def reversed_mapping_iterator(tx: Translator, container: Value, kind: str) -> IteratorValue:
    """reversed(a dict or a view of one): see MappingSteps; where a compiled part ends in
    its loop it is made again as a ReversedMappingIterator (capture.OutputPlan)."""
    steps = MappingSteps(tx, container, kind, reverse=True)
    return IteratorValue([], kind="reversed_fixed", produce=steps)


class ReversedMappingIterator:
    """reversed(a dict or a view of one) made again where a compiled part ends inside its
    loop, `index` items read: CPython's own reversed iterator, advanced past them, so the
    code after the part (eager, or a part resuming in the loop) sees its checks. A dict
    whose size changed since the loop began (`size`, then) raises Python's error at the
    next step, as the iterator the loop began with does. A part resuming in the loop reads
    it as MappingSteps over `mapping` from `index` on (output_graph)."""

    def __init__(self, mapping: dict, kind: str, index: int, size: int) -> None:
        self.mapping, self.kind, self.index, self.size = mapping, kind, index, size
        self._changed = len(mapping) != size
        view = {"keys": mapping.keys, "values": mapping.values, "items": mapping.items}[kind]
        self._real = reversed(view())
        if not self._changed:
            for _ in range(index):
                next(self._real)

    def __iter__(self) -> ReversedMappingIterator:
        return self

    def __next__(self) -> Any:
        if self._changed or len(self.mapping) != self.size:
            self._changed = True
            raise RuntimeError("dictionary changed size during iteration")
        item = next(self._real)
        self.index += 1
        return item


def _iterators(tx: Translator, args: list[Value]) -> list[IteratorValue]:
    from dynamo_capture.operations import get_iter

    return [get_iter(tx, arg) for arg in args]


def _row(tx: Translator, iterators: list[IteratorValue]) -> list[Value] | None:
    """The next item of each, read in order; None when one ends (the rest not read)."""
    row = []
    for iterator in iterators:
        item = next_item(tx, iterator)
        if item is None:
            return None
        row.append(item)
    return row


class LazySteps:
    """The `produce` of a map, filter, zip or enumerate made in the frame over other
    iterators (`iterators`, read only through it): `function` the mapped function or the
    predicate (None: filter(None, ...)), `count` an enumerate's next index. Where a
    compiled part ends it is made again as the same builtin over its iterators made
    again, when each of them can be (capture.OutputPlan): nothing is read ahead."""

    def __init__(
        self,
        kind: str,
        function: Value | None,
        iterators: list[IteratorValue],
        count: int = 0,
        sentinel: Value | None = None,
    ) -> None:
        self.kind = kind
        self.function = function
        self.iterators = iterators
        self.count = count
        self.sentinel = sentinel  # iter(function, sentinel)'s
        self.finished = False

    def __call__(self, reader: Translator) -> Value | None:
        from dynamo_capture.calls import call
        from dynamo_capture.operations import binary_op, truth

        if self.kind == "callable":  # the function called until it gives the sentinel
            assert self.function is not None and self.sentinel is not None
            if self.finished:
                return None
            item = call(reader, self.function, [], {})
            if item is self.sentinel or truth(
                reader, binary_op(reader, operator.eq, item, self.sentinel)
            ):
                self.finished = True  # and stays so, as CPython's callable_iterator
                return None
            return item
        if self.kind == "filter":
            (iterator,) = self.iterators
            while (item := next_item(reader, iterator)) is not None:
                kept = item if self.function is None else call(reader, self.function, [item], {})
                if truth(reader, kept):
                    return item
            return None
        row = _row(reader, self.iterators)
        if row is None:
            return None
        if self.kind == "map":
            assert self.function is not None
            return call(reader, self.function, row, {})
        if self.kind == "zip":
            return TupleValue(row)
        self.count += 1  # enumerate
        return TupleValue([PythonValue(self.count - 1), row[0]])


def lazy_map(tx: Translator, function: Value, args: list[Value]) -> IteratorValue:
    """map(function, *args): the function called on each row as it is read."""
    steps = LazySteps("map", function, _iterators(tx, args))
    return IteratorValue([], kind="map", produce=steps)


def lazy_filter(tx: Translator, predicate: Value, arg: Value) -> IteratorValue:
    """filter(predicate, arg): the predicate called on each item as it is read."""
    keeps_truthy = isinstance(predicate, PythonValue) and predicate.obj is None
    steps = LazySteps("filter", None if keeps_truthy else predicate, _iterators(tx, [arg]))
    return IteratorValue([], kind="filter", produce=steps)


def lazy_zip(tx: Translator, args: list[Value], strict: bool) -> IteratorValue:
    """zip(*args) over an argument read lazily: a row read as it is read, stopping at the
    first argument that ends (the ones after it not read), as eagerly."""
    if strict:
        raise Unsupported("zip(strict=True) over a generator, map or filter made in the frame")
    return IteratorValue([], kind="zip", produce=LazySteps("zip", None, _iterators(tx, args)))


def lazy_callable(tx: Translator, function: Value, sentinel: Value) -> IteratorValue:
    """iter(function, sentinel): the function called as each item is read."""
    steps = LazySteps("callable", function, [], sentinel=sentinel)
    return IteratorValue([], kind="callable", produce=steps)


def lazy_enumerate(tx: Translator, arg: Value, start: int) -> IteratorValue:
    """enumerate(arg, start) over an argument read lazily."""
    steps = LazySteps("enumerate", None, _iterators(tx, [arg]), start)
    return IteratorValue([], produce=steps)
