"""parse_assignment (service/groups/group.py): a classic member's ConsumerProtocolAssignment, as
the console and admin API show it; garbage and lying counts give None, never a huge allocation."""

from __future__ import annotations

import struct

from service.groups.group import parse_assignment


def _assignment(topics: list[tuple[str, list[int]]], version: int = 3) -> bytes:
    out = struct.pack(">hi", version, len(topics))
    for name, parts in topics:
        raw = name.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(f">i{len(parts)}i", len(parts), *parts)
    return out + struct.pack(">i", -1)  # user data: null


def test_topics_and_partitions_of_every_version() -> None:
    topics = [("orders", [0, 2, 5]), ("clicks", [7])]
    for version in range(4):
        assert parse_assignment(_assignment(topics, version)) == topics
    assert parse_assignment(_assignment([])) == []


def test_garbled_or_lying_assignments_are_refused() -> None:
    good = _assignment([("orders", [0, 1])])
    assert parse_assignment(b"") is None
    assert parse_assignment(good[:-9]) is None  # cut inside the partition list
    assert parse_assignment(struct.pack(">hi", 0, 2**31 - 1)) is None  # claims 2 G topics
    lying = struct.pack(">hi", 0, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 2**30)
    assert parse_assignment(lying) is None  # claims 1 G partitions in 11 bytes
    assert parse_assignment(struct.pack(">hih", 0, 1, 2) + b"\xff\xfe" + struct.pack(">i", 0)) is None
