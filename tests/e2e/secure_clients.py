"""Produce and consume with each client library over a secured listener.

``Security`` says how to connect, in Kafka's words (``security.protocol``,
``sasl.mechanism``, user, password, the CA file); :func:`roundtrip` produces values
with one client (confluent-kafka, kafka-python, aiokafka or kcat) and reads them back
with the same client, each translating the settings into its own options. Shares no
code with the broker.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["CLIENTS", "Security", "roundtrip"]

CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka", "kcat")


@dataclass(frozen=True)
class Security:
    protocol: str  # SSL, SASL_SSL, SASL_PLAINTEXT
    ca: str | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    cert: str | None = None  # client certificate (SSL)
    key: str | None = None

    def librdkafka(self) -> dict[str, str]:
        conf = {"security.protocol": self.protocol}
        if self.ca:
            conf["ssl.ca.location"] = self.ca
        if self.cert:
            conf["ssl.certificate.location"], conf["ssl.key.location"] = self.cert, str(self.key)
        if self.mechanism:
            conf.update({"sasl.mechanism": self.mechanism, "sasl.username": str(self.username),
                         "sasl.password": str(self.password)})
        return conf

    def kafka_python(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"security_protocol": self.protocol}
        if self.ca:
            conf["ssl_cafile"] = self.ca
        if self.cert:
            conf["ssl_certfile"], conf["ssl_keyfile"] = self.cert, self.key
        if self.mechanism:
            conf.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": self.username,
                         "sasl_plain_password": self.password})
        return conf

    def aiokafka(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"security_protocol": self.protocol}
        if self.ca:
            from aiokafka.helpers import create_ssl_context

            conf["ssl_context"] = create_ssl_context(cafile=self.ca, certfile=self.cert, keyfile=self.key)
        if self.mechanism:
            conf.update({"sasl_mechanism": self.mechanism, "sasl_plain_username": self.username,
                         "sasl_plain_password": self.password})
        return conf


def roundtrip(client: str, bootstrap: str, topic: str, security: Security, values: list[bytes],
              kcat: str = "kcat") -> list[bytes]:
    """Produce ``values`` to partition 0 of ``topic`` and read that many back from the start."""
    if client == "confluent-kafka":
        return _confluent(bootstrap, topic, security, values)
    if client == "kafka-python":
        return _kafka_python(bootstrap, topic, security, values)
    if client == "aiokafka":
        return asyncio.run(_aiokafka(bootstrap, topic, security, values))
    if client == "kcat":
        return _kcat(kcat, bootstrap, topic, security, values)
    raise ValueError(client)


def _confluent(bootstrap: str, topic: str, security: Security, values: list[bytes]) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    conf = {"bootstrap.servers": bootstrap, **security.librdkafka()}
    producer = Producer({**conf, "linger.ms": 5})
    errors: list[Any] = []
    for value in values:
        producer.produce(topic, value=value, partition=0,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and not errors, errors
    consumer = Consumer({**conf, "group.id": f"{topic}-reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < len(values) and time.monotonic() < deadline:
            for msg in consumer.consume(len(values) - len(out), 0.5):
                assert msg.error() is None, msg.error()
                out.append(msg.value())
    finally:
        consumer.close()
    return out


def _kafka_python(bootstrap: str, topic: str, security: Security, values: list[bytes]) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    conf = security.kafka_python()
    producer = KafkaProducer(bootstrap_servers=bootstrap, **conf)
    try:
        for value in values:
            producer.send(topic, value=value, partition=0)
        producer.flush(30)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10_000, **conf)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        out: list[bytes] = []
        for msg in consumer:
            out.append(msg.value)
            if len(out) == len(values):
                break
        return out
    finally:
        consumer.close()


async def _aiokafka(bootstrap: str, topic: str, security: Security, values: list[bytes]) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    conf = security.aiokafka()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **conf)
    await producer.start()
    try:
        for value in values:
            await producer.send(topic, value=value, partition=0)
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", **conf)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(out) < len(values) and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=500)
            out.extend(m.value for m in batch.get(tp, []))
        return out
    finally:
        await consumer.stop()


def _kcat(kcat: str, bootstrap: str, topic: str, security: Security, values: list[bytes]) -> list[bytes]:
    x: list[str] = []
    for key, value in security.librdkafka().items():
        x += ["-X", f"{key}={value}"]
    assert all(b"\n" not in v for v in values)
    done = subprocess.run([kcat, "-b", bootstrap, *x, "-P", "-t", topic, "-p", "0"],
                          input=b"\n".join(values) + b"\n", check=False, timeout=60, capture_output=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    done = subprocess.run([kcat, "-b", bootstrap, *x, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                           "-c", str(len(values)), "-e", "-f", "%s\n"],
                          check=False, timeout=60, capture_output=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return [line for line in done.stdout.split(b"\n") if line]


def sasl_login(bootstrap: str, username: str, password: str) -> Any:
    """A raw connection (tests/e2e/rawkafka.py) authenticated with SASL/PLAIN (v1)."""
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

    from tests.e2e import rawkafka as rk

    conn = rk.Connection.to(bootstrap, timeout=10.0)
    assert rk.call_api(conn, SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    token = b"\0" + username.encode() + b"\0" + password.encode()
    answer = rk.call_api(conn, SaslAuthenticateRequest(auth_bytes=token), 1)
    assert answer.error_code == 0, answer
    return conn
