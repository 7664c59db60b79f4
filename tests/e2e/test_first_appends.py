"""The first records a partition takes at a new leader epoch do not stall the event loop
(ADR 0030).

Each partition's first append at an epoch writes its ``leader-epoch-checkpoint``; the write
and its two fsyncs (the file, the directory's rename) ran on the loop. A produce to a new
topic is such a first append on every partition, and so is the first produce after an
election. kafka-python (as the Java client, aiokafka and franz-go) puts every partition a
broker leads into one Produce request, so the loop ran all those fsyncs back to back: for
300 partitions on this machine's disk, about a second in which no other client was served.
Now the fsyncs run on the flush thread, and the request's partitions are appended a few
dozen per turn of the loop (``service.handlers.produce.PARTITIONS_PER_TURN``).

The broker's own loop-lag histogram says how late its 5 ms probe ran (as
``test_loop_lag.py`` reads it). The data directory is on the real disk, not in memory:
the fsyncs' cost is the subject here.
"""

from __future__ import annotations

from pathlib import Path

from kafka import KafkaProducer

from tests.conftest import BrokerProcess, free_port
from tests.e2e.helpers import CLIENT_TIMEOUT_S, admin, consume, wait_for_topic, wait_until
from tests.e2e.test_loop_lag import (
    PROBE,
    STARVED_LIMIT_S,
    Starvation,
    _lag,
    _settled,
    _stalls_logged,
)

PARTITIONS = 600


def test_the_first_produce_to_600_new_partitions_does_not_stall_the_loop(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", free_port(), sets=PROBE, log_path=tmp_path / "broker.log")
    try:
        broker.start()
        _first_produce(broker)
    except BaseException:
        print(broker.log_tail())
        raise
    finally:
        broker.kill()


def _first_produce(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import NewTopic

    client = admin(broker.bootstrap)
    created = client.create_topics([NewTopic("wide", num_partitions=PARTITIONS, replication_factor=1)],
                                   request_timeout=90)
    created["wide"].result(timeout=95)
    wait_for_topic(broker.bootstrap, "wide", PARTITIONS, timeout=90)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=500, acks=1,
                             max_in_flight_requests_per_connection=1)
    try:
        producer.partitions_for("wide")  # metadata first: the records below go in one request
        before = _settled(broker)  # creating the partitions has its own stalls (not this test's)
        log_from = broker.log_path.stat().st_size
        with Starvation() as machine:
            futures = [producer.send("wide", value=b"v%d" % p, partition=p) for p in range(PARTITIONS)]
            producer.flush(timeout=CLIENT_TIMEOUT_S)
            offsets = [f.get(timeout=CLIENT_TIMEOUT_S).offset for f in futures]
    finally:
        producer.close(timeout=CLIENT_TIMEOUT_S)
    assert offsets == [0] * PARTITIONS
    after = _lag(broker)
    delta = {bound: after[bound] - before[bound] for bound in after}
    # the bound is loose: a collection of the oldest generation alone held a CI run's loop 96 ms
    # (tests/service/handlers/test_produce_turns.py counts the turns themselves)
    too_late = delta[float("inf")] - delta[STARVED_LIMIT_S]
    stalls = _stalls_logged(broker, log_from)
    print(f"loop lag over the produce: {delta}; {machine}; stalls the broker logged:\n{stalls}")
    assert delta[float("inf")] > 0, "the probe did not run"
    assert too_late == 0, f"{too_late} probes ran over {STARVED_LIMIT_S * 1000:g} ms late ({machine}):\n{stalls}"
    # every record is there, each at offset 0 of its partition, and each checkpoint names its epoch
    got = {m.partition(): m.value() for m in consume(broker.bootstrap, "wide", range(PARTITIONS), PARTITIONS)}
    assert got == {p: b"v%d" % p for p in range(PARTITIONS)}
    logs = broker.data_dir / "logs"

    def checkpoints() -> set[str]:  # written by the flush thread, maybe still at it
        files = [logs / f"wide-{p}" / "leader-epoch-checkpoint" for p in range(PARTITIONS)]
        return {f.read_text() if f.exists() else "" for f in files}

    wait_until(lambda: checkpoints() == {"0\n1\n0 0\n"},  # version 0, one entry: epoch 0 at 0
               "every partition's leader-epoch checkpoint says epoch 0 from offset 0", timeout=60)
