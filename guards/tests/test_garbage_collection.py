"""old_objects_frozen: collections during a compile skip the objects older than it."""

from __future__ import annotations

import gc
import weakref

import pytest

from guards.garbage_collection import old_objects_frozen


@pytest.fixture
def unfrozen_heap():
    # something else in the process may have frozen its heap (torch.compile's compile
    # workers do on some versions): start from an unfrozen one, and freeze it again after
    was_frozen = gc.get_freeze_count() > 0
    gc.unfreeze()
    yield
    gc.unfreeze()
    if was_frozen:
        gc.freeze()


def test_objects_older_than_the_block_are_frozen_during_it_only(unfrozen_heap):
    older = [[] for _ in range(10)]
    with old_objects_frozen():
        assert gc.get_freeze_count() >= len(older)
        with old_objects_frozen():  # a nested compile leaves the outer freeze alone
            assert gc.get_freeze_count() >= len(older)
        assert gc.get_freeze_count() >= len(older)
    assert gc.get_freeze_count() == 0


def test_a_cycle_that_became_garbage_during_the_block_is_collected_after(unfrozen_heap):
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    alive = weakref.ref(a)
    with old_objects_frozen():
        del a, b
        gc.collect()
        assert alive() is not None  # frozen: a collection skips it
    gc.collect()
    assert alive() is None


def test_a_heap_the_process_froze_itself_stays_frozen(unfrozen_heap):
    gc.freeze()
    frozen = gc.get_freeze_count()
    with old_objects_frozen():
        assert gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == frozen


def test_nothing_is_frozen_while_the_collector_is_off(unfrozen_heap):
    gc.disable()
    try:
        with old_objects_frozen():
            assert gc.get_freeze_count() == 0
    finally:
        gc.enable()
