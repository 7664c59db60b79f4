"""A slow full garbage collection freezes what it found alive, so the next ones skip it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from service.gc_policy import SurvivorFreezer


@pytest.fixture
def freezer() -> Iterator[SurvivorFreezer]:
    installed = SurvivorFreezer(slow_s=0.0).install()
    yield installed
    installed.remove()
    gc.unfreeze()


def test_what_a_full_collection_leaves_is_frozen_and_new_cycles_are_still_collected(
    freezer: SurvivorFreezer,
) -> None:
    before = gc.get_freeze_count()
    long_lived = [{"partition": [i]} for i in range(200_000)]
    gc.collect()
    assert freezer.freezes >= 1 and gc.get_freeze_count() >= before + len(long_lived)

    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() >= 2  # garbage made after the freeze is reclaimed as before
    assert len(long_lived) == 200_000


def test_young_collections_freeze_nothing(freezer: SurvivorFreezer) -> None:
    gc.collect(0)
    gc.collect(1)
    assert freezer.freezes == 0
