"""The consumer group protocol (KIP-848) with confluent-kafka's ``group.protocol=consumer``.

* three members split a 6-partition topic, each partition read by exactly one
  member, every record once; commits go through OffsetCommit v9 with the member
  epoch; a member that leaves hands its partitions over and, counting every
  (partition, offset) read, nothing is read twice or lost;
* a broker restart keeps the group: the members go on with their member ids and
  epochs (not fenced), committed offsets are intact, new records are read once;
* ListGroups tells consumer groups from classic ones.

The broker gives a 500 ms heartbeat interval (``group.consumer.heartbeat.interval.ms``)
so reconciliation takes a few hundred milliseconds instead of Kafka's 5 s default.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError
from confluent_kafka.admin import AdminClient

from tests.conftest import BrokerFactory, BrokerProcess
from tests.service.cli.helpers import ok, strata

from . import helpers
from .test_groups import Collector, close_all, partitions_of, produce_spread, wait_until

SETS = {"group.consumer.heartbeat.interval.ms": "500", "group.consumer.session.timeout.ms": "10000",
        "offsets.topic.num.partitions": "3"}


@pytest.fixture(scope="module")
def kip848_broker(module_start_broker: BrokerFactory) -> BrokerProcess:
    return module_start_broker(sets=SETS)


def consumer(bootstrap: str, group: str, **overrides: Any) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    conf.update(overrides)
    return Consumer(conf)


class CommittingCollector(Collector):
    """Polls round-robin, tolerating transient broker errors, committing after each batch."""

    def step(self) -> None:
        for i, c in enumerate(self.consumers):
            got = False
            for msg in c.consume(num_messages=500, timeout=0.05):
                err = msg.error()
                if err is not None:
                    if err.fatal() or err.code() not in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
                        raise AssertionError(f"consumer {i}: {err}")
                    continue
                self.seen[i].append((msg.partition(), msg.offset()))
                got = True
            if got and self.commit:
                try:
                    c.commit(asynchronous=False)
                except Exception as exc:
                    if "TRANSPORT" not in str(exc) and "COORDINATOR" not in str(exc):
                        raise


def start_group(bootstrap: str, prefix: str, partitions: int, members: int
                ) -> tuple[str, str, list[Consumer], CommittingCollector]:
    """A topic and a group of ``members`` subscribed to it, each owning its even share."""
    topic = helpers.topic_name(prefix)
    helpers.create_topic(bootstrap, topic, partitions=partitions)
    consumers = [consumer(bootstrap, f"g-{topic}") for _ in range(members)]
    for c in consumers:
        c.subscribe([topic])
    collector = CommittingCollector(consumers, commit=True)
    share = [partitions // members] * members
    wait_until(lambda: sorted(len(partitions_of(c)) for c in consumers) == share,
               f"each of {members} members to own {share[0]} partitions", step=collector.step)
    return topic, f"g-{topic}", consumers, collector


def describe(bootstrap: str, group: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(timeout=30)


def committed(bootstrap: str, group: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def test_three_members_each_partition_once_and_a_leaver_hands_over_without_duplicates(
        kip848_broker: BrokerProcess) -> None:
    b = kip848_broker.bootstrap
    topic, group, consumers, collector = start_group(b, "kip848-three", 6, 3)
    try:
        owners = [partitions_of(c) for c in consumers]
        assert set().union(*owners) == set(range(6))
        first = produce_spread(b, topic, 6, 100, tag="one")
        wait_until(lambda: len(collector.all_seen()) >= len(first), "every record", step=collector.step)
        for i, per in enumerate(collector.seen):
            assert {p for p, _ in per} == owners[i]  # each partition read by its one owner only
        assert Counter(collector.all_seen()) == Counter(first)  # once each

        desc = describe(b, group)
        assert desc.state.name == "STABLE" and len(desc.members) == 3
        assert desc.partition_assignor == "uniform"
        assert committed(b, group) == dict.fromkeys(range(6), 100)
        shows_the_group_everywhere(kip848_broker, group, topic, consumers)

        leaver = consumers.pop()
        leaver.close()  # epoch -1: its two partitions go to the others
        collector.consumers = consumers
        wait_until(lambda: sorted(len(partitions_of(c)) for c in consumers) == [3, 3],
                   "the leaver's partitions to move", step=collector.step)
        second = produce_spread(b, topic, 6, 50, tag="two")
        wait_until(lambda: len(collector.all_seen()) >= len(first) + len(second), "the second batch",
                   step=collector.step)
        for _ in range(5):
            collector.step()  # nothing more may arrive
        counts = Counter(collector.all_seen())
        assert counts == Counter(first | second)  # every (partition, offset) exactly once
        assert {p for c in consumers for p in partitions_of(c)} == set(range(6))
        assert committed(b, group) == dict.fromkeys(range(6), 150)
    finally:
        close_all(consumers)


def shows_the_group_everywhere(broker: BrokerProcess, group: str, topic: str,
                                consumers: list[Consumer]) -> None:
    """`strata groups describe|list` and the admin API show the consumer-protocol group."""
    out = ok(strata("groups", "describe", group, bootstrap=broker.bootstrap)).stdout
    assert out.splitlines()[0] == f"Group {group}: state Stable, 3 member(s), assignor uniform, protocol consumer"
    rows = [line.split() for line in out.splitlines()[2:]]
    assert sorted(int(r[2]) for r in rows) == list(range(6))
    assert {r[5] for r in rows} == {"0"}  # lag
    listed = ok(strata("groups", "list", "--state", "--type", bootstrap=broker.bootstrap)).stdout
    assert f"{group}\tStable\tconsumer" in listed.splitlines()
    with urllib.request.urlopen(f"{broker.admin_url}/v1/groups/{group}", timeout=30) as resp:
        view = json.load(resp)
    assert (view["type"], view["state"], view["lag"]) == ("consumer", "Stable", 0)
    assigned = sorted(p for m in view["members"] for tp in m["assignment"] for p in tp["partitions"])
    assert assigned == list(range(6))
    assert {m["member_id"] for m in view["members"]} == {c.memberid() for c in consumers}
    with urllib.request.urlopen(f"{broker.admin_url}/v1/groups", timeout=30) as resp:
        listing = {g["group_id"]: g for g in json.load(resp)["groups"]}
    assert listing[group]["type"] == "consumer"


def test_broker_restart_keeps_the_group_its_member_epochs_and_offsets(
        start_broker: BrokerFactory) -> None:
    broker = start_broker(sets=SETS)
    b = broker.bootstrap
    topic, group, consumers, collector = start_group(b, "kip848-restart", 4, 2)
    try:
        first = produce_spread(b, topic, 4, 50, tag="before")
        wait_until(lambda: len(collector.all_seen()) >= len(first), "the first batch", step=collector.step)
        wait_until(lambda: committed(b, group) == dict.fromkeys(range(4), 50), "the commits",
                   step=collector.step)
        before = {m.member_id for m in describe(b, group).members}

        broker.restart()

        after = describe(b, group)
        assert {m.member_id for m in after.members} == before  # the group came back from the log
        assert committed(b, group) == dict.fromkeys(range(4), 50)
        second = produce_spread(b, topic, 4, 25, tag="after")
        wait_until(lambda: len(collector.all_seen()) >= len(first) + len(second), "records after the restart",
                   step=collector.step)
        for _ in range(5):
            collector.step()
        assert Counter(collector.all_seen()) == Counter(first | second)
        # The members kept heartbeating with their epochs: same members, not fenced and rejoined.
        wait_until(lambda: describe(b, group).state.name == "STABLE", "a stable group", step=collector.step)
        assert {m.member_id for m in describe(b, group).members} == before
        assert "fenced" not in broker.log_text().split("start #2")[-1]
    finally:
        close_all(consumers)


def test_a_member_choosing_the_range_assignor_gets_kafkas_range_assignment(
        kip848_broker: BrokerProcess) -> None:
    """``group.remote.assignor=range``: two members of topics of 5 and 3 partitions get
    Kafka's RangeAssignor result: per topic, contiguous ranges in member id order, the
    extra partitions to the first (uniform would balance the 8 partitions 4 and 4)."""
    b = kip848_broker.bootstrap
    five, three = helpers.topic_name("range-five"), helpers.topic_name("range-three")
    helpers.create_topic(b, five, partitions=5)
    helpers.create_topic(b, three, partitions=3)
    group = f"g-{five}"
    members = [consumer(b, group, **{"group.remote.assignor": "range"}) for _ in range(2)]
    seen: dict[int, set[tuple[str, int]]] = {0: set(), 1: set()}

    def poll() -> None:
        for i, c in enumerate(members):
            for msg in c.consume(num_messages=500, timeout=0.05):
                if msg.error() is None:
                    seen[i].add((msg.topic(), msg.partition()))

    try:
        for c in members:
            c.subscribe([five, three])
        want: dict[int, set[tuple[str, int]]] = {}

        def assigned_by_range() -> bool:
            if not all(c.memberid() for c in members):
                return False
            first, second = sorted(range(2), key=lambda i: members[i].memberid())
            want.update({first: {(five, p) for p in (0, 1, 2)} | {(three, 0), (three, 1)},
                         second: {(five, 3), (five, 4), (three, 2)}})
            return all({(tp.topic, tp.partition) for tp in members[i].assignment()} == want[i] for i in range(2))

        wait_until(assigned_by_range, "Kafka's range assignment", step=poll)
        desc = describe(b, group)
        assert desc.partition_assignor == "range"
        by_member = {m.member_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
                     for m in desc.members}
        assert by_member == {members[i].memberid(): want[i] for i in range(2)}
        for topic, partitions in ((five, 5), (three, 3)):
            produce_spread(b, topic, partitions, 5)
        wait_until(lambda: seen[0] | seen[1] == want[0] | want[1], "a record from every partition", step=poll)
        assert seen == want  # each member read exactly its range
    finally:
        close_all(members)


def test_list_groups_tells_consumer_groups_from_classic_ones(kip848_broker: BrokerProcess) -> None:
    from confluent_kafka import ConsumerGroupType

    b = kip848_broker.bootstrap
    topic = helpers.topic_name("kip848-list")
    helpers.create_topic(b, topic, partitions=1)
    modern = consumer(b, f"modern-{topic}")
    try:
        modern.subscribe([topic])
        wait_until(lambda: bool(modern.consume(timeout=0.1) is not None and partitions_of(modern)),
                   "an assignment")
        admin = AdminClient({"bootstrap.servers": b})
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(timeout=30)
        assert f"modern-{topic}" in {g.group_id for g in listed.valid}
        assert all(g.type == ConsumerGroupType.CONSUMER for g in listed.valid)
        classic = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(timeout=30)
        assert f"modern-{topic}" not in {g.group_id for g in classic.valid}
    finally:
        modern.close()


def test_regex_subscription_follows_new_topics_and_new_partitions(kip848_broker: BrokerProcess) -> None:
    """librdkafka sends ``^`` patterns as SubscribedTopicRegex; the broker resolves them and
    gives out topics created later and partitions added later (new target assignments)."""
    from confluent_kafka.admin import NewPartitions

    b = kip848_broker.bootstrap
    prefix = helpers.topic_name("kip848-rx")
    helpers.create_topic(b, f"{prefix}-a", partitions=2)
    c = consumer(b, f"g-{prefix}")
    try:
        c.subscribe([f"^{prefix}-.*"])

        def owned() -> set[tuple[str, int]]:
            c.poll(0.05)
            return {(tp.topic, tp.partition) for tp in c.assignment()}

        wait_until(lambda: owned() == {(f"{prefix}-a", 0), (f"{prefix}-a", 1)}, "the regex's topic")
        helpers.create_topic(b, f"{prefix}-b", partitions=1)
        helpers.create_topic(b, f"other-{prefix}", partitions=1)  # does not match
        wait_until(lambda: (f"{prefix}-b", 0) in owned(), "the topic created later")
        admin = AdminClient({"bootstrap.servers": b})
        admin.create_partitions([NewPartitions(f"{prefix}-a", 3)])[f"{prefix}-a"].result(timeout=30)
        wait_until(lambda: owned() == {(f"{prefix}-a", 0), (f"{prefix}-a", 1), (f"{prefix}-a", 2),
                                       (f"{prefix}-b", 0)}, "the partition added later")
        member = describe(b, f"g-{prefix}").members[0]
        assert member.target_assignment is not None
    finally:
        c.close()
