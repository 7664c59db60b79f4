"""Server-side assignors of the consumer group protocol: ``uniform`` and ``range``.

Both take the members (id, instance id, subscribed topic ids), the partition
count of every subscribed topic and the current *target* assignment, and
return the next target: topic id → sorted partitions, for every member.
Invariant of both: every partition of a topic that some member subscribes to
goes to exactly one member subscribed to it.

* ``uniform`` (Kafka's ``UniformAssignor``, the default) balances the number of
  partitions per member (they differ by at most one when all members subscribe
  to the same topics) and is *sticky*: a partition stays with its owner unless
  the owner unsubscribed or holds more than its share. With different
  subscriptions it keeps what it can, gives each partition to the least loaded
  subscriber, then moves partitions from the most to the least loaded
  subscribers while that narrows the gap.
* ``range`` (Kafka's ``RangeAssignor``) gives each member contiguous ranges per
  topic in order of instance id (static members first) then member id, so
  members with the same position get the same partitions of co-partitioned
  topics. Not sticky, as in Kafka.

Pure functions; deterministic for a given input.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ASSIGNORS", "MemberSpec", "assign_range", "assign_uniform"]

Assignment = dict[uuid.UUID, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    member_id: str
    instance_id: str | None
    topics: frozenset[uuid.UUID]  # subscribed topic ids that exist


def _finish(out: Mapping[str, Mapping[uuid.UUID, set[int]]]) -> dict[str, Assignment]:
    return {m: {t: tuple(sorted(ps)) for t, ps in a.items() if ps} for m, a in out.items()}


# ----------------------------------------------------------------------------- uniform


def assign_uniform(
    members: Sequence[MemberSpec],
    partitions: Mapping[uuid.UUID, int],
    current: Mapping[str, Mapping[uuid.UUID, Sequence[int]]],
) -> dict[str, Assignment]:
    """Balanced and sticky (see the module docstring)."""
    if not members:
        return {}
    if all(m.topics == members[0].topics for m in members):
        return _uniform_homogeneous(members, partitions, current)
    return _uniform_heterogeneous(members, partitions, current)


def _uniform_homogeneous(
    members: Sequence[MemberSpec],
    partitions: Mapping[uuid.UUID, int],
    current: Mapping[str, Mapping[uuid.UUID, Sequence[int]]],
) -> dict[str, Assignment]:
    topics = sorted(members[0].topics & set(partitions), key=str)
    total = sum(partitions[t] for t in topics)
    base, extra = divmod(total, len(members))
    out: dict[str, dict[uuid.UUID, set[int]]] = {}
    kept_count: dict[str, int] = {}
    taken: set[tuple[uuid.UUID, int]] = set()
    # Members that held the most go first, so the extra partitions stay where they are.
    order = sorted(members, key=lambda m: (-_count(current.get(m.member_id, {}), topics, partitions),
                                           m.member_id))
    for m in order:
        cap = base + 1 if extra > 0 else base
        kept: dict[uuid.UUID, set[int]] = {}
        n = 0
        for t in topics:
            for p in sorted(current.get(m.member_id, {}).get(t, ())):
                if n < cap and p < partitions[t] and (t, p) not in taken:
                    kept.setdefault(t, set()).add(p)
                    taken.add((t, p))
                    n += 1
        if n == base + 1:
            extra -= 1
        out[m.member_id] = kept
        kept_count[m.member_id] = n
    # The extras still to give go to those that kept the most (fewest moves).
    quota = {}
    for m in order:
        quota[m.member_id] = base
        if extra > 0 and kept_count[m.member_id] == base:
            quota[m.member_id] = base + 1
            extra -= 1
    for m in order:
        if extra > 0 and quota[m.member_id] == base and kept_count[m.member_id] < base:
            quota[m.member_id] = base + 1
            extra -= 1
        if kept_count[m.member_id] == base + 1:
            quota[m.member_id] = base + 1
    free = [(t, p) for t in topics for p in range(partitions[t]) if (t, p) not in taken]
    free.reverse()
    for m in order:
        for _ in range(quota[m.member_id] - kept_count[m.member_id]):
            t, p = free.pop()
            out[m.member_id].setdefault(t, set()).add(p)
    return _finish(out)


def _count(assignment: Mapping[uuid.UUID, Sequence[int]], topics: Sequence[uuid.UUID],
           partitions: Mapping[uuid.UUID, int]) -> int:
    return sum(1 for t in topics for p in assignment.get(t, ()) if p < partitions[t])


def _uniform_heterogeneous(
    members: Sequence[MemberSpec],
    partitions: Mapping[uuid.UUID, int],
    current: Mapping[str, Mapping[uuid.UUID, Sequence[int]]],
) -> dict[str, Assignment]:
    out: dict[str, dict[uuid.UUID, set[int]]] = {m.member_id: {} for m in members}
    load = dict.fromkeys(out, 0)
    subscribers: dict[uuid.UUID, list[str]] = {}
    for m in sorted(members, key=lambda m: m.member_id):
        for t in m.topics:
            if t in partitions:
                subscribers.setdefault(t, []).append(m.member_id)
    owner: dict[tuple[uuid.UUID, int], str] = {}
    for m in members:  # stickiness: keep what is still subscribed
        for t, ps in current.get(m.member_id, {}).items():
            if t not in subscribers or t not in m.topics:
                continue
            for p in ps:
                if p < partitions[t] and (t, p) not in owner:
                    owner[(t, p)] = m.member_id
                    out[m.member_id].setdefault(t, set()).add(p)
                    load[m.member_id] += 1
    # Topics with the fewest subscribers first: they have the least choice.
    for t in sorted(subscribers, key=lambda t: (len(subscribers[t]), str(t))):
        for p in range(partitions[t]):
            if (t, p) not in owner:
                mid = min(subscribers[t], key=lambda x: (load[x], x))
                owner[(t, p)] = mid
                out[mid].setdefault(t, set()).add(p)
                load[mid] += 1
    _balance(out, load, subscribers, partitions)
    return _finish(out)


def _balance(out: dict[str, dict[uuid.UUID, set[int]]], load: dict[str, int],
             subscribers: Mapping[uuid.UUID, list[str]], partitions: Mapping[uuid.UUID, int]) -> None:
    """Move partitions from heavier to lighter subscribers while it narrows a gap of 2+."""
    total = sum(partitions[t] for t in subscribers)
    for _ in range(total * 2 + 1):  # bounded: each move lowers the sum of squared loads
        moved = False
        for heavy in sorted(load, key=lambda x: (-load[x], x)):
            for t in sorted(out[heavy], key=str):
                light = min(subscribers[t], key=lambda x: (load[x], x))
                if load[heavy] - load[light] < 2 or not out[heavy][t]:
                    continue
                p = max(out[heavy][t])
                out[heavy][t].discard(p)
                out[light].setdefault(t, set()).add(p)
                load[heavy] -= 1
                load[light] += 1
                moved = True
                break
            if moved:
                break
        if not moved:
            return


# ----------------------------------------------------------------------------- range


def assign_range(
    members: Sequence[MemberSpec],
    partitions: Mapping[uuid.UUID, int],
    current: Mapping[str, Mapping[uuid.UUID, Sequence[int]]],
) -> dict[str, Assignment]:
    """Contiguous ranges per topic, in (instance id, member id) order; ``current`` is unused."""
    del current
    ordered = sorted(
        members,
        key=lambda m: (0, m.instance_id, "") if m.instance_id is not None else (1, "", m.member_id),
    )
    out: dict[str, dict[uuid.UUID, set[int]]] = {m.member_id: {} for m in members}
    for t in sorted({t for m in members for t in m.topics if t in partitions}, key=str):
        subs = [m.member_id for m in ordered if t in m.topics]
        base, extra = divmod(partitions[t], len(subs))
        start = 0
        for mid in subs:
            n = base + (1 if extra > 0 else 0)
            extra -= 1 if extra > 0 else 0
            if n:
                out[mid][t] = set(range(start, start + n))
            start += n
    return _finish(out)


ASSIGNORS: dict[str, Callable[..., dict[str, Assignment]]] = {
    "uniform": assign_uniform,
    "range": assign_range,
}
