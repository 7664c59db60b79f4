"""Kafka's listener configs: parsing, the rules and messages KafkaConfig enforces."""

from __future__ import annotations

import pytest

from common.config.broker import BrokerConfig
from service.security.listeners import SecurityProtocol, listener_settings


def settings(**configs: str):  # type: ignore[no-untyped-def]
    return listener_settings(BrokerConfig({k.replace("_", "."): v for k, v in configs.items()}))


def test_the_shorthand_is_one_plaintext_listener_advertised_as_bound() -> None:
    s = listener_settings(BrokerConfig({}), shorthand="127.0.0.1:9092")
    assert [str(x) for x in s.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert s.advertised == s.listeners and s.inter_broker == "PLAINTEXT"


def test_named_listeners_take_their_protocol_from_the_map_and_advertise_the_inter_broker_one_first() -> None:
    s = listener_settings(BrokerConfig({
        "listeners": "external://:9093,INTERNAL://127.0.0.1:9094",
        "advertised.listeners": "EXTERNAL://kafka.example.com:9093,INTERNAL://10.0.0.1:9094",
        "listener.security.protocol.map": "EXTERNAL:SASL_SSL,INTERNAL:SSL",
        "inter.broker.listener.name": "INTERNAL",
    }))
    assert {x.name: x.protocol for x in s.listeners} == {
        "EXTERNAL": SecurityProtocol.SASL_SSL, "INTERNAL": SecurityProtocol.SSL}
    endpoints = s.advertised_endpoints()
    assert [(e.name, e.host, e.port, e.security_protocol) for e in endpoints] == [
        ("INTERNAL", "10.0.0.1", 9094, 1), ("EXTERNAL", "kafka.example.com", 9093, 3)]
    assert s.inter_broker_protocol == SecurityProtocol.SSL


@pytest.mark.parametrize(("configs", "message"), [
    ({"listeners": "FOO://:9092"}, "no security protocol defined for listener FOO"),
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "two listeners of one name"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, "two listeners on one port"),
    ({"listeners": "PLAINTEXT:9092"}, "is not NAME://HOST:PORT"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "SSL://h:9093"},
     "must be equal to or a subset"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
     "nonroutable meta-address"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9093", "inter.broker.listener.name": "OTHER"},
     "must be a listener name defined in advertised.listeners"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9093", "inter.broker.listener.name": "SSL",
      "security.inter.broker.protocol": "SSL"}, "Only one of inter.broker.listener.name"),
    ({"listeners": "SASL_SSL://:9093,SSL://:9094"}, "must be a listener name"),
])
def test_bad_listener_configs_are_refused_with_kafkas_reason(configs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        listener_settings(BrokerConfig(configs))


def test_the_shorthand_and_listeners_together_are_refused() -> None:
    with pytest.raises(ValueError, match="give one"):
        listener_settings(BrokerConfig({"listeners": "PLAINTEXT://:9092"}), shorthand="127.0.0.1:9092")


def test_every_interface_is_advertised_as_the_host_name_and_bound_ports_replace_port_zero() -> None:
    s = listener_settings(BrokerConfig({"listeners": "PLAINTEXT://0.0.0.0:0,SSL://:9093"}))
    assert all(a.host not in ("", "0.0.0.0") for a in s.advertised)
    bound = s.with_bound_ports({"PLAINTEXT": 40001, "SSL": 9093})
    assert [a.port for a in bound.advertised] == [40001, 9093]
