"""The fetch session cache (KIP-227) on its own: contexts, responses, epochs, eviction."""

from __future__ import annotations

import random

from common.errors import ErrorCode
from fetch.planner import PartitionData, PartitionFetch
from fetch.sessions import (
    EVICTION_MS,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchSessionCache,
    Kind,
    next_epoch,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def _cache(slots: int = 10) -> tuple[FetchSessionCache, Clock]:
    clock = Clock()
    return FetchSessionCache(slots, clock_ms=clock, rng=random.Random(7)), clock


def _fetches(*partitions: int, offset: int = 0, topic: str = "t") -> list[PartitionFetch]:
    return [PartitionFetch(topic, p, offset, 1 << 20) for p in partitions]


def _data(p: int, hw: int, size: int = 0, start: int = 0, topic: str = "t",
          error: ErrorCode = ErrorCode.none) -> PartitionData:
    return PartitionData(topic, p, error, hw, hw, start, size=size)


def _open(cache: FetchSessionCache, n: int, hw: int = 5) -> int:
    ctx = cache.new_context(INVALID_SESSION_ID, INITIAL_EPOCH, _fetches(*range(n)), [])
    assert ctx.kind is Kind.FULL
    error, session_id, sent = cache.respond(ctx, [_data(p, hw) for p in range(n)])
    assert error == ErrorCode.none and len(sent) == n
    return session_id


def test_sessionless_fetch_never_touches_the_cache() -> None:
    cache, _ = _cache()
    ctx = cache.new_context(INVALID_SESSION_ID, FINAL_EPOCH, _fetches(0, 1), [])
    assert ctx.kind is Kind.SESSIONLESS
    assert cache.respond(ctx, [_data(0, 1), _data(1, 1)])[1] == INVALID_SESSION_ID
    assert len(cache) == 0


def test_an_incremental_fetch_sends_only_what_changed() -> None:
    cache, _ = _cache()
    session_id = _open(cache, 3)
    assert session_id != INVALID_SESSION_ID

    ctx = cache.new_context(session_id, 1, [], [])
    assert ctx.kind is Kind.INCREMENTAL
    assert [f.partition for f in ctx.partitions] == [0, 1, 2]  # the session's, not the request's
    # nothing changed: nothing sent
    assert cache.respond(ctx, [_data(p, 5) for p in range(3)]) == (ErrorCode.none, session_id, [])
    # records on 1, a new high watermark on 2, an error on 0
    ctx = cache.new_context(session_id, 2, _fetches(1, offset=5), [])
    data = [_data(0, 5, error=ErrorCode.unknown_topic_or_partition), _data(1, 6, size=70), _data(2, 9)]
    _, _, sent = cache.respond(ctx, data)
    assert [d.partition for d in sent] == [0, 1, 2]
    # the partition with records is read last from now on; its new offset is kept
    ctx = cache.new_context(session_id, 3, [], [])
    assert [(f.partition, f.fetch_offset) for f in ctx.partitions] == [(0, 0), (2, 0), (1, 5)]
    # the errored partition is sent again once the error clears (its cached hw was reset)
    _, _, sent = cache.respond(ctx, [_data(0, 5), _data(2, 9), _data(1, 6)])
    assert [d.partition for d in sent] == [0]


def test_forgotten_partitions_leave_the_session_and_an_emptied_session_ends() -> None:
    cache, _ = _cache()
    session_id = _open(cache, 2)
    ctx = cache.new_context(session_id, 1, [], [("t", 0)])
    assert [f.partition for f in ctx.partitions] == [1]
    cache.respond(ctx, [_data(1, 5)])
    ctx = cache.new_context(session_id, 2, [], [("t", 1)])
    assert ctx.kind is Kind.SESSIONLESS and cache.get(session_id) is None


def test_unknown_session_and_wrong_epoch_are_errors_with_no_partitions() -> None:
    cache, _ = _cache()
    session_id = _open(cache, 1)
    ctx = cache.new_context(session_id + 1, 1, _fetches(0), [])
    assert cache.respond(ctx, []) == (ErrorCode.fetch_session_id_not_found, INVALID_SESSION_ID, [])
    ctx = cache.new_context(session_id, 7, _fetches(0), [])
    assert cache.respond(ctx, []) == (ErrorCode.invalid_fetch_session_epoch, INVALID_SESSION_ID, [])
    # the session is intact: the right epoch still works
    assert cache.new_context(session_id, 1, [], []).kind is Kind.INCREMENTAL


def test_a_duplicate_request_racing_the_first_gets_invalid_epoch() -> None:
    cache, _ = _cache()
    session_id = _open(cache, 1)
    first = cache.new_context(session_id, 1, [], [])
    second = cache.new_context(session_id, 2, [], [])  # the client moved on meanwhile
    assert cache.respond(first, [_data(0, 5)])[0] == ErrorCode.invalid_fetch_session_epoch
    assert cache.respond(second, [_data(0, 5)])[0] == ErrorCode.none


def test_a_full_fetch_closes_the_session_it_names() -> None:
    cache, _ = _cache()
    session_id = _open(cache, 1)
    ctx = cache.new_context(session_id, FINAL_EPOCH, _fetches(0), [])
    assert ctx.kind is Kind.SESSIONLESS and cache.get(session_id) is None
    again = _open(cache, 1)
    ctx = cache.new_context(again, INITIAL_EPOCH, _fetches(0), [])  # closes it, opens another
    assert cache.get(again) is None
    assert cache.respond(ctx, [_data(0, 5)])[1] not in (INVALID_SESSION_ID, again)


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_a_full_cache_evicts_only_stale_or_weaker_old_sessions() -> None:
    cache, clock = _cache(slots=2)
    small = _open(cache, 1)
    big = _open(cache, 5)
    # full, and nothing is old enough: no session for the third client
    assert _open(cache, 10) == INVALID_SESSION_ID
    assert len(cache) == 2 and cache.evictions == 0
    # two minutes on, both are old; `big` stays in use, `small` goes stale: it goes first
    clock.now += EVICTION_MS + 1
    cache.respond(cache.new_context(big, 1, [], []), [_data(p, 5) for p in range(5)])
    third = _open(cache, 3)
    assert third != INVALID_SESSION_ID and cache.get(small) is None and cache.evictions == 1
    # no stale one now; `big` (5 partitions, old) may be evicted by a bigger session only
    clock.now += 10
    assert _open(cache, 2) == INVALID_SESSION_ID
    assert _open(cache, 6) != INVALID_SESSION_ID
    assert cache.get(big) is None and cache.get(third) is not None


def test_follower_sessions_are_privileged() -> None:
    cache, clock = _cache(slots=1)
    ctx = cache.new_context(INVALID_SESSION_ID, INITIAL_EPOCH, _fetches(0, 1), [], privileged=True)
    follower = cache.respond(ctx, [_data(0, 5), _data(1, 5)])[1]
    clock.now += EVICTION_MS // 2
    assert _open(cache, 50) == INVALID_SESSION_ID  # a consumer cannot evict it, however big
    consumer = _open(cache, 1)
    assert consumer == INVALID_SESSION_ID and cache.get(follower) is not None
