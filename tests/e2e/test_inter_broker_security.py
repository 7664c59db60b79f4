"""A cluster whose brokers talk to each other on a SASL_SSL listener: registration,
heartbeats, forwarded admin requests and replication all authenticate with SCRAM over
TLS, while clients use a PLAINTEXT listener. One lean test: three brokers, a replicated
topic, acks=all."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import NewTopic

from tests.e2e.helpers import (
    CLIENT_TIMEOUT_S,
    admin,
    consume,
    produce_values,
    topic_name,
    wait_for_topic,
)
from tests.security_fixtures import Pki


def test_a_cluster_with_a_sasl_ssl_inter_broker_listener_replicates(start_cluster: Any, pki: Pki,
                                                                      tmp_path: Any) -> None:
    config = tmp_path / "broker.properties"  # the inter-broker credentials, not on a command line
    config.write_text(
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="broker" password="inter-broker-secret";\n')
    cluster = start_cluster(
        3,
        listeners="PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{port2}",
        args=["--config", str(config), "--ssl-cert", str(pki.server_cert), "--ssl-key", str(pki.server_key),
              "--ssl-ca", str(pki.ca)],
        sets={"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
              "inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
              "default.replication.factor": "3", "min.insync.replicas": "2"},
    )
    registered = cluster.metadata()
    assert all([e["name"] for e in b["endpoints"]] == ["INTERNAL", "PLAINTEXT"]
               and b["endpoints"][0]["security_protocol"] == 3 for b in registered["brokers"])
    assert len(registered["brokers"]) == 3 and not any(b["fenced"] for b in registered["brokers"])
    assert "broker" in registered["sections"]["scram_credentials"]  # made by the first controller
    topic = topic_name("inter-broker-sasl")
    client = admin(cluster.bootstrap)  # held until its futures are resolved
    futures = client.create_topics([NewTopic(topic, 3, 3)], request_timeout=CLIENT_TIMEOUT_S)
    futures[topic].result(timeout=CLIENT_TIMEOUT_S + 5)
    wait_for_topic(cluster.bootstrap, topic, 3)
    values = [f"v{i}".encode() for i in range(30)]
    for partition in range(3):
        produce_values(cluster.bootstrap, topic, values, partition=partition, acks="all")
    assert sorted(m.value() for m in consume(cluster.bootstrap, topic, [0, 1, 2], 90)) == sorted(values * 3)
    final = cluster.metadata()
    states = [p for t in final["topics"] if t["name"] == topic for p in t["partition_states"]]
    assert [len(p["replicas"]) for p in states] == [3, 3, 3]
    assert all(len(p["isr"]) >= 2 for p in states), states  # followers caught up over SASL_SSL
    for broker in cluster.brokers.values():
        assert "inter-broker-secret" not in broker.log_text()
