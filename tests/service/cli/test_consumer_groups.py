"""`strata groups list|describe|reset|delete` end to end: the CLI as a subprocess
against a real broker, with a real confluent-kafka group."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.conftest import BrokerFactory, BrokerProcess
from tests.e2e import helpers
from tests.service.cli.helpers import fails_cleanly, ok, strata


@pytest.fixture(scope="module")
def cli_broker(module_start_broker: BrokerFactory) -> BrokerProcess:
    return module_start_broker(sets={"group.initial.rebalance.delay.ms": "0",
                                     "offsets.topic.num.partitions": "3"})


def lag_rows(out: str) -> dict[tuple[str, int], dict[str, str]]:
    """{(topic, partition): {column: value}} from `groups describe`."""
    lines = [line.split() for line in out.splitlines()[1:]]
    header, rows = lines[0], lines[1:]
    return {(r[1], int(r[2])): dict(zip(header, r)) for r in rows if r[1] != "-"}


def consume_and_commit(bootstrap: str, group: str, topic: str, count: int) -> Consumer:
    """A live member that has consumed and committed ``count`` records."""
    return helpers.join_and_commit(bootstrap, group, topic, count, **{"session.timeout.ms": 6000})


def test_describe_shows_members_committed_offsets_and_lag(cli_broker: BrokerProcess) -> None:
    b = cli_broker.bootstrap
    topic = helpers.topic_name("cli-lag")
    group = f"lag-{topic}"
    helpers.create_topic(b, topic, partitions=2)
    helpers.produce_values(b, topic, [b"x"] * 10, partition=0)
    helpers.produce_values(b, topic, [b"y"] * 4, partition=1)
    member = consume_and_commit(b, group, topic, 14)
    try:
        helpers.produce_values(b, topic, [b"z"] * 7, partition=0)  # 7 more to read on p0
        out = ok(strata("groups", "describe", group, bootstrap=b)).stdout
        assert out.splitlines()[0].startswith(f"Group {group}: state Stable, 1 member(s)")
        rows = lag_rows(out)
        assert rows[(topic, 0)]["CURRENT-OFFSET"] == "10"
        assert rows[(topic, 0)]["LOG-END-OFFSET"] == "17"
        assert rows[(topic, 0)]["LAG"] == "7"
        assert (rows[(topic, 1)]["CURRENT-OFFSET"], rows[(topic, 1)]["LAG"]) == ("4", "0")
        assert rows[(topic, 0)]["CONSUMER-ID"] == rows[(topic, 1)]["CONSUMER-ID"] != "-"
        assert rows[(topic, 0)]["HOST"] == "/127.0.0.1"
        listed = ok(strata("groups", "list", "--state", bootstrap=b)).stdout
        assert f"{group}\tStable" in listed.splitlines()

        # A live group cannot be reset or deleted.
        line = fails_cleanly(strata("groups", "reset", group, "--topic", topic, "--to-earliest",
                                    bootstrap=b))
        assert "live member" in line
        line = fails_cleanly(strata("groups", "delete", group, bootstrap=b))
        assert "NON_EMPTY_GROUP" in line
    finally:
        member.close()
    rows = lag_rows(ok(strata("groups", "describe", group, bootstrap=b)).stdout)
    assert rows[(topic, 0)]["LAG"] == "7" and rows[(topic, 0)]["CONSUMER-ID"] == "-"


def test_reset_dry_run_then_apply_then_delete(cli_broker: BrokerProcess) -> None:
    b = cli_broker.bootstrap
    topic = helpers.topic_name("cli-reset")
    group = f"reset-{topic}"
    helpers.create_topic(b, topic, partitions=2)
    helpers.produce_values(b, topic, [b"a"] * 6, partition=0)
    helpers.produce_values(b, topic, [b"b"] * 6, partition=1)
    consume_and_commit(b, group, topic, 12).close()

    plan = ok(strata("groups", "reset", group, "--topic", f"{topic}:1", "--to-offset", "2",
                     "--dry-run", bootstrap=b))
    assert "dry run" in plan.stderr
    assert plan.stdout.split("\n")[1].split() == [group, topic, "1", "6", "2"]
    assert committed(b, group, topic) == {0: 6, 1: 6}  # unchanged

    ok(strata("groups", "reset", group, "--topic", topic, "--to-earliest", bootstrap=b))
    assert committed(b, group, topic) == {0: 0, 1: 0}
    ok(strata("groups", "reset", group, "--topic", f"{topic}:0", "--to-offset", "99", bootstrap=b))
    assert committed(b, group, topic) == {0: 6, 1: 0}  # clamped to the log end
    ok(strata("groups", "reset", group, "--topic", topic, "--to-datetime",
              "2000-01-01T00:00:00Z", bootstrap=b))
    assert committed(b, group, topic) == {0: 0, 1: 0}
    ok(strata("groups", "reset", group, "--topic", topic, "--to-latest", bootstrap=b))
    assert committed(b, group, topic) == {0: 6, 1: 6}

    # A restarted consumer resumes from the reset position.
    ok(strata("groups", "reset", group, "--topic", f"{topic}:1", "--to-offset", "4", bootstrap=b))
    c = Consumer({"bootstrap.servers": b, "group.id": group, "enable.auto.commit": False})
    c.subscribe([topic])
    try:
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while len(got) < 2:
            assert time.monotonic() < deadline
            got += [m for m in c.consume(num_messages=10, timeout=0.2) if m.error() is None]
        assert sorted((m.partition(), m.offset()) for m in got) == [(1, 4), (1, 5)]
    finally:
        c.close()

    ok(strata("groups", "delete", group, bootstrap=b))
    assert group not in ok(strata("groups", "list", bootstrap=b)).stdout.split()
    line = fails_cleanly(strata("groups", "describe", group, bootstrap=b))
    assert "does not exist" in line
    line = fails_cleanly(strata("groups", "delete", group, bootstrap=b))
    assert "GROUP_ID_NOT_FOUND" in line


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=20)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()
