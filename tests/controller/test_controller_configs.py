"""Topic configs through the Controller: create, incremental alter, describe."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from common.errors import ErrorCode, InvalidConfigError, InvalidRequestError
from controller import AlterConfigOp, ConfigSource, Controller

MakeController = Callable[..., Controller]
SET, DELETE, APPEND, SUBTRACT = (int(op) for op in AlterConfigOp)


def test_create_topic_stores_normalized_overrides_only(controller: Controller) -> None:
    topic = controller.create_topic(
        "t", 1, configs={"segment.bytes": " 4096 ", "preallocate": "TRUE"}
    )
    assert dict(topic.configs) == {"segment.bytes": "4096", "preallocate": "true"}
    effective = controller.effective_topic_config("t")
    assert effective["segment.bytes"] == "4096"
    assert effective["retention.ms"] == "604800000"
    assert len(effective) > 20


def test_create_topic_with_a_bad_config_raises_invalid_config(controller: Controller) -> None:
    with pytest.raises(InvalidConfigError, match="Not a number of type INT") as info:
        controller.create_topic("t", 1, configs={"segment.bytes": "abc"})
    assert info.value.code == ErrorCode.invalid_config
    with pytest.raises(InvalidConfigError, match="Unknown topic config name: foo"):
        controller.create_topic("t", 1, configs={"foo": "1"})
    assert controller.topics() == []


def test_effective_config_follows_broker_synonyms(make_controller: MakeController) -> None:
    controller = make_controller({"log.retention.hours": "1"})
    controller.create_topic("t", 1)
    assert controller.effective_topic_config("t")["retention.ms"] == "3600000"


def test_incremental_set_and_delete(controller: Controller) -> None:
    controller.create_topic("t", 1, configs={"retention.ms": "1000"})
    topic = controller.incremental_alter_configs(
        "t", [("segment.bytes", SET, "2048"), ("retention.ms", DELETE, None)]
    )
    assert dict(topic.configs) == {"segment.bytes": "2048"}
    assert controller.effective_topic_config("t")["retention.ms"] == "604800000"
    assert controller.incremental_alter_configs("t", [("retention.ms", DELETE, None)]) == topic


def test_incremental_append_and_subtract_on_list_configs(controller: Controller) -> None:
    controller.create_topic("t", 1)
    appended = controller.incremental_alter_configs("t", [("cleanup.policy", APPEND, "compact")])
    assert appended.configs["cleanup.policy"] == "delete,compact"
    again = controller.incremental_alter_configs("t", [("cleanup.policy", APPEND, "compact")])
    assert again.configs["cleanup.policy"] == "delete,compact"
    subtracted = controller.incremental_alter_configs("t", [("cleanup.policy", SUBTRACT, "delete")])
    assert subtracted.configs["cleanup.policy"] == "compact"


@pytest.mark.parametrize(("op", "verb"), [(APPEND, "append"), (SUBTRACT, "subtract")])
def test_append_and_subtract_on_non_list_configs_are_invalid(
    controller: Controller, op: int, verb: str
) -> None:
    controller.create_topic("t", 1)
    with pytest.raises(
        InvalidConfigError,
        match=re.escape(f"Config value {verb} is not allowed for config key: retention.ms"),
    ):
        controller.incremental_alter_configs("t", [("retention.ms", op, "1")])


def test_unknown_alter_op_is_an_invalid_request(controller: Controller) -> None:
    controller.create_topic("t", 1)
    with pytest.raises(InvalidRequestError, match="Unknown alter config operation type: 7") as info:
        controller.incremental_alter_configs("t", [("retention.ms", 7, "1")])
    assert info.value.code == ErrorCode.invalid_request
    with pytest.raises(InvalidRequestError, match="duplicate config keys"):
        controller.incremental_alter_configs(
            "t", [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)]
        )


def test_a_failing_op_applies_none_of_the_ops(make_controller: MakeController) -> None:
    controller = make_controller()
    controller.create_topic("t", 1)
    with pytest.raises(InvalidConfigError):
        controller.incremental_alter_configs(
            "t", [("retention.ms", SET, "1"), ("segment.bytes", SET, "tiny")]
        )
    topic = make_controller().topic("t")
    assert topic is not None and dict(topic.configs) == {}


def test_remote_storage_needs_the_broker_switch(make_controller: MakeController) -> None:
    with pytest.raises(InvalidConfigError, match="Tiered Storage functionality is disabled"):
        make_controller().create_topic("t", 1, configs={"remote.storage.enable": "true"})
    tiered = make_controller({"remote.log.storage.system.enable": "true"})
    tiered.create_topic("t", 1, configs={"remote.storage.enable": "true"})
    with pytest.raises(InvalidConfigError, match="Disabling remote storage"):
        tiered.incremental_alter_configs("t", [("remote.storage.enable", SET, "false")])
    # Kafka refuses compacted tiered topics ("unsupported for the compacted topics"); Strata
    # compacts both tiers (ADR 0019), so a tiered topic may become compacted.
    tiered.incremental_alter_configs("t", [("cleanup.policy", SET, "compact")])
    assert tiered.effective_topic_config("t")["cleanup.policy"] == "compact"
    with pytest.raises(InvalidConfigError, match="must not be more than retention.ms"):
        tiered.incremental_alter_configs(
            "t", [("retention.ms", SET, "1000"), ("local.retention.ms", SET, "2000")]
        )


def test_describe_topic_config_lists_override_then_broker_synonym_then_default(
    make_controller: MakeController,
) -> None:
    controller = make_controller({"log.retention.hours": "1"})
    controller.create_topic("t", 1, configs={"retention.ms": "5000"})
    entries = {e.name: e for e in controller.describe_topic_config("t")}
    retention = entries["retention.ms"]
    assert (retention.value, retention.source, retention.is_default, retention.read_only) == (
        "5000",
        ConfigSource.TOPIC_CONFIG,
        False,
        False,
    )
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("retention.ms", "5000", ConfigSource.TOPIC_CONFIG),
        ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    segment = entries["segment.bytes"]
    assert (segment.value, segment.source, segment.is_default) == (
        "1073741824",
        ConfigSource.DEFAULT_CONFIG,
        True,
    )
    remote = entries["remote.storage.enable"]
    assert [(s.name, s.source) for s in remote.synonyms] == [
        ("log.remote.storage.enable", ConfigSource.DEFAULT_CONFIG)
    ]


def test_describe_selected_keys_skips_unknown_ones(controller: Controller) -> None:
    controller.create_topic("t", 1)
    entries = controller.describe_topic_config("t", ["segment.ms", "nope"])
    assert [e.name for e in entries] == ["segment.ms"]
    assert [e.name for e in controller.describe_broker_config(["num.partitions"])] == [
        "num.partitions"
    ]
