"""Real clients over TLS and SASL: confluent-kafka, kafka-python, aiokafka and kcat produce
and consume over SSL, SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and SASL_PLAINTEXT.

One broker for the module with four listeners: PLAINTEXT (the tests' own admin
traffic), SSL (client certificates requested), SASL_SSL and SASL_PLAINTEXT;
certificates are made at test time (tests/security_fixtures.py). The first user,
``admin``, comes from ``STRATA_BOOTSTRAP_USER``; ``alice`` is created through
``strata users create`` (AlterUserScramCredentials) as admin over SASL.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, BrokerProcess, free_port, subprocess_env
from tests.e2e.helpers import create_topic, topic_name
from tests.e2e.secure_clients import CLIENTS, Security, roundtrip
from tests.security_fixtures import Pki

ADMIN_PASSWORD = "admin-secret"
ALICE_PASSWORD = "alice-secret"


def strata(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "service", *args], cwd=REPO_ROOT, env=subprocess_env(),
                          input=stdin, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done
    return done.stdout


class SecureBroker:
    def __init__(self, process: BrokerProcess, ports: dict[str, int]) -> None:
        self.process = process
        self.ports = ports
        self.admin_config = ""

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureBroker]:
    ports = {name: free_port() for name in ("SSL", "SASL_SSL", "SASL_PLAINTEXT", "REAUTH")}
    listeners = "PLAINTEXT://127.0.0.1:{port}," + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items())
    process = BrokerProcess(
        tmp_path_factory.mktemp("secure") / "data", free_port(), listeners=listeners,
        args=["--ssl-cert", str(pki.server_cert), "--ssl-key", str(pki.server_key),
              "--ssl-ca", str(pki.ca), "--ssl-client-auth", "requested"],
        sets={"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "2",
              "connection.failed.authentication.delay.ms": "50",
              # REAUTH: a SASL_PLAINTEXT listener whose sessions last 1.5 s (a listener-prefixed
              # config: the other listeners' sessions do not expire)
              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,"
                                                "SASL_PLAINTEXT:SASL_PLAINTEXT,REAUTH:SASL_PLAINTEXT",
              "listener.name.reauth.connections.max.reauth.ms": "1500"},
        env={"STRATA_BOOTSTRAP_USER": f"admin:{ADMIN_PASSWORD}"},
    )
    process.start()
    broker = SecureBroker(process, ports)
    try:
        admin_config = process.data_dir.parent / "admin.properties"
        admin_config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                                f"sasl.username=admin\nsasl.password={ADMIN_PASSWORD}\n")
        strata("users", "create", "alice", "--password-file", "-", "-b", broker.bootstrap("SASL_PLAINTEXT"),
               "--command-config", str(admin_config), stdin=ALICE_PASSWORD)
        broker.admin_config = str(admin_config)
        yield broker
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


SASL_CASES = [("SASL_SSL", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512")]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("protocol", "mechanism"), SASL_CASES)
def test_clients_produce_and_consume_over_sasl(client: str, protocol: str, mechanism: str,
                                               secure_broker: SecureBroker, pki: Pki, request: Any) -> None:
    kcat = request.getfixturevalue("kcat") if client == "kcat" else "kcat"
    topic = topic_name(f"{mechanism}-{client}")
    create_topic(secure_broker.process.bootstrap, topic)
    security = Security(protocol, ca=str(pki.ca), mechanism=mechanism, username="alice", password=ALICE_PASSWORD)
    assert roundtrip(client, secure_broker.bootstrap(protocol), topic, security, VALUES, kcat) == VALUES


def test_sasl_plaintext_with_scram_works_for_the_bootstrap_user(secure_broker: SecureBroker) -> None:
    topic = topic_name("sasl-plaintext")
    create_topic(secure_broker.process.bootstrap, topic)
    security = Security("SASL_PLAINTEXT", mechanism="SCRAM-SHA-512", username="admin", password=ADMIN_PASSWORD)
    assert roundtrip("confluent-kafka", secure_broker.bootstrap("SASL_PLAINTEXT"), topic, security, VALUES) == VALUES


# --------------------------------------------------------------------------- refusals, on the wire


def _sasl(broker: SecureBroker) -> Any:
    from tests.e2e import rawkafka as rk

    return rk.Connection.to(broker.bootstrap("SASL_PLAINTEXT"), timeout=5.0)


def _handshake(conn: Any, mechanism: str, version: int = 1) -> Any:
    from kafka.protocol.sasl import SaslHandshakeRequest

    from tests.e2e import rawkafka as rk

    return rk.call_api(conn, SaslHandshakeRequest(mechanism=mechanism), version)


def _authenticate(conn: Any, token: bytes) -> Any:
    from kafka.protocol.sasl import SaslAuthenticateRequest

    from tests.e2e import rawkafka as rk

    return rk.call_api(conn, SaslAuthenticateRequest(auth_bytes=token), 1)


def test_a_wrong_password_is_refused_and_the_connection_closed(secure_broker: SecureBroker) -> None:
    with _sasl(secure_broker) as conn:
        assert _handshake(conn, "PLAIN").error_code == 0
        answer = _authenticate(conn, b"\0alice\0not-her-password")
        assert (answer.error_code, answer.error_message) == (58, "Authentication failed: Invalid username or password")
        assert conn.closed_by_peer()
    with _sasl(secure_broker) as conn:  # SCRAM: the proof is wrong
        from service.security.scram import ScramClient

        assert _handshake(conn, "SCRAM-SHA-256").error_code == 0
        client = ScramClient("SCRAM-SHA-256", "alice", "not-her-password")
        first = _authenticate(conn, client.first())
        assert first.error_code == 0
        answer = _authenticate(conn, client.final(first.auth_bytes))
        assert answer.error_code == 58 and "invalid credentials" in answer.error_message
        assert conn.closed_by_peer()


def test_an_unknown_user_is_refused(secure_broker: SecureBroker) -> None:
    with _sasl(secure_broker) as conn:
        assert _handshake(conn, "SCRAM-SHA-512").error_code == 0
        answer = _authenticate(conn, b"n,,n=nobody,r=0123456789abcdef")
        assert (answer.error_code, answer.error_message) == (58, "Authentication failed: Invalid user credentials")
        assert conn.closed_by_peer()
    with _sasl(secure_broker) as conn:
        assert _handshake(conn, "PLAIN").error_code == 0
        assert _authenticate(conn, b"\0nobody\0x").error_code == 58


def test_an_unknown_mechanism_is_refused_with_the_mechanisms_offered(secure_broker: SecureBroker) -> None:
    with _sasl(secure_broker) as conn:
        answer = _handshake(conn, "GSSAPI")
        assert answer.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert sorted(answer.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert conn.closed_by_peer()


def test_a_request_before_authentication_closes_the_connection(secure_broker: SecureBroker) -> None:
    from kafka.protocol.metadata import MetadataRequest

    from tests.e2e import rawkafka as rk

    with _sasl(secure_broker) as conn:
        assert rk.parse_api_versions_v0(conn.call(rk.API_VERSIONS, 0, b""))[1] == 0  # allowed
        with pytest.raises(ConnectionError):
            rk.call_api(conn, MetadataRequest(topics=[]), 1)


def test_handshake_v0_then_bare_tokens_authenticates(secure_broker: SecureBroker) -> None:
    from kafka.protocol.metadata import MetadataRequest

    from tests.e2e import rawkafka as rk

    with _sasl(secure_broker) as conn:
        assert _handshake(conn, "PLAIN", version=0).error_code == 0
        token = b"\0alice\0" + ALICE_PASSWORD.encode()
        conn.send_raw(len(token).to_bytes(4, "big") + token)
        assert conn.read_frame() == b""  # PLAIN answers an empty token
        answer = rk.call_api(conn, MetadataRequest(topics=[]), 1)
        assert [b.port for b in answer.brokers] == [secure_broker.ports["SASL_PLAINTEXT"]]


def test_a_real_client_with_a_wrong_password_is_told_authentication_failed(secure_broker: SecureBroker) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    client = AdminClient({"bootstrap.servers": secure_broker.bootstrap("SASL_PLAINTEXT"),
                          "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                          "sasl.username": "alice", "sasl.password": "wrong", "error_cb": errors.append,
                          "logger": logging.getLogger("quiet-librdkafka")})
    with pytest.raises(Exception):  # noqa: B017 - librdkafka's own timeout error
        client.list_topics(timeout=3)
    client.poll(1)  # serves error_cb
    assert any(e.code() == KafkaError._AUTHENTICATION and "invalid credentials" in e.str() for e in errors), errors


def test_garbage_on_a_tls_port_does_not_disturb_other_clients(secure_broker: SecureBroker, pki: Pki) -> None:
    import socket

    junk = [socket.create_connection(("127.0.0.1", secure_broker.ports[name]), timeout=5)
            for name in ("SSL", "SASL_SSL")]
    try:
        for sock in junk:
            sock.sendall(bytes(range(256)) * 64)
        topic = topic_name("after-garbage")
        create_topic(secure_broker.process.bootstrap, topic)
        security = Security("SASL_SSL", ca=str(pki.ca), mechanism="SCRAM-SHA-256", username="alice",
                            password=ALICE_PASSWORD)
        assert roundtrip("confluent-kafka", secure_broker.bootstrap("SASL_SSL"), topic, security, VALUES) == VALUES
    finally:
        for sock in junk:
            sock.close()


def test_users_are_listed_and_stored_salted_never_as_passwords(secure_broker: SecureBroker) -> None:
    import json

    args = ["-b", secure_broker.bootstrap("SASL_PLAINTEXT"), "--command-config", secure_broker.admin_config]
    listing = strata("users", "list", *args)
    assert "alice\tSCRAM-SHA-256 (iterations 4096), SCRAM-SHA-512 (iterations 4096)" in listing
    assert listing.startswith("admin\t")
    import gzip

    from controller.commit import current_document
    from remote_tier.filesystem import FileSystemObjectStore

    bucket = secure_broker.process.data_dir / "bucket"
    for path in (bucket / "cluster").rglob("*"):  # the metadata log's head, batches and snapshots
        stored = path.read_bytes() if path.is_file() else b""
        stored = gzip.decompress(stored) if stored[:2] == b"\x1f\x8b" else stored
        assert ALICE_PASSWORD.encode() not in stored and ADMIN_PASSWORD.encode() not in stored, path
    document = current_document(FileSystemObjectStore(bucket))
    assert document is not None
    section = document["sections"]["scram_credentials"]
    assert set(section["alice"]["SCRAM-SHA-256"]) == {"salt", "iterations", "stored_key", "server_key"}
    strata("users", "create", "bob", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
           "--password-file", "-", *args, stdin="bob-secret")
    assert "bob\tSCRAM-SHA-512 (iterations 8192)" in strata("users", "list", *args)
    strata("users", "delete", "bob", *args)
    assert "bob" not in strata("users", "list", *args)
    log = secure_broker.process.log_text()
    assert ALICE_PASSWORD not in log and ADMIN_PASSWORD not in log and "bob-secret" not in log


def test_alter_user_scram_credentials_refuses_bad_changes_with_kafkas_codes(secure_broker: SecureBroker) -> None:
    from kafka.protocol.admin.users import (
        AlterUserScramCredentialsRequest,
        DescribeUserScramCredentialsRequest,
    )

    from tests.e2e import rawkafka as rk

    upsert = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
    delete = AlterUserScramCredentialsRequest.ScramCredentialDeletion
    with rk.Connection.to(secure_broker.process.bootstrap) as conn:
        answer = rk.call_api(conn, AlterUserScramCredentialsRequest(
            deletions=[delete(name="ghost", mechanism=1)],
            upsertions=[upsert(name="weak", mechanism=1, iterations=100, salt=b"s", salted_password=b"p"),
                        upsert(name="odd", mechanism=9, iterations=4096, salt=b"s", salted_password=b"p")]), 0)
        codes = {r.user: r.error_code for r in answer.results}
        assert codes == {"ghost": 91, "weak": 93, "odd": 33}  # RESOURCE_NOT_FOUND, UNACCEPTABLE_CREDENTIAL, ...
        described = rk.call_api(conn, DescribeUserScramCredentialsRequest(
            users=[DescribeUserScramCredentialsRequest.UserName(name="ghost")]), 0)
        assert [(r.user, r.error_code) for r in described.results] == [("ghost", 91)]


def test_a_session_past_connections_max_reauth_ms_must_re_authenticate(secure_broker: SecureBroker) -> None:
    """KIP-368 on the REAUTH listener (``listener.name.reauth.connections.max.reauth.ms``
    1500): SaslAuthenticate tells the client its session lifetime; a request after it
    closes the connection; a re-authentication on the same connection before it keeps it
    going; another principal may not take the connection over; the SASL_PLAINTEXT
    listener, without the override, tells no lifetime."""
    import time

    from kafka.protocol.metadata import MetadataRequest

    from tests.e2e import rawkafka as rk

    metadata = MetadataRequest(topics=[], allow_auto_topic_creation=False)
    alice = b"\0alice\0" + ALICE_PASSWORD.encode()

    def login(conn: Any) -> Any:
        assert _handshake(conn, "PLAIN").error_code == 0
        answer = _authenticate(conn, alice)
        assert answer.error_code == 0, answer
        return answer

    with rk.Connection.to(secure_broker.bootstrap("SASL_PLAINTEXT"), timeout=5.0) as plain:
        assert login(plain).session_lifetime_ms == 0
    with rk.Connection.to(secure_broker.bootstrap("REAUTH"), timeout=5.0) as conn:
        assert 0 < login(conn).session_lifetime_ms <= 1500
        rk.call_api(conn, metadata, 1)
        time.sleep(1.7)
        with pytest.raises((ConnectionError, OSError)):  # expired, not re-authenticated: closed
            rk.call_api(conn, metadata, 1)
    with rk.Connection.to(secure_broker.bootstrap("REAUTH"), timeout=5.0) as conn:
        started = time.monotonic()
        login(conn)
        for _ in range(3):  # re-authenticated every second: 3 s on one connection
            time.sleep(1.0)
            login(conn)
            rk.call_api(conn, metadata, 1)
        assert time.monotonic() - started > 3.0
        assert _handshake(conn, "PLAIN").error_code == 0  # another principal: refused, closed
        answer = _authenticate(conn, b"\0admin\0" + ADMIN_PASSWORD.encode())
        assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert "principal" in (answer.error_message or "")
