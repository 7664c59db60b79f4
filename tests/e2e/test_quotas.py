"""Client quotas on a real broker: a producer over its byte-rate quota is told
throttle_time_ms > 0 and, honouring it (librdkafka does, KIP-219), settles at the quota;
`strata quotas` sets and shows them (kafka-configs.sh)."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from confluent_kafka import Producer
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
