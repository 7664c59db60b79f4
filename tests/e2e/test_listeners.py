"""Several listeners on one broker: each client is answered with the endpoints of the
listener it connected on (Metadata, DescribeCluster, FindCoordinator), as Kafka does."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient

from tests.conftest import REPO_ROOT, BrokerProcess, free_port, subprocess_env
from tests.e2e.helpers import CLIENT_TIMEOUT_S


@pytest.fixture(scope="module")
def two_listeners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    other = free_port()
    broker = BrokerProcess(
        tmp_path_factory.mktemp("listeners") / "data", free_port(),
        listeners=f"PLAINTEXT://127.0.0.1:{{port}},EXTERNAL://127.0.0.1:{other}",
        sets={"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
              "advertised.listeners": f"PLAINTEXT://127.0.0.1:{{port}},EXTERNAL://localhost:{other}",
              "group.initial.rebalance.delay.ms": "0"},
    )
    broker.sets["advertised.listeners"] = broker.sets["advertised.listeners"].format(port=broker.port)
    broker.start()
    try:
        yield broker, other
    finally:
        broker.kill()


def test_metadata_names_the_brokers_at_the_listener_the_client_came_in_on(two_listeners) -> None:  # type: ignore[no-untyped-def]
    broker, other = two_listeners
    inside = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=CLIENT_TIMEOUT_S)
    outside = AdminClient({"bootstrap.servers": f"127.0.0.1:{other}"}).list_topics(timeout=CLIENT_TIMEOUT_S)
    assert [(b.host, b.port) for b in inside.brokers.values()] == [("127.0.0.1", broker.port)]
    assert [(b.host, b.port) for b in outside.brokers.values()] == [("localhost", other)]


def test_describe_cluster_and_find_coordinator_answer_the_clients_listener(two_listeners) -> None:  # type: ignore[no-untyped-def]
    _, other = two_listeners
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{other}", request_timeout_ms=15_000)
    try:
        cluster = admin.describe_cluster()
        assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [("localhost", other)]
    finally:
        admin.close()
    client = AdminClient({"bootstrap.servers": f"127.0.0.1:{other}"})
    group = client.describe_consumer_groups(["g-listeners"])["g-listeners"].result(timeout=30)
    assert (group.coordinator.host, group.coordinator.port) == ("localhost", other)


def test_listen_beside_listeners_is_refused_before_anything_starts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    done = subprocess.run(
        [sys.executable, "-m", "service", "up", "--data-dir", str(tmp_path / "d"), "--listen",
         "127.0.0.1:9092", "--listeners", "PLAINTEXT://127.0.0.1:9093", "--http", "off"],
        cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2, done
    assert "--listen and listeners" in done.stderr
    assert not (tmp_path / "d").exists()


def test_each_tls_listener_takes_its_own_listener_prefixed_configs(tmp_path, pki) -> None:  # type: ignore[no-untyped-def]
    """Kafka's listener-prefixed configs: ``listener.name.<l>.ssl.*`` give a listener its
    own certificate and client authentication; the others keep the broker's ``ssl.*``."""
    import ssl

    from confluent_kafka import KafkaException

    internal_cert, internal_key = pki.client("internal-listener")
    internal = free_port()
    broker = BrokerProcess(
        tmp_path / "data", free_port(),
        listeners=f"SSL://127.0.0.1:{{port}},INTERNAL://127.0.0.1:{internal}",
        args=["--ssl-cert", str(pki.server_cert), "--ssl-key", str(pki.server_key), "--ssl-ca", str(pki.ca)],
        sets={"listener.security.protocol.map": "SSL:SSL,INTERNAL:SSL", "inter.broker.listener.name": "SSL",
              # PEM text, as Kafka's ssl.keystore.certificate.chain / ssl.keystore.key take
              "listener.name.internal.ssl.keystore.certificate.chain": internal_cert.read_text(),
              "listener.name.internal.ssl.keystore.key": internal_key.read_text(),
              "listener.name.INTERNAL.ssl.client.auth": "required"},
    )
    try:
        broker.start()

        def served_name(port: int, cert: tuple[str, str] | None = None) -> str:
            ctx = ssl.create_default_context(cafile=str(pki.ca))
            ctx.check_hostname = False  # the internal listener's certificate names no host
            if cert is not None:
                ctx.load_cert_chain(*cert)
            import socket

            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                    ctx.wrap_socket(raw) as tls:
                subject = dict(item for rdn in tls.getpeercert()["subject"] for item in rdn)
                return str(subject["commonName"])

        alice = (str(pki.client("alice")[0]), str(pki.client("alice")[1]))
        assert served_name(broker.port) == "localhost"  # the broker's ssl.* certificate
        assert served_name(internal, alice) == "internal-listener"  # the listener's own
        conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
                "ssl.endpoint.identification.algorithm": "none"}
        # no client certificate: fine on SSL (ssl.client.auth none), refused on INTERNAL (required)
        AdminClient({"bootstrap.servers": broker.bootstrap, **conf}).list_topics(timeout=CLIENT_TIMEOUT_S)
        with pytest.raises(KafkaException):
            AdminClient({"bootstrap.servers": f"127.0.0.1:{internal}", **conf}).list_topics(timeout=5)
        with_cert = {**conf, "ssl.certificate.location": alice[0], "ssl.key.location": alice[1]}
        AdminClient({"bootstrap.servers": f"127.0.0.1:{internal}", **with_cert}).list_topics(
            timeout=CLIENT_TIMEOUT_S)
    finally:
        broker.kill()


def test_an_unknown_listener_prefixed_config_is_refused_with_what_may_be_prefixed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    done = subprocess.run(
        [sys.executable, "-m", "service", "up", "--data-dir", str(tmp_path / "d"), "--listen",
         f"127.0.0.1:{free_port()}", "--http", "off", "--set", "listener.name.plaintext.log.retention.ms=1"],
        cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "listener.name.plaintext.log.retention.ms" in done.stderr + done.stdout
    assert "listener.name.<listener>.ssl.*" in done.stderr + done.stdout
