"""Client quotas: Kafka's entity order, and a client that honours its throttle times
settling at its quota (simulated time, so exact)."""

from __future__ import annotations

from service.quotas.entities import alter_quotas, quota_for
from service.quotas.manager import PRODUCE, REQUEST, QuotaManager


def stored(*entries: tuple[list[tuple[str, str | None]], float]) -> object:
    section, results = alter_quotas(None, [(e, [(PRODUCE, v, False)]) for e, v in entries], False)
    assert all(code == 0 for code, _ in results)
    return section


def test_entities_resolve_in_kafkas_order() -> None:
    section = stored(([("user", "alice"), ("client-id", "app")], 1.0), ([("user", "alice")], 2.0),
                     ([("user", None)], 3.0), ([("client-id", "app")], 4.0), ([("client-id", None)], 5.0))
    assert quota_for(section, PRODUCE, "alice", "app")[0] == 1.0  # type: ignore[index]
    assert quota_for(section, PRODUCE, "alice", "other")[0] == 2.0  # type: ignore[index]
    assert quota_for(section, PRODUCE, "bob", "app")[0] == 3.0  # a default user beats any client quota
    assert quota_for(stored(([("client-id", "app")], 4.0), ([("client-id", None)], 5.0)), PRODUCE,
                     "bob", "x")[0] == 5.0  # type: ignore[index]


def test_a_client_honouring_its_throttle_settles_at_its_quota() -> None:
    now = [0.0]
    quotas = QuotaManager(lambda: 1, lambda: stored(([("user", None)], 10_000.0)), 11, 1.0, clock=lambda: now[0])
    sent, throttled = 0, 0
    while now[0] < 120:
        ms = quotas.record(PRODUCE, "alice", "app", 2_000)
        sent += 2_000 if now[0] >= 20 else 0  # after the first windows' burst allowance
        throttled += ms > 0
        now[0] += 0.01 + ms / 1000
    assert throttled > 0
    assert abs(sent / (now[0] - 20) - 10_000) / 10_000 < 0.05
    # each user has its own sensor under a <default> user quota
    assert quotas.record(PRODUCE, "bob", "app", 2_000) == 0


def test_the_remote_read_rate_stops_new_reads_over_its_bound() -> None:
    from service.quotas.manager import ByteRateLimit

    now = [0.0]
    limit = ByteRateLimit(1_000_000, 11, 1.0, clock=lambda: now[0])
    assert not limit.exceeded()
    limit.record(5_000_000)  # a backfill read 5 MB at once
    assert not limit.exceeded()  # 5 MB over the 10 s the samples cover: 0.5 MB/s
    limit.record(6_000_000)
    assert limit.exceeded()
    now[0] += 12  # the samples expire
    assert not limit.exceeded()
    assert ByteRateLimit(2**63 - 1, 11, 1.0).unlimited


def test_a_request_time_throttle_is_at_most_one_window() -> None:
    now = [0.0]
    section, results = alter_quotas(None, [([("client-id", None)], [(REQUEST, 1.0, False)])], False)
    assert all(code == 0 for code, _ in results)
    quotas = QuotaManager(lambda: 1, lambda: section, 11, 1.0, clock=lambda: now[0])
    # 1% of a thread is 10 ms a second; one request of 5 s is far over it
    assert quotas.record(REQUEST, "alice", "app", 5_000) == 1_000  # Kafka's bound: one window
    # byte rates are not bounded
    bytes_section, _ = alter_quotas(None, [([("client-id", None)], [(PRODUCE, 1_000.0, False)])], False)
    by_bytes = QuotaManager(lambda: 1, lambda: bytes_section, 11, 1.0, clock=lambda: now[0])
    assert by_bytes.record(PRODUCE, "alice", "app", 1_000_000) > 1_000


def test_the_remote_read_rate_follows_its_dynamic_config() -> None:
    revision, bound = [1], [1000]
    quotas = QuotaManager(lambda: revision[0], lambda: None, 11, 1.0, remote_rate=lambda: bound[0])
    assert quotas.remote_fetch.bytes_per_second == 1000
    bound[0] = 5
    assert quotas.remote_fetch.bytes_per_second == 1000  # read again only with new metadata
    revision[0] = 2
    assert quotas.remote_fetch.bytes_per_second == 5
