"""Dynamic broker configs (kafka-configs.sh --entity-type brokers): what may change at run
time, Kafka's precedence (this broker, the cluster default, static, default; a listener's
prefixed config over the unprefixed one) and DescribeConfigs' sources and synonyms."""

from __future__ import annotations

from typing import Any

import pytest

from common.config.broker import BrokerConfig
from common.config.entries import ConfigSource
from common.errors import ErrorCode, KafkaError
from service.dynamic_config import EffectiveConfig, alter, describe
from service.quotas.connections import ListenerLimits, connection_settings

SET, DELETE, APPEND = 0, 1, 2


def altered(section: Any, resource: str, *ops: tuple[str, int, str | None], replace_all: bool = False) -> Any:
    return alter(section, resource, list(ops), replace_all=replace_all)


def refusal(section: Any, resource: str, *ops: tuple[str, int, str | None]) -> tuple[ErrorCode, str]:
    with pytest.raises(KafkaError) as refused:
        altered(section, resource, *ops)
    return refused.value.code, str(refused.value)


def test_alter_keeps_each_brokers_and_the_defaults_dynamic_configs() -> None:
    section = altered(None, "", ("max.connections.per.ip", SET, "100"))
    section = altered(section, "2", ("listener.name.SSL.max.connections", SET, "50"),
                      ("max.connection.creation.rate", SET, "+20"))
    assert section == {"default": {"max.connections.per.ip": "100"},
                       "2": {"listener.name.ssl.max.connections": "50", "max.connection.creation.rate": "20"}}
    section = altered(section, "2", ("max.connection.creation.rate", DELETE, None))
    assert section["2"] == {"listener.name.ssl.max.connections": "50"}  # listener names as Kafka's prefix
    # AlterConfigs (not incremental): the set replaces the resource's dynamic configs
    assert altered(section, "2", replace_all=True) == {"default": {"max.connections.per.ip": "100"}}
    assert altered(altered(section, "2", replace_all=True), "", ("max.connections.per.ip", DELETE, None)) is None


def test_alter_refuses_what_cannot_change_and_bad_values_as_kafka() -> None:
    code, message = refusal(None, "1", ("log.retention.hours", SET, "1"), ("max.connections", SET, "5"))
    assert code == ErrorCode.invalid_request and "Cannot update these configs dynamically: ['log.retention.hours']" in message
    assert refusal(None, "1", ("no.such.config", SET, "1"))[0] == ErrorCode.invalid_request
    # Kafka takes a Kerberos key with no GSSAPI listener and ignores it; Strata, which has no
    # GSSAPI, says so (librdkafka's 0081 sets one)
    code, message = refusal(None, "1", ("sasl.kerberos.min.time.before.relogin", SET, "58000"))
    assert code == ErrorCode.invalid_request and "has no SASL/GSSAPI" in message
    assert refusal(None, "1", ("listener.name.ssl.ssl.keystore.location", SET, "/x"))[0] == ErrorCode.invalid_request
    assert refusal(None, "1", ("max.connections", SET, "lots"))[0] == ErrorCode.invalid_request
    assert refusal(None, "1", ("max.connections", SET, "-1"))[0] == ErrorCode.invalid_request
    assert refusal(None, "1", ("max.connections", APPEND, "1"))[0] == ErrorCode.invalid_request
    assert refusal(None, "1", ("max.connections.per.ip.overrides", SET, "10.0.0.1"))[0] == ErrorCode.invalid_request
    assert refusal(None, "1", ("max.connections.per.ip", SET, "0"))[0] == ErrorCode.invalid_request
    assert refusal(None, "broker-1", ("max.connections", SET, "5"))[0] == ErrorCode.invalid_request
    zero_with_overrides = altered(None, "1", ("max.connections.per.ip", SET, "0"),
                                  ("max.connections.per.ip.overrides", SET, "10.0.0.1:5"))
    assert zero_with_overrides == {"1": {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "10.0.0.1:5"}}


def test_precedence_is_kafkas() -> None:
    static = BrokerConfig({"max.connections": "1000", "listener.name.ssl.max.connection.creation.rate": "7",
                           "max.connections.per.ip": "9"})
    section = {"default": {"max.connections": "500", "listener.name.plaintext.max.connections": "40"},
               "1": {"max.connections": "300", "max.connection.creation.rate": "99"}}
    mine, other = EffectiveConfig(static, 1, section), EffectiveConfig(static, 2, section)
    assert (mine.get_int("max.connections"), other.get_int("max.connections")) == (300, 500)
    assert mine.get_int("max.connections.per.ip") == 9  # static where nothing dynamic
    assert mine.get_int("remote.log.manager.fetch.max.bytes.per.second") == 2**63 - 1
    # a listener's prefixed config, at any level, beats the unprefixed one at any level
    assert mine.for_listener("PLAINTEXT").get_int("max.connections") == 40
    assert mine.for_listener("SSL").get_int("max.connections") == 300
    assert mine.for_listener("SSL").get_int("max.connection.creation.rate") == 7
    assert mine.for_listener("PLAINTEXT").get_int("max.connection.creation.rate") == 99
    settings = connection_settings(mine, ["PLAINTEXT", "SSL"])
    assert settings.max_connections == 300 and settings.creation_rate == 99
    assert settings.listeners == {"PLAINTEXT": ListenerLimits(40, 99), "SSL": ListenerLimits(300, 7)}


def test_describe_shows_dynamic_sources_and_the_defaults_own_list() -> None:
    static = BrokerConfig({"max.connections": "1000"})
    section = {"default": {"max.connections": "500", "listener.name.ssl.max.connections": "40"},
               "1": {"max.connections": "300"}}
    entries = {e.name: e for e in describe(static, section, "1", 1, None)}
    entry = entries["max.connections"]
    assert (entry.value, entry.source, entry.read_only) == ("300", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    assert [(s.value, s.source) for s in entry.synonyms] == [
        ("300", ConfigSource.DYNAMIC_BROKER_CONFIG), ("500", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("1000", ConfigSource.STATIC_BROKER_CONFIG), ("2147483647", ConfigSource.DEFAULT_CONFIG)]
    assert entries["listener.name.ssl.max.connections"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert not entries["max.connections.per.ip"].read_only and entries["log.retention.hours"].read_only
    default = describe(static, section, "", 1, None)
    assert [(e.name, e.value, e.source) for e in default] == [
        ("listener.name.ssl.max.connections", "40", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("max.connections", "500", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    assert [e.name for e in describe(static, section, "1", 1, ["max.connections"])] == ["max.connections"]
    with pytest.raises(KafkaError):
        describe(static, section, "2", 1, None)  # another broker's: asked of that broker, as Kafka


def test_the_zero_per_ip_rule_is_checked_on_the_merged_configs() -> None:
    with_overrides = altered(None, "", ("max.connections.per.ip.overrides", SET, "10.0.0.1:5"))
    assert altered(with_overrides, "1", ("max.connections.per.ip", SET, "0"))["1"] == {"max.connections.per.ip": "0"}
    zero_default = altered(with_overrides, "", ("max.connections.per.ip", SET, "0"))
    assert refusal(zero_default, "1", ("max.connections.per.ip.overrides", SET, ""))[0] == ErrorCode.invalid_request
    assert refusal(zero_default, "", ("max.connections.per.ip.overrides", DELETE, None))[0] == ErrorCode.invalid_request
    static = BrokerConfig({"max.connections.per.ip.overrides": "10.0.0.2:1"})
    assert alter(None, "1", [("max.connections.per.ip", SET, "0")], replace_all=False, static=static)


def test_broker_resources_and_keys_are_checked_before_anything_is_written() -> None:
    assert refusal(None, "\u00b2", ("max.connections", SET, "5"))[0] == ErrorCode.invalid_request  # not ASCII digits
    assert refusal(None, "1", ("max.connections", SET, "5"), ("max.connections", SET, "6"))[0] == ErrorCode.invalid_request
    assert altered(None, "1", ("log.retention.hours", DELETE, None)) is None  # deleting what is not set: no change


def test_log_configs_are_dynamic_and_topics_without_their_own_follow_them() -> None:
    """Kafka's DynamicLogConfig: the first broker synonym of each topic config; a topic's default
    comes from this broker's value, then the cluster default's, then the static chain."""
    section = altered(None, "", ("log.retention.ms", SET, " 60000 "), ("message.max.bytes", SET, "2000"))
    section = altered(section, "1", ("log.segment.bytes", SET, "4096"))
    assert section == {"default": {"log.retention.ms": "60000", "message.max.bytes": "2000"},
                       "1": {"log.segment.bytes": "4096"}}
    static = BrokerConfig({"log.retention.hours": "1", "message.max.bytes": "5000"})
    defaults = EffectiveConfig(static, 1, section).merged.topic_defaults()
    assert (defaults["retention.ms"], defaults["max.message.bytes"], defaults["segment.bytes"]) == (
        "60000", "2000", "4096")
    assert EffectiveConfig(static, 2, section).merged.topic_defaults()["segment.bytes"] == "1073741824"
    entries = {e.name: e for e in describe(static, section, "1", 1, ["log.retention.ms", "log.segment.bytes"])}
    assert [(s.name, s.value, s.source) for s in entries["log.retention.ms"].synonyms] == [
        ("log.retention.ms", "60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG)]
    assert not entries["log.segment.bytes"].read_only
    topic = {e.name: e for e in EffectiveConfig(static, 1, section).merged.topic_entries({}, ["retention.ms"])}
    assert (topic["retention.ms"].value, topic["retention.ms"].source) == (
        "60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)


def test_read_only_log_configs_and_kafkas_reconfiguration_rules() -> None:
    for name in ("log.retention.hours", "log.roll.hours", "log.dirs", "node.id", "listeners",
                 "log.remote.storage.enable", "log.cleaner.enable"):
        code, message = refusal(None, "1", (name, SET, "1"))
        assert code == ErrorCode.invalid_request and f"['{name}']" in message
    code, message = refusal(None, "", ("log.retention.ms", SET, "60000"), ("log.local.retention.ms", SET, "-1"))
    assert "Value must not be -1 as log.retention.ms value is set as 60000" in message
    code, message = refusal(None, "", ("log.local.retention.bytes", SET, "100"), ("log.retention.bytes", SET, "10"))
    assert "Value must not be more than log.retention.bytes property value: 10" in message
    assert refusal(None, "1", ("log.cleaner.threads", SET, "0"))[1].endswith("should be at least 1")
    assert "more than double" in refusal(None, "1", ("log.cleaner.threads", SET, "3"))[1]
    assert altered(None, "1", ("log.cleaner.threads", SET, "2")) == {"1": {"log.cleaner.threads": "2"}}
