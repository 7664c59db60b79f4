"""Real clients over TLS and SASL: confluent-kafka, kafka-python, aiokafka and kcat produce
and consume over SSL, SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and SASL_PLAINTEXT.

One broker for the module with four listeners: PLAINTEXT (the tests' own admin
traffic), SSL (client certificates requested), SASL_SSL and SASL_PLAINTEXT;
certificates are made at test time (tests/security_fixtures.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import BrokerProcess, free_port
from tests.e2e.helpers import create_topic, topic_name
from tests.e2e.secure_clients import CLIENTS, Security, roundtrip
from tests.security_fixtures import Pki


class SecureBroker:
    def __init__(self, process: BrokerProcess, ports: dict[str, int]) -> None:
        self.process = process
        self.ports = ports

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureBroker]:
    ports = {name: free_port() for name in ("SSL", "SASL_SSL", "SASL_PLAINTEXT")}
    listeners = "PLAINTEXT://127.0.0.1:{port}," + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items())
    process = BrokerProcess(
        tmp_path_factory.mktemp("secure") / "data", free_port(), listeners=listeners,
        args=["--ssl-cert", str(pki.server_cert), "--ssl-key", str(pki.server_key),
              "--ssl-ca", str(pki.ca), "--ssl-client-auth", "requested"],
        sets={"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "2"},
    )
    process.start()
    try:
        yield SecureBroker(process, ports)
    finally:
        process.kill()


VALUES = [f"record-{i}".encode() for i in range(50)]


@pytest.mark.parametrize("client", CLIENTS)
def test_clients_produce_and_consume_over_ssl(client: str, secure_broker: SecureBroker, pki: Pki,
                                              request: Any) -> None:
    kcat = request.getfixturevalue("kcat") if client == "kcat" else "kcat"
    topic = topic_name(f"ssl-{client}")
    create_topic(secure_broker.process.bootstrap, topic)
    got = roundtrip(client, secure_broker.bootstrap("SSL"), topic, Security("SSL", ca=str(pki.ca)), VALUES, kcat)
    assert got == VALUES
