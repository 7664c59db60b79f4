"""Client quotas on a real broker: a producer over its byte-rate quota is told
throttle_time_ms > 0 and, honouring it (librdkafka does, KIP-219), settles at the quota;
the request-time quota counts a request's own time and not its long poll, and is in
the Produce and Fetch answers; `strata quotas` sets and shows them (kafka-configs.sh)."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from confluent_kafka import Producer
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import ProduceRequest

from tests.conftest import REPO_ROOT, subprocess_env
from tests.e2e import rawkafka as rk
from tests.e2e.helpers import create_topic, topic_name

QUOTA = 200 * 1024  # bytes per second


def strata(broker: Any, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "service", "quotas", *args, "-b", broker.bootstrap], cwd=REPO_ROOT,
                          env=subprocess_env(), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done
    return done.stdout


def test_a_producer_over_its_quota_is_throttled_to_it(start_broker: Any) -> None:
    broker = start_broker(sets={"quota.window.num": "4", "quota.window.size.seconds": "1"})
    strata(broker, "--alter", "--entity-type", "clients", "--entity-name", "throttled",
           "--add-config", f"producer_byte_rate={QUOTA}")
    strata(broker, "--alter", "--entity-type", "users", "--entity-default", "--entity-type", "clients",
           "--entity-name", "other", "--add-config", "consumer_byte_rate=1000,request_percentage=50")
    listing = strata(broker, "--describe")
    assert f"client-id=throttled\tproducer_byte_rate={QUOTA}" in listing
    assert "client-id=other, user=<default>\tconsumer_byte_rate=1000, request_percentage=50" in listing
    topic = topic_name("quota")
    create_topic(broker.bootstrap, topic)

    batch = rk.record_batch([b"x" * 1000] * 200)  # ~200 KB a request
    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    with rk.Connection.to(broker.bootstrap) as conn:
        throttles = [rk.call_api(conn, request, 7, client_id="throttled").throttle_time_ms for _ in range(4)]
    assert throttles[0] == 0 and max(throttles) > 0, throttles  # over the quota: told to wait
    time.sleep(4.5)  # the window forgets that burst

    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "throttled", "linger.ms": 20,
                         "batch.size": 65536, "queue.buffering.max.kbytes": 1024})
    delivered: list[tuple[float, int]] = []
    value = b"v" * 1000
    started = time.monotonic()
    while time.monotonic() - started < 14:
        try:
            producer.produce(topic, value, partition=0,
                             on_delivery=lambda err, msg: delivered.append((time.monotonic(), len(msg.value())))
                             if err is None else None)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.purge(in_queue=True)  # what waits in the client's queue is not part of the measure
    producer.flush(10)
    # the rate once the first window's burst allowance is spent: 5 s to 14 s
    window = [size for at, size in delivered if started + 5 <= at < started + 14]
    rate = sum(window) / 9
    assert abs(rate - QUOTA) / QUOTA < 0.10, (rate, QUOTA)


def _produce(topic: str) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=1, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(
                index=0, records=rk.record_batch([b"x" * 100] * 100))])])


def _long_poll(topic: str, offset: int) -> FetchRequest:
    return FetchRequest(
        replica_id=-1, max_wait_ms=400, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, rack_id="",
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[])


def test_the_request_quota_counts_a_requests_own_time_not_its_long_poll(start_broker: Any) -> None:
    broker = start_broker(sets={"quota.window.num": "4", "quota.window.size.seconds": "1"})
    # 5% of a thread: 50 ms of request time per second, 150 ms over the 3 s measured; the
    # polls' 2 s of waiting, were it counted, would be 13 times that
    strata(broker, "--alter", "--entity-type", "clients", "--entity-name", "poller",
           "--add-config", "request_percentage=5")
    # 0.001%: 0.01 ms per second, which any produce exceeds
    strata(broker, "--alter", "--entity-type", "clients", "--entity-name", "busy",
           "--add-config", "request_percentage=0.001")
    topic = topic_name("request-quota")
    create_topic(broker.bootstrap, topic)

    with rk.Connection.to(broker.bootstrap) as conn:
        # The broker loads a request version's schema on its first use (10-20 ms on the
        # loop); a Fetch under another client id pays for it, so what follows is the polls'
        # own time. A long poll's time on the loop is well under 1 ms.
        rk.call_api(conn, _long_poll(topic, 0), 12, client_id="warm-up")
        started = time.monotonic()
        polls = [rk.call_api(conn, _long_poll(topic, 0), 12, client_id="poller") for _ in range(5)]
        took = time.monotonic() - started
    # five long polls of 400 ms on an empty partition: 2 s waited, a few ms of work
    assert took >= 1.9, took
    assert [p.error_code for p in polls] == [0] * 5
    assert [p.throttle_time_ms for p in polls] == [0] * 5, [p.throttle_time_ms for p in polls]

    with rk.Connection.to(broker.bootstrap) as conn:
        answers = [rk.call_api(conn, _produce(topic), 9, client_id="busy") for _ in range(2)]
        assert all(p.error_code == 0 for a in answers for t in a.responses for p in t.partition_responses)
        # over the request quota: the Produce answer says how long to wait, as Kafka's does
        assert max(a.throttle_time_ms for a in answers) > 0, [a.throttle_time_ms for a in answers]
        fetched = rk.call_api(conn, _long_poll(topic, 0), 12, client_id="busy")
    assert fetched.throttle_time_ms > 0
    records = [p.records for t in fetched.responses for p in t.partitions]
    assert records and records[0], "throttled, but answered with the records"
