"""The server-side assignors (uniform, range), with properties checked by hypothesis:
every subscribed partition goes to exactly one subscriber; uniform balances to within
one and is sticky; range hands out contiguous, co-partitioned ranges."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from service.groups.consumer.assignors import MemberSpec, assign_range, assign_uniform

TOPICS = [uuid.UUID(int=i + 1) for i in range(4)]


def spec(name: str, *topics: uuid.UUID, instance: str | None = None) -> MemberSpec:
    return MemberSpec(name, instance, frozenset(topics))


def flat(assignment: dict[str, dict[uuid.UUID, tuple[int, ...]]]) -> list[tuple[uuid.UUID, int]]:
    return [(t, p) for a in assignment.values() for t, ps in a.items() for p in ps]


def counts(assignment: dict[str, dict[uuid.UUID, tuple[int, ...]]]) -> list[int]:
    return [sum(len(ps) for ps in a.values()) for a in assignment.values()]


partition_counts = st.dictionaries(st.sampled_from(TOPICS), st.integers(1, 12), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(partition_counts, st.integers(1, 9))
def test_uniform_same_subscriptions_every_partition_once_and_balanced(
        partitions: dict[uuid.UUID, int], n: int) -> None:
    members = [spec(f"m{i}", *partitions) for i in range(n)]
    out = assign_uniform(members, partitions, {})
    got = flat(out)
    assert sorted(got) == sorted((t, p) for t, c in partitions.items() for p in range(c))
    assert max(counts(out)) - min(counts(out)) <= 1


@settings(max_examples=60, deadline=None)
@given(partition_counts, st.integers(1, 8), st.integers(0, 7), st.booleans())
def test_uniform_is_sticky_when_a_member_comes_or_goes(
        partitions: dict[uuid.UUID, int], n: int, which: int, joins: bool) -> None:
    members = [spec(f"m{i}", *partitions) for i in range(n)]
    before = assign_uniform(members, partitions, {})
    assert assign_uniform(members, partitions, before) == before  # nothing changed: nothing moves
    if joins:
        after_members = members + [spec("new", *partitions)]
    elif n > 1:
        after_members = [m for i, m in enumerate(members) if i != which % n]
    else:
        return
    after = assign_uniform(after_members, partitions, before)
    total = sum(partitions.values())
    assert max(counts(after)) - min(counts(after)) <= 1
    assert sorted(flat(after)) == sorted((t, p) for t, c in partitions.items() for p in range(c))
    # Only what balance requires moves: a survivor keeps min(what it had, its new share).
    floor = total // len(after_members)
    for m in members:
        if m.member_id not in after:
            continue
        had = {(t, p) for t, ps in before[m.member_id].items() for p in ps}
        kept = had & {(t, p) for t, ps in after[m.member_id].items() for p in ps}
        assert len(kept) >= min(len(had), floor)


@settings(max_examples=60, deadline=None)
@given(partition_counts, st.lists(st.sets(st.sampled_from(TOPICS), min_size=1), min_size=1, max_size=6))
def test_uniform_different_subscriptions_go_to_subscribers_only(
        partitions: dict[uuid.UUID, int], subscriptions: list[set[uuid.UUID]]) -> None:
    members = [spec(f"m{i}", *subs) for i, subs in enumerate(subscriptions)]
    out = assign_uniform(members, partitions, {})
    wanted = {t for subs in subscriptions for t in subs if t in partitions}
    assert sorted(flat(out)) == sorted((t, p) for t in wanted for p in range(partitions[t]))
    for m in members:
        assert set(out[m.member_id]) <= m.topics
    again = assign_uniform(members, partitions, out)
    assert sorted(flat(again)) == sorted(flat(out))


def test_uniform_heterogeneous_balances_what_it_can() -> None:
    a, b = TOPICS[:2]
    members = [spec("x", a, b), spec("y", a), spec("z", b)]
    out = assign_uniform(members, {a: 6, b: 6}, {})
    assert sorted(counts(out)) == [4, 4, 4]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 6))
def test_range_gives_contiguous_co_partitioned_ranges(partitions: int, n: int) -> None:
    a, b = TOPICS[:2]
    members = [spec(f"m{i}", a, b) for i in range(n)]
    out = assign_range(members, {a: partitions, b: partitions}, {})
    for m in members:
        mine = out[m.member_id]
        assert mine.get(a, ()) == mine.get(b, ())  # co-partitioned
        ps = mine.get(a, ())
        assert list(ps) == list(range(ps[0], ps[0] + len(ps))) if ps else True
    assert sorted(flat(out)) == sorted((t, p) for t in (a, b) for p in range(partitions))


def test_range_orders_static_members_first_by_instance_id() -> None:
    a = TOPICS[0]
    members = [spec("zz", a), spec("m1", a, instance="i-2"), spec("m2", a, instance="i-1")]
    out = assign_range(members, {a: 6}, {})
    assert out["m2"] == {a: (0, 1)} and out["m1"] == {a: (2, 3)} and out["zz"] == {a: (4, 5)}


def test_no_members_or_no_topics() -> None:
    assert assign_uniform([], {TOPICS[0]: 3}, {}) == {}
    assert assign_uniform([spec("a", TOPICS[1])], {TOPICS[0]: 3}, {}) == {"a": {}}
    assert assign_range([spec("a")], {TOPICS[0]: 3}, {}) == {"a": {}}
