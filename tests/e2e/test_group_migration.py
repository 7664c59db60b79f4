"""Kafka 4's online migration with real clients: a rolling upgrade of a 3-member group from
confluent-kafka classic members (librdkafka's default protocol) to ``group.protocol=consumer``
members, one member at a time, on the broker's default ``group.consumer.migration.policy``
(bidirectional); and back, when the last consumer-protocol member leaves.

Every member commits each record it consumes (explicit offsets, synchronously) before it polls
again. Nothing may be read twice once its commit succeeded, and nothing may be left unread.
"""

from __future__ import annotations

from collections import Counter

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.conftest import BrokerFactory, BrokerProcess

from . import helpers
from .test_groups import close_all, partitions_of, produce_spread, wait_until

PARTITIONS = 6
SETS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1",
        "group.consumer.heartbeat.interval.ms": "500", "group.consumer.session.timeout.ms": "10000"}


@pytest.fixture(scope="module")
def migration_broker(module_start_broker: BrokerFactory) -> BrokerProcess:
    return module_start_broker(sets=SETS)


def classic(bootstrap: str, group: str) -> Consumer:
    """On librdkafka's default protocol (classic), a short heartbeat and session for the test."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})


def modern(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "group.protocol": "consumer"})


class Ledger:
    """Polls the members, commits what each read, and checks no committed record is read again.

    A commit refused during a rebalance is tried again on a later step for the partitions the
    member still owns, as an application committing on its next poll would: otherwise a member
    whose last commit of a partition was refused keeps it uncommitted for good."""

    def __init__(self, members: list[Consumer]) -> None:
        self.members = members
        self.reads: Counter[tuple[int, int]] = Counter()
        self.committed: set[tuple[int, int]] = set()
        self.read_again_after_commit: list[tuple[int, int]] = []
        self.failed_commits = 0
        self.pending: dict[int, dict[int, list[tuple[int, int]]]] = {}  # id(member) -> partition -> reads

    def step(self) -> None:
        for c in list(self.members):
            batch = [m for m in c.consume(num_messages=500, timeout=0.05) if m.error() is None]
            pending = self.pending.setdefault(id(c), {})
            for m in batch:
                key = (m.partition(), m.offset())
                if key in self.committed:
                    self.read_again_after_commit.append(key)
                self.reads[key] += 1
                pending.setdefault(m.partition(), []).append(key)
            fresh = {m.partition() for m in batch}
            owned = partitions_of(c) if len(pending) > len(fresh) else set()
            for p in [p for p in pending if p not in fresh and p not in owned]:
                del pending[p]  # a refused commit of a partition gone since: its next owner reads it again
            if not pending:
                continue
            try:
                c.commit(offsets=[TopicPartition(self.topic_of(c, batch), p, max(o for _, o in keys) + 1)
                                  for p, keys in pending.items()], asynchronous=False)
            except KafkaException:
                self.failed_commits += 1  # tried again on the next step
                continue
            for keys in pending.values():
                self.committed.update(keys)
            pending.clear()

    @staticmethod
    def topic_of(c: Consumer, batch: list) -> str:
        return batch[0].topic() if batch else next(iter(c.assignment())).topic


def owners_settled(members: list[Consumer]) -> bool:
    owned = [partitions_of(c) for c in members]
    return sorted(len(o) for o in owned) == [2, 2, 2] and set().union(*owned) == set(range(PARTITIONS))


def group_type(bootstrap: str, group: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # the future dies with its client
    listed = admin.list_consumer_groups().result(timeout=30)
    return next(str(g.type) for g in listed.valid if g.group_id == group)


def new_group(bootstrap: str, prefix: str) -> tuple[str, str]:
    """A topic of PARTITIONS partitions and a group name for it."""
    topic = helpers.topic_name(prefix)
    helpers.create_topic(bootstrap, topic, partitions=PARTITIONS)
    return topic, f"g-{topic}"


def test_a_rolling_upgrade_from_classic_to_consumer_members_reads_everything_once(
        migration_broker: BrokerProcess) -> None:
    b = migration_broker.bootstrap
    topic, group = new_group(b, "migration")
    members = [classic(b, group) for _ in range(3)]
    ledger = Ledger(members)
    produced: set[tuple[int, int]] = set()
    try:
        for c in members:
            c.subscribe([topic])
        wait_until(lambda: owners_settled(members), "three classic members, two partitions each", step=ledger.step)
        assert "CLASSIC" in group_type(b, group)
        produced |= produce_spread(b, topic, PARTITIONS, 30, tag="classic")
        wait_until(lambda: set(ledger.reads) >= produced, "the first records", step=ledger.step)
        for i in range(3):  # replace member i by a consumer-protocol member
            members[i].close()
            members[i] = modern(b, group)
            members[i].subscribe([topic])
            produced |= produce_spread(b, topic, PARTITIONS, 20, tag=f"roll-{i}")
            wait_until(lambda want=frozenset(produced): owners_settled(members) and set(ledger.reads) >= want,
                       f"the group to settle with member {i} upgraded", step=ledger.step)
            assert "CONSUMER" in group_type(b, group)
        admin = AdminClient({"bootstrap.servers": b})
        described = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert len(described.members) == 3 and described.partition_assignor == "uniform"
        assert set(ledger.reads) == produced  # none left unread
        assert not ledger.read_again_after_commit, ledger.read_again_after_commit[:10]
        ends = {p: helpers.watermarks(b, topic, p)[1] for p in range(PARTITIONS)}
        wait_until(lambda: _committed(b, group) == ends,
                   f"the last commits ({ledger.failed_commits} refused on the way)", step=ledger.step)
    finally:
        close_all(members)


def test_the_last_consumer_member_leaving_turns_the_group_classic_again(
        migration_broker: BrokerProcess) -> None:
    b = migration_broker.bootstrap
    topic, group = new_group(b, "downgrade")
    members = [classic(b, group) for _ in range(2)] + [modern(b, group)]
    ledger = Ledger(members)
    try:
        for c in members[:2]:
            c.subscribe([topic])
        wait_until(lambda: all(len(partitions_of(c)) == 3 for c in members[:2]), "two classic members",
                   step=ledger.step)
        members[2].subscribe([topic])  # upgrades the group
        wait_until(lambda: owners_settled(members), "the mixed group to settle", step=ledger.step)
        produced = produce_spread(b, topic, PARTITIONS, 20, tag="mixed")
        wait_until(lambda: set(ledger.reads) >= produced, "the mixed group's records", step=ledger.step)
        members.pop().close()  # the only consumer-protocol member leaves
        wait_until(lambda: "CLASSIC" in group_type(b, group), "the downgrade", step=ledger.step)
        produced |= produce_spread(b, topic, PARTITIONS, 20, tag="classic-again")
        wait_until(lambda: set(ledger.reads) >= produced and sorted(len(partitions_of(c)) for c in members) == [3, 3],
                   "the classic group to read on", step=ledger.step)
        assert not ledger.read_again_after_commit, ledger.read_again_after_commit[:10]
    finally:
        close_all(members)


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}

