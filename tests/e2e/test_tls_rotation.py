"""Certificate rotation on a running broker: its certificate files are replaced, new
connections (Kafka and HTTP listeners) get the new certificate, connections opened
before keep working, and nothing produced is lost; a broken file is refused and
counted while the broker keeps serving the last good certificate."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import struct
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import BrokerProcess, free_port
from tests.e2e import helpers


def _served(port: int, ca: Path, sni: bool = True) -> bytes:
    """The DER certificate a new TLS connection to ``port`` is served (verified with
    ``ca``; ``sni=False``: the client names no server, as librdkafka to an IP address)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = sni
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost" if sni else None) as tls:
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        return der


def _der(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


def _metrics(broker: BrokerProcess, ca: Path) -> dict[tuple[str, str], float]:
    url = f"https://127.0.0.1:{broker.http_port}/metrics"
    with urllib.request.urlopen(url, timeout=10, context=ssl.create_default_context(cafile=str(ca))) as resp:
        text = resp.read().decode()
    return {(s.name, s.labels.get("context", "")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name.startswith("strata_tls_")}


class _Secret:
    """A directory laid out as Kubernetes mounts a TLS secret: ``tls.crt`` and ``tls.key``
    are symlinks through ``..data`` into a versioned folder; an update writes a new folder,
    swaps ``..data`` in one rename and deletes the old folder."""

    def __init__(self, root: Path) -> None:
        self.root, self.version = root, 0
        root.mkdir()
        for name in ("tls.crt", "tls.key"):
            (root / name).symlink_to(Path("..data") / name)

    @property
    def files(self) -> tuple[Path, Path]:
        return self.root / "tls.crt", self.root / "tls.key"

    def put(self, cert: Path, key: Path) -> None:
        self.version += 1
        folder = self.root / f"..v{self.version}"
        folder.mkdir()
        shutil.copyfile(cert, folder / "tls.crt")
        shutil.copyfile(key, folder / "tls.key")
        (self.root / "..data_tmp").symlink_to(folder.name)
        os.replace(self.root / "..data_tmp", self.root / "..data")
        old = self.root / f"..v{self.version - 1}"
        if old.exists():
            shutil.rmtree(old)


def _api_versions(tls: ssl.SSLSocket, correlation: int) -> int:
    """Send ApiVersions v0 on an open connection: the correlation id answered."""
    client = b"rotation-test"
    body = struct.pack(">hhih", 18, 0, correlation, len(client)) + client
    tls.sendall(struct.pack(">i", len(body)) + body)
    head = b""
    while len(head) < 8:
        chunk = tls.recv(8 - len(head))
        assert chunk, "the broker closed the connection"
        head += chunk
    size, answered = struct.unpack(">ii", head)
    rest = size - 4
    while rest:
        rest -= len(tls.recv(rest))
    return answered


def test_a_running_broker_serves_a_replaced_certificate_and_loses_nothing(tmp_path, pki, kcat) -> None:  # type: ignore[no-untyped-def]
    secret = _Secret(tmp_path / "secret")
    secret.put(pki.server_cert, pki.server_key)
    live = secret.files
    tls_port = free_port()
    broker = BrokerProcess(
        tmp_path / "data", free_port(),
        listeners=f"PLAINTEXT://127.0.0.1:{{port}},SSL://127.0.0.1:{tls_port}",
        args=["--ssl-cert", str(live[0]), "--ssl-key", str(live[1])],
        sets={"ssl.reload.interval.ms": "200", "http.ssl.enable": "true"},
    )
    ssl_conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    topic = helpers.topic_name("rotation")
    acked: list[int] = []

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        acked.append(msg.offset())

    try:
        broker.start()
        helpers.create_topic(broker.bootstrap, topic)
        assert _served(tls_port, pki.ca) == _der(pki.server_cert)
        old_ctx = ssl.create_default_context(cafile=str(pki.ca))
        held = old_ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls_port), timeout=10),
                                   server_hostname="localhost")  # opened before the rotation, kept
        assert _api_versions(held, 1) == 1
        before = helpers.producer(f"127.0.0.1:{tls_port}", **ssl_conf)
        for i in range(100):
            before.produce(topic, value=b"before-%d" % i, on_delivery=on_delivery)
        assert before.flush(30) == 0

        rotated = pki.server("rotated")
        secret.put(*rotated)
        helpers.wait_until(lambda: _served(tls_port, pki.ca) == _der(rotated[0]),
                           "the SSL listener serving the new certificate", timeout=15)
        assert _served(tls_port, pki.ca, sni=False) == _der(rotated[0])
        assert _served(broker.http_port, pki.ca) == _der(rotated[0])  # the HTTP listener too
        assert _served(broker.http_port, pki.ca, sni=False) == _der(rotated[0])
        assert held.getpeercert(binary_form=True) == _der(pki.server_cert)
        assert _api_versions(held, 2) == 2  # the connection from before still answers
        held.close()
        for i in range(100):
            before.produce(topic, value=b"after-%d" % i, on_delivery=on_delivery)
        assert before.flush(30) == 0
        assert len(acked) == 200

        shared = "listener SSL, HTTP listener"  # the same settings: one context
        metrics = _metrics(broker, pki.ca)
        assert metrics[("strata_tls_reloads_total", shared)] == 1
        assert metrics[("strata_tls_reload_failures_total", shared)] == 0
        from cryptography import x509

        expiry = x509.load_pem_x509_certificate(rotated[0].read_bytes()).not_valid_after_utc.timestamp()
        assert metrics[("strata_tls_certificate_expiry_timestamp_seconds", shared)] == expiry

        secret.put(rotated[0], pki.server("stray")[1])  # a key that is not the certificate's
        helpers.wait_until(lambda: _metrics(broker, pki.ca)[("strata_tls_reload_failures_total", shared)] == 1,
                           "the broken key refused", timeout=15)
        assert _served(tls_port, pki.ca) == _der(rotated[0])
        assert "the changed files are not used" in broker.log_tail()

        # read back over a new TLS connection (kcat: librdkafka verifying the new certificate)
        out = subprocess.run(
            [kcat, "-C", "-b", f"127.0.0.1:{tls_port}", "-t", topic, "-o", "beginning", "-e", "-q",
             "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca}"],
            capture_output=True, timeout=60, check=True,
        ).stdout.split(b"\n")
        assert out[:-1] == [b"before-%d" % i for i in range(100)] + [b"after-%d" % i for i in range(100)]
        assert sorted(acked) == list(range(200))
    finally:
        broker.kill()
