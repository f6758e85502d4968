"""frozen_heap: what a serving process holds after its startup is out of the collector's walks while it serves,
garbage is not frozen with it, and the heap is handed back after."""

from __future__ import annotations

import gc
import weakref

from accelkit.serve.heap import frozen_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> tuple[_Node, _Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return a, b


def test_live_objects_are_frozen_for_the_block_then_handed_back() -> None:
    kept = _cycle()
    with frozen_heap() as num_frozen:
        # everything alive at the start: the objects of this test run (hundreds of thousands), these two among them
        assert num_frozen > 10_000 and gc.get_freeze_count() > 10_000
        # out of every generation a collection walks (gc.get_objects lists those)
        assert not any(o is kept[0] or o is kept[1] for o in gc.get_objects())
    assert gc.get_freeze_count() == 0
    assert sum(o is kept[0] or o is kept[1] for o in gc.get_objects()) == 2


def test_garbage_is_collected_before_the_freeze_and_new_garbage_during_it() -> None:
    before = weakref.ref(_cycle()[0])  # a cycle already garbage when the block starts: not frozen, freed
    with frozen_heap():
        assert before() is None
        during = weakref.ref(_cycle()[0])  # garbage made while frozen: the collector still walks (and frees) it
        gc.collect()
        assert during() is None


def test_a_cycle_that_was_alive_at_the_freeze_is_freed_once_the_heap_is_handed_back() -> None:
    kept: list[tuple[_Node, _Node]] = [_cycle()]
    ref = weakref.ref(kept[0][0])
    with frozen_heap():
        kept.clear()
        gc.collect()
        assert ref() is not None  # frozen: not walked, so not freed while the server runs
    gc.collect()
    assert ref() is None
