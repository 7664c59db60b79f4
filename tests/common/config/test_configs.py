"""Config keys, defaults, validation and broker synonyms."""

from __future__ import annotations

import pytest

from common.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigType,
    validate_topic_config,
)
from common.config.entries import ConfigSource
from common.errors import ErrorCode, InvalidConfigError
from local_tier.config import LogConfig


def test_every_topic_config_has_a_valid_default_and_a_known_broker_synonym() -> None:
    for name, definition in TOPIC_CONFIGS.items():
        assert definition.default is not None
        assert validate_topic_config(name, definition.default) == definition.default
        assert definition.broker_synonym is None or definition.broker_synonym in BROKER_CONFIGS


@pytest.mark.parametrize(
    ("name", "default"),
    [
        ("cleanup.policy", "delete"),
        ("compression.type", "producer"),
        ("file.delete.delay.ms", "60000"),
        ("flush.messages", "9223372036854775807"),
        ("flush.ms", "9223372036854775807"),
        ("index.interval.bytes", "4096"),
        ("local.retention.bytes", "-2"),
        ("local.retention.ms", "-2"),
        ("max.message.bytes", "1048588"),
        ("message.timestamp.type", "CreateTime"),
        ("min.insync.replicas", "1"),
        ("remote.storage.enable", "false"),
        ("retention.bytes", "-1"),
        ("retention.ms", "604800000"),
        ("segment.bytes", "1073741824"),
        ("segment.index.bytes", "10485760"),
        ("segment.jitter.ms", "0"),
        ("segment.ms", "604800000"),
        ("unclean.leader.election.enable", "false"),
    ],
)
def test_topic_defaults_are_kafkas(name: str, default: str) -> None:
    assert BrokerConfig().topic_defaults()[name] == default


def test_default_topic_config_matches_the_local_tier_log_config() -> None:
    assert LogConfig.from_properties(BrokerConfig().topic_defaults()) == LogConfig()


@pytest.mark.parametrize(
    ("broker", "topic", "expected"),
    [
        ({"log.retention.hours": "1"}, "retention.ms", "3600000"),
        ({"log.retention.minutes": "2", "log.retention.hours": "1"}, "retention.ms", "120000"),
        ({"log.retention.ms": "5", "log.retention.minutes": "2"}, "retention.ms", "5"),
        ({"log.retention.ms": "-1"}, "retention.ms", "-1"),
        ({"log.retention.hours": "-1"}, "retention.ms", "-1"),
        ({"log.roll.hours": "2"}, "segment.ms", "7200000"),
        ({"log.roll.ms": "1000", "log.roll.hours": "2"}, "segment.ms", "1000"),
        ({"log.segment.bytes": "2048"}, "segment.bytes", "2048"),
        ({"message.max.bytes": "100"}, "max.message.bytes", "100"),
        ({"log.flush.scheduler.interval.ms": "10"}, "flush.ms", "10"),
        ({"log.flush.interval.ms": "5", "log.flush.scheduler.interval.ms": "10"}, "flush.ms", "5"),
        ({"log.cleanup.policy": "compact"}, "cleanup.policy", "compact"),
        ({"log.local.retention.ms": "1000"}, "local.retention.ms", "1000"),
        ({"compression.type": "zstd"}, "compression.type", "zstd"),
        (
            {"log.message.timestamp.type": "LogAppendTime"},
            "message.timestamp.type",
            "LogAppendTime",
        ),
    ],
)
def test_broker_synonyms_provide_topic_defaults(
    broker: dict[str, str], topic: str, expected: str
) -> None:
    assert BrokerConfig(broker).topic_defaults()[topic] == expected


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "segment.bytes",
            "abc",
            "Invalid value abc for configuration segment.bytes: Not a number of type INT",
        ),
        ("segment.bytes", "2147483648", "Not a number of type INT"),
        ("retention.ms", "1.5", "Not a number of type LONG"),
        ("min.cleanable.dirty.ratio", "x", "Not a number of type DOUBLE"),
        ("min.cleanable.dirty.ratio", "1.5", "Value must be between 0 and 1"),
        ("preallocate", "yes", "Expected value to be either true or false"),
        ("segment.bytes", "1023", "Value must be at least 1024"),
        ("segment.ms", "0", "Value must be at least 1"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy"),
        ("cleanup.policy", "delete,forever", "String must be one of: delete, compact"),
        (
            "message.timestamp.type",
            "createtime",
            "String must be one of: CreateTime, LogAppendTime",
        ),
        ("foo", "1", "Unknown topic config name: foo"),
        ("retention.ms", None, "Null value not supported for topic configs: retention.ms"),
    ],
)
def test_invalid_topic_config_raises_invalid_config_with_kafkas_message(
    name: str, value: str | None, message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=message.replace(".", r"\.")) as info:
        validate_topic_config(name, value)
    assert info.value.code == ErrorCode.invalid_config


@pytest.mark.parametrize(
    ("name", "value", "normalized"),
    [
        ("segment.bytes", " 2048 ", "2048"),
        ("preallocate", "TRUE", "true"),
        ("cleanup.policy", "compact, delete", "compact,delete"),
        ("min.cleanable.dirty.ratio", "0.25", "0.25"),
        ("retention.ms", "-1", "-1"),
    ],
)
def test_valid_topic_config_is_normalized(name: str, value: str, normalized: str) -> None:
    assert validate_topic_config(name, value) == normalized


def test_broker_config_rejects_unknown_names_and_bad_values_naming_them() -> None:
    with pytest.raises(ValueError, match="Unknown broker config name: log.retention.dayz"):
        BrokerConfig({"log.retention.dayz": "1"})
    with pytest.raises(ValueError, match="num.partitions: Value must be at least 1"):
        BrokerConfig({"num.partitions": "0"})
    with pytest.raises(ValueError, match="must equal node.id"):
        BrokerConfig({"node.id": "1", "broker.id": "2"})


def test_broker_config_getters_apply_defaults_and_precedence() -> None:
    config = BrokerConfig({"broker.id": "7", "auto.create.topics.enable": "FALSE"})
    assert config.node_id == 7
    assert config.get_int("num.partitions") == 1
    assert config.get_int("socket.request.max.bytes") == 104857600
    assert config.get_int("fetch.max.bytes") == 57671680
    assert config.get_bool("auto.create.topics.enable") is False
    assert config.get_bool("delete.topic.enable") is True
    assert config.get_str("log.dir") == "/tmp/kafka-logs"
    assert config.get("log.dirs") is None
    assert BrokerConfig().node_id == 1
    with pytest.raises(KeyError):
        config.get("no.such.key")


def test_broker_entries_describe_static_overrides_and_defaults() -> None:
    config = BrokerConfig({"log.retention.hours": "1"})
    entries = {e.name: e for e in config.entries()}
    assert set(entries) == set(BROKER_CONFIGS)
    hours = entries["log.retention.hours"]
    assert (hours.value, hours.source, hours.is_default, hours.read_only) == (
        "1",
        ConfigSource.STATIC_BROKER_CONFIG,
        False,
        True,
    )
    assert hours.config_type == ConfigType.INT
    assert [(s.name, s.value, s.source) for s in entries["log.retention.ms"].synonyms] == [
        ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    partitions = entries["num.partitions"]
    assert (partitions.source, partitions.is_default) == (ConfigSource.DEFAULT_CONFIG, True)
    assert [e.name for e in config.entries(["num.partitions", "nope"])] == ["num.partitions"]


def test_kafka_numeric_ids_of_config_sources_and_types() -> None:
    assert ConfigSource["TOPIC_CONFIG"] is ConfigSource["DYNAMIC_TOPIC_CONFIG"]
    assert int(ConfigSource.DYNAMIC_TOPIC_CONFIG) == 1
    assert [ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG] == [
        2,
        3,
    ]
    assert [ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG] == [4, 5]
    assert [ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.LONG] == [1, 2, 3, 5]
    assert [ConfigType.DOUBLE, ConfigType.LIST, ConfigType.PASSWORD] == [6, 7, 9]


@pytest.mark.parametrize(("value", "message"), [
    ("two", "not a CPU list: 'two'"),
    ("3-1", "3-1 runs backwards"),
    ("4096", "CPU 4096 does not exist on this machine"),
])
def test_remote_log_reader_cpus_must_name_cpus_of_this_machine(value: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        BrokerConfig({"remote.log.reader.cpus": value})
    assert "remote.log.reader.cpus" in str(info.value) and message in str(info.value)


def test_remote_log_reader_cpus_parses_linux_cpu_lists() -> None:
    from common.config.configdef import parse_cpu_list

    assert parse_cpu_list("") == frozenset()
    assert parse_cpu_list("0") == {0}
    assert parse_cpu_list("0,2-4, 7") == {0, 2, 3, 4, 7}
    assert BrokerConfig({"remote.log.reader.cpus": "0"}).get("remote.log.reader.cpus") == "0"


def test_listener_prefixed_configs_override_for_their_listener_only() -> None:
    from common.config.broker import BrokerConfig

    config = BrokerConfig({
        "ssl.client.auth": "requested",
        "listener.name.INTERNAL.ssl.client.auth": "required",
        "sasl.jaas.config": 'x required username="a" password="b";',
        "listener.name.internal.scram-sha-512.sasl.jaas.config": 'y required username="c" password="d";',
        "listener.name.external.sasl.enabled.mechanisms": "SCRAM-SHA-256",
    })
    internal, external, other = (config.for_listener(n) for n in ("internal", "EXTERNAL", "PLAINTEXT"))
    assert internal.get("ssl.client.auth") == "required"  # names in any case, as Kafka
    assert external.get("ssl.client.auth") == other.get("ssl.client.auth") == "requested"
    assert external.get_str("sasl.enabled.mechanisms") == "SCRAM-SHA-256"
    assert other.get_str("sasl.enabled.mechanisms") == config.get_str("sasl.enabled.mechanisms")
    assert internal.jaas("SCRAM-SHA-512").startswith("y ")  # the mechanism's own first
    assert internal.jaas("PLAIN").startswith("x ") and external.jaas("PLAIN").startswith("x ")
    assert internal.overridden == {"ssl.client.auth", "scram-sha-512.sasl.jaas.config"}
    assert "listener.name.INTERNAL.ssl.client.auth" not in config.overrides  # not a broker config itself


def test_listener_prefixed_configs_are_checked_as_their_config() -> None:
    from common.config.broker import BrokerConfig

    with pytest.raises(ValueError, match="ssl.client.auth"):
        BrokerConfig({"listener.name.internal.ssl.client.auth": "maybe"})
    with pytest.raises(ValueError, match=r"listener.name.<listener>.ssl"):
        BrokerConfig({"listener.name.internal.log.retention.ms": "1"})  # not a listener's to override
    with pytest.raises(ValueError, match="Unknown broker config"):
        BrokerConfig({"listener.name.internal.gssapi.sasl.jaas.config": "x;"})  # a mechanism we lack
