"""Incremental fetch sessions (KIP-227) on the wire: a raw client walks the session's
life (kafka-python's schema-built Fetch v12), and kafka-python's consumer, which opens
sessions by default, reads many partitions through one."""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.protocol.consumer import FetchRequest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import helpers
from tests.e2e import rawkafka as rk

NONE, FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH = 0, 70, 71
Part = FetchRequest.FetchTopic.FetchPartition


@pytest.fixture(scope="module")
def broker(module_start_broker: Any) -> Any:
    # one slot: the second client asking for a session gets none (the cache's limit)
    return module_start_broker(sets={"max.incremental.fetch.session.cache.slots": "1"})


def _fetch(conn: rk.Connection, session_id: int, epoch: int,
           partitions: dict[tuple[str, int], int], forgotten: dict[str, list[int]] | None = None,
           max_wait_ms: int = 50) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), offset in partitions.items():
        by_topic.setdefault(topic, []).append(Part(partition=p, fetch_offset=offset,
                                                   partition_max_bytes=1 << 20))
    request = FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 22, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, partitions=ps)
                               for t, ps in (forgotten or {}).items()],
        rack_id="")
    return rk.call_api(conn, request, 12)


def _sent(response: Any) -> dict[int, tuple[int, int]]:
    """partition → (high watermark, bytes of records) for each partition in the response."""
    return {p.partition_index: (p.high_watermark, len(p.records or b""))
            for t in response.responses for p in t.partitions}


def test_a_session_sends_only_what_changed_and_keeps_its_epochs(broker: Any) -> None:
    topic = helpers.topic_name("sessions")
    helpers.create_topic(broker.bootstrap, topic, partitions=3)
    helpers.produce_values(broker.bootstrap, topic, [b"a"], partition=0)
    offsets = {(topic, p): 0 for p in range(3)}
    with rk.Connection.to(broker.bootstrap) as conn:
        full = _fetch(conn, 0, 0, offsets)  # epoch 0: a full fetch asking for a session
        session = full.session_id
        assert full.error_code == NONE and session != 0
        assert _sent(full) == {0: (1, _sent(full)[0][1]), 1: (0, 0), 2: (0, 0)}

        # the client names only the partition it moved: nothing new, no partition answered
        idle = _fetch(conn, session, 1, {(topic, 0): 1})
        assert (idle.error_code, idle.session_id, _sent(idle)) == (NONE, session, {})

        # partition 2 gets a record: only it is answered
        helpers.produce_values(broker.bootstrap, topic, [b"b"], partition=2)
        step = _fetch(conn, session, 2, {})
        assert step.session_id == session
        assert set(_sent(step)) == {2} and _sent(step)[2][1] > 0

        # a wrong epoch and an unknown session are errors with no partitions
        stale = _fetch(conn, session, 2, {})
        assert (stale.error_code, _sent(stale)) == (INVALID_FETCH_SESSION_EPOCH, {})
        unknown = _fetch(conn, session + 1, 1, {})
        assert (unknown.error_code, _sent(unknown)) == (FETCH_SESSION_ID_NOT_FOUND, {})

        # the one cache slot is taken: another client's full fetch gets no session
        with rk.Connection.to(broker.bootstrap) as other:
            assert _fetch(other, 0, 0, offsets).session_id == 0

        # forgotten: partition 2 leaves the session; records on it are no longer sent
        quiet = _fetch(conn, session, 3, {(topic, 2): 1}, forgotten={topic: [2]})
        assert quiet.error_code == NONE
        helpers.produce_values(broker.bootstrap, topic, [b"c"], partition=2)
        helpers.produce_values(broker.bootstrap, topic, [b"d"], partition=1)
        later = _fetch(conn, session, 4, {})
        assert set(_sent(later)) == {1}

        # epoch -1 closes the session (a sessionless full fetch); it is gone after
        closing = _fetch(conn, session, -1, offsets)
        assert closing.session_id == 0 and set(_sent(closing)) == {0, 1, 2}
        gone = _fetch(conn, session, 5, {})
        assert gone.error_code == FETCH_SESSION_ID_NOT_FOUND


def _metric(broker: Any, name: str) -> float:
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"no metric {name}")


def test_kafka_python_consumes_many_partitions_through_one_session(broker: Any) -> None:
    topic = helpers.topic_name("session-consumer")
    partitions = 24
    helpers.create_topic(broker.bootstrap, topic, partitions=partitions)
    before = _metric(broker, "strata_incremental_fetches_total")
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                      fetch_max_wait_ms=100)
    try:
        c.assign([KTopicPartition(topic, p) for p in range(partitions)])
        c.seek_to_beginning()
        got: dict[int, list[bytes]] = {}
        expected: dict[int, list[bytes]] = {}
        deadline = time.monotonic() + 60
        for round_ in range(3):  # records arrive while the session is open
            for p in range(0, partitions, 5):
                values = [b"%d-%d-%d" % (round_, p, i) for i in range(3)]
                helpers.produce_values(broker.bootstrap, topic, values, partition=p)
                expected.setdefault(p, []).extend(values)
            while sum(map(len, got.values())) < sum(map(len, expected.values())):
                assert time.monotonic() < deadline, (got, expected)
                for tp, records in c.poll(timeout_ms=200).items():
                    got.setdefault(tp.partition, []).extend(r.value for r in records)
        assert got == expected
        assert _metric(broker, "strata_fetch_sessions") == 1
        assert _metric(broker, "strata_fetch_session_partitions") == partitions
    finally:
        c.close()
    # the first round came with the full fetch that opened the session, the others incrementally
    assert _metric(broker, "strata_incremental_fetches_total") >= before + 2
