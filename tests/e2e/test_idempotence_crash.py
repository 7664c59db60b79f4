"""kill -9 of the broker during idempotent produce with retries: after the restarts no record
is stored twice and no acknowledged record is missing.

The client reaches the broker through a proxy that also cuts its connections at random
moments between the kills, so requests the broker has written lose their responses and
are retried (without idempotence this test finds the duplicates)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any

from confluent_kafka import KafkaError, Producer

from tests.conftest import BrokerFactory, free_port
from tests.e2e import helpers
from tests.e2e.tcp_proxy import CuttingProxy

RECORDS = 30_000
KILLS = 3
CUTS_PER_KILL = 4


def test_kill_9_during_idempotent_produce_loses_no_ack_and_duplicates_nothing(
    start_broker: BrokerFactory,
) -> None:
    proxy_port = free_port()
    broker = start_broker(  # small segments: rolls, so snapshots and replays after the kills
        sets={"log.segment.bytes": "65536"}, args=["--advertise", f"127.0.0.1:{proxy_port}"])
    proxy = CuttingProxy(broker.port, proxy_port)
    topic = helpers.topic_name("idem-crash")
    helpers.create_topic(broker.bootstrap, topic)
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)

    producer = Producer({
        "bootstrap.servers": proxy.address, "enable.idempotence": True,
        "linger.ms": 0, "batch.num.messages": 50, "message.timeout.ms": 120_000,
        "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 100,
    })
    acked: list[bytes] = []
    failed: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            failed.append(err)

    sent = threading.Event()
    kills: list[float] = []

    def killer() -> None:
        for _ in range(KILLS):
            for _ in range(CUTS_PER_KILL):
                time.sleep(rng.uniform(0.05, 0.3))
                proxy.cut()
            if sent.is_set():
                return
            broker.kill()
            kills.append(time.monotonic())
            time.sleep(rng.uniform(0.0, 0.3))
            broker.start()

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, value=b"r%06d" % i, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 100 == 0:
            producer.poll(0)
            time.sleep(0.015)  # spread the produce (about 5 s) over the cuts and kills
    thread.join(timeout=30)
    sent.set()
    try:
        assert producer.flush(120) == 0, f"records still in flight (seed {seed})"
        _check(broker.bootstrap, topic, acked, failed, kills, seed)
    finally:
        proxy.close()


def _check(bootstrap: str, topic: str, acked: list[bytes], failed: list[Any], kills: list[float],
           seed: int) -> None:
    fatal = [e for e in failed if isinstance(e, KafkaError) and e.fatal()]
    assert not fatal, f"fatal producer errors {fatal[:3]} (seed {seed})"
    assert kills, "the broker was never killed"

    low, high = helpers.watermarks(bootstrap, topic)
    stored = [m.value() for m in helpers.consume(bootstrap, topic, [0], high - low)]
    counts = Counter(stored)
    duplicates = [v for v, n in counts.items() if n > 1]
    assert not duplicates, f"{len(duplicates)} records stored twice, e.g. {duplicates[:3]} (seed {seed})"
    missing = set(acked) - set(stored)
    assert not missing, f"{len(missing)} acknowledged records missing (seed {seed})"
    assert len(acked) == RECORDS - len(failed)
    # records stay in produce order (idempotence keeps the order across retries)
    assert stored == sorted(stored), f"records out of order (seed {seed})"
