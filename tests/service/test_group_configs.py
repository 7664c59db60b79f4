"""Per-group configs (Kafka 4's GROUP config resource): checked as Kafka checks them, stored
one object per group, described with the broker's value a group without its own follows."""

from __future__ import annotations

import pytest

from common.config.broker import BrokerConfig
from common.config.entries import ConfigSource
from common.errors import ErrorCode, KafkaError
from service.group_configs import alter, describe, overrides_of
from service.groups.requests import GroupConfig

SET, DELETE, APPEND = 0, 1, 2
STATIC = BrokerConfig()


def refused(*ops: tuple[str, int, str | None], section: object = None) -> str:
    with pytest.raises(KafkaError) as exc:
        alter(section, "g", list(ops), STATIC)
    assert exc.value.code == ErrorCode.invalid_config
    return str(exc.value)


def test_set_delete_and_replace_keep_one_object_per_group() -> None:
    section = alter(None, "g", [("consumer.session.timeout.ms", SET, "50000")], STATIC)
    section = alter(section, "h", [("consumer.heartbeat.interval.ms", SET, " 6000")], STATIC)
    assert section == {"g": {"consumer.session.timeout.ms": "50000"}, "h": {"consumer.heartbeat.interval.ms": "6000"}}
    section = alter(section, "g", [("consumer.session.timeout.ms", DELETE, None)], STATIC)
    assert section == {"h": {"consumer.heartbeat.interval.ms": "6000"}}
    assert alter(section, "h", [], STATIC, replace_all=True) is None  # AlterConfigs: the set replaces


def test_kafkas_bounds_and_rules() -> None:
    assert "greater than or equal to 45000" in refused(("consumer.session.timeout.ms", SET, "44999"))
    assert "less than or equal to 60000" in refused(("consumer.session.timeout.ms", SET, "60001"))
    assert "less than or equal to 15000" in refused(("consumer.heartbeat.interval.ms", SET, "20000"))
    assert "Not a number" in refused(("consumer.heartbeat.interval.ms", SET, "soon"))
    assert "Unknown group config name: no.such" in refused(("no.such", SET, "1"))
    assert "no share groups" in refused(("share.session.timeout.ms", SET, "45000"))
    assert "append is not allowed" in refused(("consumer.session.timeout.ms", APPEND, "1"))
    assert "duplicate" in refused(("consumer.session.timeout.ms", SET, "50000"),
                                  ("consumer.session.timeout.ms", SET, "51000"))
    with pytest.raises(KafkaError, match="must be greater than consumer.heartbeat.interval.ms"):
        alter(None, "g", [("consumer.heartbeat.interval.ms", SET, "15000")],
              BrokerConfig({"group.consumer.session.timeout.ms": "12000"}))


def test_describe_shows_the_groups_own_value_or_the_brokers() -> None:
    section = {"g": {"consumer.session.timeout.ms": "50000"}}
    entries = {e.name: e for e in describe(section, "g", STATIC, None)}
    assert entries["consumer.session.timeout.ms"].value == "50000"
    assert entries["consumer.session.timeout.ms"].source == ConfigSource.GROUP_CONFIG
    assert [s.name for s in entries["consumer.session.timeout.ms"].synonyms] == [
        "consumer.session.timeout.ms", "group.consumer.session.timeout.ms"]
    assert entries["consumer.heartbeat.interval.ms"].value == "5000"
    assert entries["consumer.heartbeat.interval.ms"].source == ConfigSource.DEFAULT_CONFIG
    static = BrokerConfig({"group.consumer.heartbeat.interval.ms": "3000"})
    [entry] = describe(None, "other", static, ["consumer.heartbeat.interval.ms"])
    assert entry.value == "3000" and entry.source == ConfigSource.STATIC_BROKER_CONFIG


def test_the_coordinator_follows_a_groups_own_configs() -> None:
    section = {"g": {"consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "6000"}}
    config = GroupConfig(consumer_session_timeout_ms=45000, consumer_heartbeat_interval_ms=5000,
                         group_overrides=overrides_of(lambda: section))
    assert (config.session_timeout_ms("g"), config.heartbeat_interval_ms("g")) == (50000, 6000)
    assert (config.session_timeout_ms("h"), config.heartbeat_interval_ms("h")) == (45000, 5000)
