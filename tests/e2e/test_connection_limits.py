"""Connection limits on a real broker: a flood of connections from other addresses cannot
use up the broker's open files (it keeps its controller lease, its established clients and
its admin API, and everything acknowledged is read back), ``max.connections.per.ip`` and
its overrides close the connection beyond, and an IP over its ``connection_creation_rate``
quota (``strata quotas --entity-type ips``) has its extra connections held and closed
unserved, and the limits change at run time as dynamic broker configs. The flood comes from 127.0.0.2 and up (all of 127/8 is loopback on Linux); the
test's own clients from 127.0.0.1."""

from __future__ import annotations

import os
import selectors
import socket
import ssl
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka.admin import ConfigResource, ConfigSource

from tests.conftest import REPO_ROOT, subprocess_env
from tests.e2e.helpers import admin, consume, create_topic, producer, topic_name, wait_until

#: ApiVersions v0 with correlation id 1 and client id "flood"
_API_VERSIONS = struct.pack(">hhih", 18, 0, 1, 5) + b"flood"


@contextmanager
def connections_from(address: str, count: int, port: int) -> Iterator[list[socket.socket]]:
    """``count`` TCP connections to the broker from ``address`` (the kernel completes them
    from the listen backlog whether or not the broker accepted them yet)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket()
            socks.append(s)
            s.bind((address, 0))
            s.settimeout(5)
            s.connect(("127.0.0.1", port))
        yield socks
    finally:
        for s in socks:
            s.close()


def probe(socks: list[socket.socket], wait_s: float = 2.0) -> tuple[list[socket.socket], dict[socket.socket, float]]:
    """Send ApiVersions on each; (those answered, those the broker closed → seconds from the
    probe to the close) after ``wait_s``. The rest wait unaccepted."""
    served: list[socket.socket] = []
    closed: dict[socket.socket, float] = {}
    started = time.monotonic()
    with selectors.DefaultSelector() as sel:
        for s in socks:
            try:
                s.sendall(struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS)
            except OSError:
                closed[s] = 0.0
                continue
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        while sel.get_map() and time.monotonic() < started + wait_s:
            for key, _ in sel.select(0.1):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                sel.unregister(s)
                try:
                    data = s.recv(4)
                except OSError:
                    data = b""
                (served.append(s) if data else closed.__setitem__(s, time.monotonic() - started))
    for s in socks:
        s.setblocking(True)
    return served, closed


def closed_by_the_broker(socks: list[socket.socket], wait_s: float = 1.0) -> list[socket.socket]:
    """The connections the other end closed within ``wait_s`` (nothing is sent on them)."""
    closed = []
    with selectors.DefaultSelector() as sel:
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        deadline = time.monotonic() + wait_s
        while sel.get_map() and time.monotonic() < deadline:
            for key, _ in sel.select(0.1):
                sel.unregister(key.fileobj)
                try:
                    data = key.fileobj.recv(1)  # type: ignore[union-attr]
                except OSError:
                    data = b""
                if not data:
                    closed.append(key.fileobj)
    return closed  # type: ignore[return-value]


def hundreds(p: Any, topic: str, acked: list[bytes]) -> Any:
    """``produce(prefix)``: 100 records to partition 0, waited for; the acknowledged in ``acked``."""
    def produce(prefix: str) -> None:
        for i in range(100):
            p.produce(topic, f"{prefix}-{i}".encode(), partition=0,
                      on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None)
        assert p.flush(30) == 0

    return produce


def open_files(broker: Any) -> int:
    return len(os.listdir(f"/proc/{broker.pid}/fd"))


def metrics(broker: Any, context: ssl.SSLContext | None = None) -> str:
    url = broker.admin_url.replace("http://", "https://") if context is not None else broker.admin_url
    with urllib.request.urlopen(f"{url}/metrics", timeout=5, context=context) as answer:
        return str(answer.read().decode())


def answered(call: Any, *args: Any) -> Any:
    """``call(*args)``, or None when the connection was refused (descriptors still short)."""
    try:
        return call(*args)
    except OSError:
        return None


def counter(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}{{{want}}} in /metrics")


def test_a_connection_flood_cannot_use_up_the_brokers_open_files(start_broker: Any) -> None:
    broker = start_broker(open_files=256)  # connections.reserved.fds: 64 of them kept for files
    topic = topic_name("flood")
    create_topic(broker.bootstrap, topic)
    acked: list[bytes] = []
    produce = hundreds(producer(broker.bootstrap), topic, acked)  # connected before the flood, from 127.0.0.1

    produce("before")
    assert len(acked) == 100
    with connections_from("127.0.0.2", 150, broker.port) as one, \
            connections_from("127.0.0.3", 150, broker.port) as two:
        served, _ = probe(one + two)
        # the flood takes what the open files allow for connections, not the reserve
        assert 120 <= len(served) < 192, len(served)
        assert open_files(broker) <= 200
        produce("during")  # the established producer goes on
        assert len(acked) == 200
        with urllib.request.urlopen(f"{broker.admin_url}/v1/health", timeout=5) as health:
            assert health.status == 200
        text = metrics(broker)
        assert counter(text, "strata_connections_refused_total", reason="open_files") >= 1
        assert 'strata_connections_max 192.0' in text
    log = broker.log_text()
    assert "Too many open files" not in log
    assert "cannot read the controller lease" not in log
    assert log.count("refusing a connection from") <= 3  # a flood is not a flood of log lines
    read = [m.value() for m in consume(broker.bootstrap, topic, [0], len(acked))]
    assert read == acked


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_a_flood_of_http_connections_cannot_use_up_the_brokers_open_files(start_broker: Any, pki: Any,
                                                                           tls: bool) -> None:
    """Over HTTPS the flood never starts its handshakes: each is screened before one."""
    https = {"args": ["--ssl-cert", str(pki.server_cert), "--ssl-key", str(pki.server_key)],
             "sets": {"http.ssl.enable": "true"}} if tls else {}
    broker = start_broker(open_files=256, **https)
    context = ssl.create_default_context(cafile=str(pki.ca)) if tls else None
    topic = topic_name("http-flood")
    create_topic(broker.bootstrap, topic)
    acked: list[bytes] = []
    produce = hundreds(producer(broker.bootstrap), topic, acked)

    produce("before")
    with connections_from("127.0.0.2", 150, broker.http_port) as one, \
            connections_from("127.0.0.3", 150, broker.http_port) as two:
        closed = closed_by_the_broker(one + two)
        assert len(closed) >= 60  # beyond what the open files allow HTTP: closed at once
        assert open_files(broker) <= 232  # half the 64 kept for files (a few in passing), not all 256
        produce("during")
    assert len(acked) == 200
    log = broker.log_text()
    assert "Too many open files" not in log and "cannot read the controller lease" not in log
    text = wait_until(lambda: answered(metrics, broker, context),
                      "/metrics once the flood's connections are seen closed")
    assert counter(text, "strata_connections_refused_total", listener="HTTP", reason="open_files") >= 60
    read = [m.value() for m in consume(broker.bootstrap, topic, [0], len(acked))]
    assert read == acked


def strata_quotas(broker: Any, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "service", "quotas", *args, "-b", broker.bootstrap],
                          cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done
    return done.stdout


def test_per_ip_limits_and_ip_connection_rate_quotas(start_broker: Any) -> None:
    broker = start_broker(sets={"max.connections.per.ip": "4", "max.connections.per.ip.overrides": "127.0.0.3:6,127.0.0.1:100",
                                "quota.window.num": "2", "quota.window.size.seconds": "1"})
    with connections_from("127.0.0.2", 7, broker.port) as socks:
        served, closed = probe(socks)
        assert (len(served), len(closed)) == (4, 3)
        served[0].close()  # its slot is free once the broker sees it closed

        def one_more_is_served() -> bool:
            with connections_from("127.0.0.2", 1, broker.port) as again:
                return len(probe(again, 1.0)[0]) == 1

        wait_until(one_more_is_served, "a slot of 127.0.0.2 freed", timeout=10)
    with connections_from("127.0.0.3", 8, broker.port) as socks:
        served, closed = probe(socks)
        assert (len(served), len(closed)) == (6, 2)  # its override
    text = metrics(broker)
    assert counter(text, "strata_connections_refused_total", reason="max_connections_per_ip") >= 5

    strata_quotas(broker, "--alter", "--entity-type", "ips", "--entity-name", "127.0.0.4",
                  "--add-config", "connection_creation_rate=2")
    assert "ip=127.0.0.4\tconnection_creation_rate=2" in strata_quotas(broker, "--describe", "--entity-type", "ips")
    with connections_from("127.0.0.4", 4, broker.port) as socks:
        served, closed = probe(socks, 3.0)
        # two a second: the other two are held unserved for the throttle time, then closed
        assert (len(served), len(closed)) == (2, 2)
        assert min(closed.values()) >= 0.3  # (3/s - 2/s) / 2/s x 1 s = 0.5 s, not at once
    with connections_from("127.0.0.5", 3, broker.port) as socks:  # another address: no quota
        assert len(probe(socks)[0]) == 3
    assert counter(metrics(broker), "strata_connections_refused_total", reason="ip_connection_rate") == 2
    topic = topic_name("limits")  # the test's own clients, on 127.0.0.1's override, go on
    create_topic(broker.bootstrap, topic)
    p = producer(broker.bootstrap)
    p.produce(topic, b"x")
    assert p.flush(30) == 0


def strata_configs(broker: Any, *args: str, ok: bool = True) -> str:
    done = subprocess.run([sys.executable, "-m", "service", "configs", "--entity-type", "brokers", *args,
                           "-b", broker.bootstrap], cwd=REPO_ROOT, env=subprocess_env(), capture_output=True,
                          text=True, timeout=60, check=False)
    assert (done.returncode == 0) == ok, done
    return done.stdout + done.stderr


def test_connection_limits_change_at_run_time_as_dynamic_broker_configs(start_broker: Any) -> None:
    """`strata configs` (kafka-configs.sh --entity-type brokers --entity-default | --entity-name 1):
    applied without a restart, kept across one; confluent-kafka's DescribeConfigs shows them."""
    broker = start_broker()
    client = admin(broker.bootstrap)

    def described() -> dict[str, Any]:
        res = ConfigResource(ConfigResource.Type.BROKER, "1")
        return dict(client.describe_configs([res])[res].result(30))

    def served_from(address: str, count: int) -> int:
        with connections_from(address, count, broker.port) as socks:
            return len(probe(socks)[0])

    strata_configs(broker, "--entity-default", "--alter",
                   "--add-config", "max.connections.per.ip=3,max.connections.per.ip.overrides=127.0.0.1:100")
    assert served_from("127.0.0.2", 5) == 3
    strata_configs(broker, "--entity-name", "1", "--alter", "--add-config", "max.connections.per.ip=1")
    assert served_from("127.0.0.3", 3) == 1  # this broker's own beats the cluster default
    entry = described()["max.connections.per.ip"]
    assert (entry.value, entry.source, entry.is_read_only) == ("1", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert ("max.connections.per.ip=1 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:max.connections.per.ip=1, "
            "DYNAMIC_DEFAULT_BROKER_CONFIG:max.connections.per.ip=3, DEFAULT_CONFIG:max.connections.per.ip=2147483647}"
            ) in strata_configs(broker, "--entity-name", "1", "--describe")
    shown = strata_configs(broker, "--entity-default", "--describe")
    assert "max.connections.per.ip=3 " in shown and "max.connections.per.ip.overrides=127.0.0.1:100" in shown
    refused = strata_configs(broker, "--entity-name", "1", "--alter", "--add-config", "log.retention.hours=1", ok=False)
    assert "Cannot update these configs dynamically" in refused  # what Strata reads only at start

    broker.restart()  # kept in the cluster metadata
    client = admin(broker.bootstrap)
    assert described()["max.connections.per.ip"].value == "1"
    assert served_from("127.0.0.4", 3) == 1
    strata_configs(broker, "--entity-name", "1", "--alter", "--delete-config", "max.connections.per.ip")
    strata_configs(broker, "--entity-default", "--alter", "--delete-config", "max.connections.per.ip")
    assert served_from("127.0.0.5", 5) == 5
    assert described()["max.connections.per.ip"].source == ConfigSource.DEFAULT_CONFIG.value


def test_descriptors_are_bounded_so_partitions_are_not_limited_by_the_open_files(start_broker: Any) -> None:
    """Segments' ``.log`` files and indexes are opened on use and bounded (ulimit -n / 4 and / 8
    here: 256 and 128), least recently used closed first: 1,500 partitions, written to and read,
    fit in 1,024 open files, where one descriptor a partition refused more than 690."""
    broker = start_broker(open_files=1024)
    topic = topic_name("many-fds")
    partitions = 1500
    create_topic(broker.bootstrap, topic, partitions=partitions)
    p = producer(broker.bootstrap, **{"linger.ms": 5})
    value = b"x" * 3000  # two batches a partition: past index.interval.bytes, an index entry each
    acked = []
    for _ in range(2):
        for partition in range(partitions):
            p.produce(topic, value=value, partition=partition,
                      on_delivery=lambda err, msg: acked.append(msg.partition()) if err is None else None)
        assert p.flush(60) == 0
    assert len(acked) == 2 * partitions
    assert open_files(broker) <= 256 + 128 + 150, open_files(broker)
    assert "Too many open files" not in broker.log_text()
    read = consume(broker.bootstrap, topic, [0, 299, 750, 1499], 8)
    assert [len(m.value()) for m in read] == [3000] * 8
    assert open_files(broker) <= 256 + 128 + 150, open_files(broker)
