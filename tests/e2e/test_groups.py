"""Consumer groups with real clients: partitions shared out, rebalances, committed offsets.

* three confluent-kafka consumers split a 6-partition topic and receive every
  record exactly once, each partition owned by one member;
* a member that leaves, or is SIGKILLed (a subprocess consumer) and stops
  heartbeating, has its partitions moved to the others, and with commits after
  processing nothing is lost;
* kafka-python and aiokafka groups behave the same, and two groups each get
  every record;
* committed offsets survive ``kill -9`` of the broker;
* static membership: a restart within the session timeout gets the same
  partitions without a rebalance, and a duplicate instance id is fenced.

The broker runs with ``group.initial.rebalance.delay.ms=0``; sessions are 6 s
(the broker's minimum, as in Kafka).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from tests.conftest import BrokerFactory, BrokerProcess, subprocess_env

from . import helpers

SESSION_MS = 6000
GROUP_SETS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}
WAIT_S = 60.0

Seen = tuple[int, int]  # (partition, offset)


@pytest.fixture(scope="module")
def group_broker(module_start_broker: BrokerFactory) -> BrokerProcess:
    return module_start_broker(sets=GROUP_SETS)


def confluent_consumer(bootstrap: str, group: str, **overrides: Any) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 500, "enable.partition.eof": False}
    conf.update(overrides)
    return Consumer(conf)


def produce_spread(bootstrap: str, topic: str, partitions: int, per_partition: int,
                   tag: str = "r") -> set[Seen]:
    """``per_partition`` records into each partition; the (partition, offset)s written."""
    written: set[Seen] = set()
    for p in range(partitions):
        offsets = helpers.produce_values(
            bootstrap, topic, [f"{tag}-{p}-{i}".encode() for i in range(per_partition)], partition=p)
        written |= {(p, o) for o in offsets}
    return written


def wait_until(check: Callable[[], bool], what: str, timeout: float = WAIT_S,
               step: Callable[[], None] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        if step is not None:
            step()
        else:
            time.sleep(0.05)


def partitions_of(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def split_evenly(assignments: list[set[int]], partitions: int) -> bool:
    """Every member owns partitions/len of them and together they own each exactly once."""
    share = partitions // len(assignments)
    union = set().union(*assignments)
    return (all(len(a) == share for a in assignments) and len(union) == partitions
            and sum(len(a) for a in assignments) == partitions)


class Collector:
    """Polls confluent consumers round-robin, recording who got which record."""

    def __init__(self, consumers: list[Consumer], commit: bool = False) -> None:
        self.consumers = consumers
        self.commit = commit
        self.seen: list[list[Seen]] = [[] for _ in consumers]

    def step(self) -> None:
        for i, c in enumerate(self.consumers):
            for msg in c.consume(num_messages=500, timeout=0.05):
                err = msg.error()
                if err is not None:
                    raise AssertionError(f"consumer {i}: {err}")
                self.seen[i].append((msg.partition(), msg.offset()))
                if self.commit:
                    c.commit(message=msg, asynchronous=False)

    def all_seen(self) -> list[Seen]:
        return [s for per in self.seen for s in per]


def close_all(consumers: list[Any]) -> None:
    for c in consumers:
        with contextlib.suppress(Exception):  # teardown reaches every consumer
            c.close()


# --------------------------------------------------------------------------- confluent-kafka


def test_three_consumers_share_six_partitions_and_get_every_record_once(
        group_broker: BrokerProcess) -> None:
    b = group_broker.bootstrap
    topic = helpers.topic_name("groups-three")
    helpers.create_topic(b, topic, partitions=6)
    consumers = [confluent_consumer(b, f"three-{topic}") for _ in range(3)]
    try:
        for c in consumers:
            c.subscribe([topic])
        collector = Collector(consumers)
        wait_until(lambda: split_evenly([partitions_of(c) for c in consumers], 6),
                   "a stable 3-way split", step=collector.step)
        owners = [partitions_of(c) for c in consumers]
        written = produce_spread(b, topic, 6, 100)
        wait_until(lambda: len(collector.all_seen()) >= len(written), "every record",
                   step=collector.step)
        for _ in range(5):
            collector.step()  # nothing more may arrive
        seen = collector.all_seen()
        assert len(seen) == len(written) and set(seen) == written  # exactly once
        for i, per in enumerate(collector.seen):
            assert {p for p, _ in per} == owners[i]  # each partition read by its one owner
        assert [partitions_of(c) for c in consumers] == owners  # no rebalance happened
        group = describe(b, f"three-{topic}")
        assert group.state.name == "STABLE"
        assert len(group.members) == 3
        assert sorted(len(m.assignment.topic_partitions) for m in group.members) == [2, 2, 2]
    finally:
        close_all(consumers)


_SUBPROCESS_CONSUMER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import Consumer
    bootstrap, group, topic = sys.argv[1:4]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    c.subscribe([topic])
    while True:
        msg = c.poll(0.2)
        if msg is None or msg.error():
            continue
        time.sleep(0.02)                      # "processing"
        print(f"{msg.partition()} {msg.offset()}", flush=True)
        c.commit(message=msg, asynchronous=False)   # then commit
""")


def test_member_killed_or_leaving_moves_its_partitions_and_loses_nothing(
        group_broker: BrokerProcess, tmp_path: Path) -> None:
    b = group_broker.bootstrap
    topic = helpers.topic_name("groups-kill")
    group = f"kill-{topic}"
    helpers.create_topic(b, topic, partitions=6)
    written = produce_spread(b, topic, 6, 150)
    out_path = tmp_path / "killed.out"
    with open(out_path, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", _SUBPROCESS_CONSUMER, b, group, topic],
                                stdout=out, stderr=subprocess.STDOUT, env=subprocess_env())
    consumers: list[Consumer] = []
    try:
        wait_until(lambda: len(out_path.read_text().splitlines()) >= 20,
                   "the subprocess consumer to process records")
        consumers = [confluent_consumer(b, group) for _ in range(2)]
        for c in consumers:
            c.subscribe([topic])
        collector = Collector(consumers, commit=True)
        wait_until(lambda: sum(len(partitions_of(c)) for c in consumers) == 4
                   and all(partitions_of(c) for c in consumers),
                   "two of the three members to own partitions", step=collector.step)
        proc.send_signal(signal.SIGKILL)  # no LeaveGroup: its session must expire
        proc.wait()
        killed_seen = {tuple(map(int, line.split())) for line in out_path.read_text().splitlines()
                       if line.strip() and line.split()[0].isdigit()}
        assert killed_seen
        wait_until(lambda: sorted(len(partitions_of(c)) for c in consumers) == [3, 3],
                   "the killed member's partitions to move", step=collector.step)

        # One of the survivors leaves cleanly: the last one takes everything.
        leaver = consumers.pop()
        leaver.close()
        wait_until(lambda: partitions_of(consumers[0]) == set(range(6)),
                   "the leaver's partitions to move", step=collector.step)
        collector.consumers = consumers
        wait_until(lambda: set(collector.all_seen()) | killed_seen >= written,
                   "every record", step=collector.step)
        assert set(collector.all_seen()) | killed_seen == written  # at-least-once: nothing lost
    finally:
        if proc.poll() is None:
            proc.kill()
        close_all(consumers)


# --------------------------------------------------------------------------- kafka-python


def test_kafka_python_group_shares_partitions_and_a_second_group_gets_everything(
        group_broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer

    b = group_broker.bootstrap
    topic = helpers.topic_name("groups-kafka-python")
    helpers.create_topic(b, topic, partitions=4)
    group = f"kp-{topic}"
    stop = threading.Event()
    seen: list[list[Seen]] = [[], []]
    owned: list[set[int]] = [set(), set()]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            c = KafkaConsumer(topic, bootstrap_servers=b, group_id=group,
                              auto_offset_reset="earliest", enable_auto_commit=False,
                              session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
            try:
                while not stop.is_set():
                    for tp, records in c.poll(timeout_ms=1000).items():
                        seen[i].extend((tp.partition, r.offset) for r in records)
                    owned[i] = {tp.partition for tp in c.assignment()}
                    if seen[i]:
                        c.commit()
            finally:
                c.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: errors != [] or split_evenly(owned, 4), "a 2-way kafka-python split")
        assert not errors, errors
        owners = [set(o) for o in owned]
        written = produce_spread(b, topic, 4, 100)
        wait_until(lambda: errors != [] or len(seen[0]) + len(seen[1]) >= len(written),
                   "every record")
        assert not errors, errors
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert sorted(seen[0] + seen[1]) == sorted(written)
    for i in range(2):
        assert {p for p, _ in seen[i]} == owners[i]
    assert committed_offsets(b, group, topic, 4) == {p: 100 for p in range(4)}

    # A second group (aiokafka this time) reads the same topic from the start.
    async def aiokafka_group() -> list[list[Seen]]:
        return await _aiokafka_group(b, topic, f"aio-{topic}", members=2, partitions=4,
                                     expected=len(written))

    aio_seen = asyncio.run(aiokafka_group())
    assert sorted(aio_seen[0] + aio_seen[1]) == sorted(written)
    assert committed_offsets(b, f"aio-{topic}", topic, 4) == {p: 100 for p in range(4)}


# --------------------------------------------------------------------------- aiokafka


async def _aiokafka_group(bootstrap: str, topic: str, group: str, *, members: int, partitions: int,
                          expected: int, produce: Callable[[], Any] | None = None
                          ) -> list[list[Seen]]:
    from aiokafka import AIOKafkaConsumer

    consumers = [AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                  auto_offset_reset="earliest", enable_auto_commit=False,
                                  session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
                 for _ in range(members)]
    seen: list[list[Seen]] = [[] for _ in consumers]
    owners: list[set[int]] = []
    try:
        for c in consumers:
            await c.start()

        async def poll_all() -> None:
            for i, c in enumerate(consumers):
                batches = await c.getmany(timeout_ms=50)
                for tp, records in batches.items():
                    seen[i].extend((tp.partition, r.offset) for r in records)
                if batches:
                    await c.commit()

        deadline = time.monotonic() + WAIT_S
        while not split_evenly([{tp.partition for tp in c.assignment()} for c in consumers],
                               partitions):
            assert time.monotonic() < deadline, "no even aiokafka split"
            await poll_all()
        owners = [{tp.partition for tp in c.assignment()} for c in consumers]
        if produce is not None:
            await asyncio.to_thread(produce)
        while sum(len(s) for s in seen) < expected:
            assert time.monotonic() < deadline, f"aiokafka group got {sum(map(len, seen))} records"
            await poll_all()
    finally:
        for c in consumers:
            await c.stop()
    for i, per in enumerate(seen):
        assert {p for p, _ in per} <= owners[i]
    return seen


def test_aiokafka_group_shares_partitions_and_gets_every_record_once(
        group_broker: BrokerProcess) -> None:
    b = group_broker.bootstrap
    topic = helpers.topic_name("groups-aiokafka")
    helpers.create_topic(b, topic, partitions=6)
    written: set[Seen] = set()

    def produce() -> None:
        written.update(produce_spread(b, topic, 6, 50))

    seen = asyncio.run(_aiokafka_group(b, topic, f"aio-{topic}", members=3, partitions=6,
                                       expected=300, produce=produce))
    flat = [s for per in seen for s in per]
    assert len(flat) == len(written) and set(flat) == written


# --------------------------------------------------------------------------- persistence


def test_committed_offsets_survive_kill_9_of_the_broker(start_broker: BrokerFactory) -> None:
    broker = start_broker(sets=GROUP_SETS)
    b = broker.bootstrap
    topic = helpers.topic_name("groups-crash")
    group = f"crash-{topic}"
    helpers.create_topic(b, topic, partitions=3)
    written = produce_spread(b, topic, 3, 100)

    first = confluent_consumer(b, group)
    first.subscribe([topic])
    got: list[Seen] = []
    positions: dict[int, int] = {}
    try:
        wait_until(lambda: len(got) >= 120, "120 records", step=lambda: _take(first, got))
        for p, o in got:
            positions[p] = max(positions.get(p, 0), o + 1)
        first.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()],
                     asynchronous=False)
    finally:
        first.close()
    assert committed_offsets(b, group, topic, 3) == {p: positions.get(p, OFFSET_INVALID) for p in range(3)}

    broker.restart(clean=False)  # SIGKILL, then start on the same data dir
    assert committed_offsets(b, group, topic, 3) == {p: positions.get(p, OFFSET_INVALID) for p in range(3)}

    second = confluent_consumer(b, group)
    second.subscribe([topic])
    rest: list[Seen] = []
    expected_rest = {(p, o) for p, o in written if o >= positions.get(p, 0)}
    try:
        wait_until(lambda: len(rest) >= len(expected_rest), "the remaining records",
                   step=lambda: _take(second, rest))
        for _ in range(3):
            _take(second, rest)
    finally:
        second.close()
    assert sorted(rest) == sorted(expected_rest)  # continues exactly where the commit left off


def _take(consumer: Consumer, into: list[Seen]) -> None:
    for msg in consumer.consume(num_messages=50, timeout=0.1):
        assert msg.error() is None, msg.error()
        into.append((msg.partition(), msg.offset()))


def describe(bootstrap: str, group: str) -> Any:
    client = AdminClient({"bootstrap.servers": bootstrap})
    return client.describe_consumer_groups([group])[group].result(timeout=20)


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    client = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = client.list_consumer_group_offsets([request])[group].result(timeout=20)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


# --------------------------------------------------------------------------- static membership


def test_static_member_restart_keeps_partitions_without_rebalance_and_duplicate_is_fenced(
        group_broker: BrokerProcess) -> None:
    b = group_broker.bootstrap
    topic = helpers.topic_name("groups-static")
    group = f"static-{topic}"
    helpers.create_topic(b, topic, partitions=4)
    rebalances: dict[str, int] = defaultdict(int)

    def static(instance: str) -> Consumer:
        c = confluent_consumer(b, group, **{"group.instance.id": instance,
                                            "session.timeout.ms": 30_000})

        def counted(_c: Any, _parts: Any) -> None:
            rebalances[instance] += 1

        c.subscribe([topic], on_assign=counted, on_revoke=counted)
        return c

    a, other = static("a"), static("b")
    consumers = [a, other]
    try:
        collector = Collector(consumers)
        wait_until(lambda: split_evenly([partitions_of(a), partitions_of(other)], 4),
                   "a 2-way static split", step=collector.step)
        a_parts, b_parts = partitions_of(a), partitions_of(other)
        before = describe(b, group)
        a_member = next(m for m in before.members if m.group_instance_id == "a")
        b_rebalances = rebalances["b"]

        a.close()  # a static member does not leave the group on close
        restarted = static("a")
        consumers[0] = restarted
        collector.consumers = consumers
        wait_until(lambda: partitions_of(restarted) == a_parts, "the restarted member's partitions",
                   step=collector.step)
        for _ in range(10):
            collector.step()
        assert partitions_of(other) == b_parts
        assert rebalances["b"] == b_rebalances  # the other member saw no rebalance
        after = describe(b, group)
        assert after.state.name == "STABLE"
        a_after = next(m for m in after.members if m.group_instance_id == "a")
        assert a_after.member_id != a_member.member_id
        assert {tp.partition for tp in a_after.assignment.topic_partitions} == a_parts

        # A second live consumer with the same instance id fences the first one.
        duplicate = static("a")
        consumers.append(duplicate)
        fenced: list[KafkaError] = []

        def step() -> None:
            for c in (restarted, duplicate, other):
                try:
                    for msg in c.consume(num_messages=10, timeout=0.05):
                        if msg.error() is not None and c is restarted:
                            fenced.append(msg.error())
                except Exception as exc:  # noqa: BLE001 - librdkafka raises the fatal error
                    if c is restarted:
                        fenced.append(exc.args[0] if exc.args else exc)

        wait_until(lambda: bool(fenced), "the duplicate instance to be fenced", step=step)
        err = fenced[0]
        assert err.code() == KafkaError._FATAL or err.code() == KafkaError.FENCED_INSTANCE_ID, err
        assert "fenced" in err.str().lower() or "FENCED_INSTANCE_ID" in err.str(), err.str()
    finally:
        close_all(consumers)


@pytest.fixture(autouse=True)
def _no_proxy_env() -> None:
    os.environ.pop("STRATA_BOOTSTRAP", None)
