"""TLS under the connection loop, in process: a KafkaServer on a TLS listener with a
dispatcher that echoes who it was talking to, and real ``ssl`` clients."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import ssl
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from controller.broker_config import BrokerConfig
from local_tier.segment import FileRegion
from service.security.listeners import SecurityProtocol
from service.security.principal_mapping import PrincipalMapper
from service.security.session import ListenerSecurity
from service.security.tls import tls_settings
from service.security.tls_engine import listener_context
from service.server import KafkaServer
from tests.security_fixtures import Pki


class Echo:
    """Answers each frame with the principal of its connection; frames of api key 1 get a
    response of file regions (``region`` bytes of ``path``) to exercise the encrypted send,
    frames of api key 2 the SHA-256 of the whole frame (the decrypted receive)."""

    def __init__(self, file: Any, size: int) -> None:
        self.file, self.size = file, size

    async def dispatch(self, frame: Any, conn: Any) -> Any:
        api, _, cid = struct.unpack_from(">hhi", frame, 0)
        if api == 1:
            region = FileRegion(self.file, 0, self.size, 0)
            head = struct.pack(">ii", 4 + self.size, cid)
            return [head, region]
        if api == 2:
            digest = hashlib.sha256(frame).digest()
            return struct.pack(">ii", 4 + len(digest), cid) + digest
        body = str(conn.session.principal).encode()
        return struct.pack(">ii", 4 + len(body), cid) + body


def request(api: int, cid: int) -> bytes:
    body = struct.pack(">hhi", api, 0, cid) + b"\xff\xff"
    return struct.pack(">i", len(body)) + body


def read_frame(sock: ssl.SSLSocket | socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    (size,) = struct.unpack(">i", head)
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(1 << 20, size - len(data)))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return bytes(data)


def closed(sock: socket.socket) -> bool:
    """Reads until the peer closes (True) or 5 s pass (False)."""
    sock.settimeout(5)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


@pytest.fixture
def tls_server(pki: Pki, tmp_path: Any) -> Iterator[Any]:
    """start(client_auth) → port of a TLS listener served by a loop on a thread."""
    import threading

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servers: list[KafkaServer] = []
    blob = tmp_path / "blob"
    blob.write_bytes(bytes(range(256)) * 4096 * 3)  # 3 MiB
    file = open(blob, "rb", buffering=0)  # noqa: SIM115 - closed at teardown

    def start(client_auth: str = "requested", timeout_s: float = 10.0) -> int:
        config = BrokerConfig({"ssl.keystore.location": str(pki.keystore),
                               "ssl.truststore.location": str(pki.ca), "ssl.client.auth": client_auth})
        security = ListenerSecurity(
            "SSL", SecurityProtocol.SSL, listener_context(tls_settings(config)), timeout_s,
            PrincipalMapper(r"RULE:^CN=([^,]+),OU=eng,.*$/$1/L,DEFAULT"))
        server = KafkaServer(Echo(file, blob.stat().st_size), "127.0.0.1", 0, security=security)
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
        servers.append(server)
        return server.port

    yield start
    for server in servers:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()
    file.close()


def client(pki: Pki, port: int, cert: tuple[Any, Any] | None = None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def test_a_client_certificate_names_the_principal_by_the_mapping_rules(pki: Pki, tls_server: Any) -> None:
    port = tls_server()
    with client(pki, port, pki.client("Alice")) as sock:
        sock.sendall(request(18, 7))
        assert read_frame(sock) == struct.pack(">i", 7) + b"User:alice"  # RULE ... /L
    with client(pki, port, pki.client("bob", unit="ops")) as sock:  # no RULE applies: DEFAULT
        sock.sendall(request(18, 8))
        assert read_frame(sock) == struct.pack(">i", 8) + b"User:CN=bob,OU=ops,O=Strata,C=NL"
    with client(pki, port) as sock:  # no certificate (requested): anonymous
        sock.sendall(request(18, 9))
        assert read_frame(sock) == struct.pack(">i", 9) + b"User:ANONYMOUS"


def test_a_required_client_certificate_refuses_a_client_without_one(pki: Pki, tls_server: Any) -> None:
    port = tls_server("required")
    with client(pki, port) as sock, pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        sock.sendall(request(18, 1))
        read_frame(sock)
    with client(pki, port, pki.client("carol")) as sock:
        sock.sendall(request(18, 2))
        assert read_frame(sock).endswith(b"User:carol")


def test_file_regions_arrive_encrypted_whole_and_in_order_with_pipelined_requests(pki: Pki, tls_server: Any) -> None:
    port = tls_server()
    expected = bytes(range(256)) * 4096 * 3
    with client(pki, port) as sock:
        sock.sendall(request(1, 1) + request(18, 2) + request(1, 3))
        assert read_frame(sock) == struct.pack(">i", 1) + expected
        assert read_frame(sock) == struct.pack(">i", 2) + b"User:ANONYMOUS"
        assert read_frame(sock) == struct.pack(">i", 3) + expected


def test_garbage_and_stalled_handshakes_cost_their_own_connection_only(pki: Pki, tls_server: Any) -> None:
    # long enough for the real client's handshake on a loaded machine, short of closed()'s 5 s
    port = tls_server(timeout_s=2.5)
    garbage = socket.create_connection(("127.0.0.1", port), timeout=5)
    stalled = socket.create_connection(("127.0.0.1", port), timeout=5)
    flood = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        garbage.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)) * 8)
        stalled.sendall(b"\x16\x03\x01")  # the start of a record, then nothing
        with contextlib.suppress(OSError):  # a handshake larger than any ClientHello is cut off
            for _ in range(64):
                flood.sendall(b"\x16\x03\x01\x40\x00" + b"\x00" * 16384)
        with client(pki, port) as sock:  # meanwhile a real client is served at once
            sock.sendall(request(18, 5))
            assert read_frame(sock).endswith(b"User:ANONYMOUS")
        assert closed(flood)
        assert closed(garbage)  # an alert, then closed
        assert closed(stalled)  # closed by the handshake timeout
    finally:
        for s in (garbage, stalled, flood):
            s.close()


def _big_request(cid: int, size: int) -> tuple[bytes, bytes]:
    """A frame of api key 2 with ``size`` random bytes after its header, and the SHA-256
    of the frame the server sees (the bytes after the size prefix)."""
    body = struct.pack(">hhi", 2, 0, cid) + b"\xff\xff" + os.urandom(size)
    return struct.pack(">i", len(body)) + body, hashlib.sha256(body).digest()


def test_a_large_request_is_decrypted_whole_across_many_socket_reads(pki: Pki, tls_server: Any) -> None:
    port = tls_server()
    frame, digest = _big_request(11, 5 * 1024 * 1024 + 12345)  # many records, reads and slices
    with client(pki, port) as sock:
        sock.sendall(frame)
        assert read_frame(sock) == struct.pack(">i", 11) + digest
        sock.sendall(request(18, 12))  # and the connection goes on
        assert read_frame(sock).endswith(b"User:ANONYMOUS")


def test_a_request_in_tiny_records_is_put_together_in_order(pki: Pki, tls_server: Any) -> None:
    """librdkafka writes a TLS record per piece of its buffer: a request may come in
    hundreds of small records, some cut across socket reads."""
    port = tls_server()
    frame, digest = _big_request(21, 40_000)
    with client(pki, port) as sock:
        step = 0
        for start in range(0, len(frame), 37):  # a record per send: 37 bytes of plaintext each
            sock.sendall(frame[start : start + 37])
            step += 1
        assert step > 1000
        sock.sendall(request(18, 22))
        assert read_frame(sock) == struct.pack(">i", 21) + digest
        assert read_frame(sock).endswith(b"User:ANONYMOUS")


def test_connections_sending_file_regions_at_once_each_get_their_own_bytes(pki: Pki, tls_server: Any) -> None:
    """Connections of one thread share its plaintext chunk buffer; their responses take
    turns chunk by chunk, and none may see another's bytes."""
    import concurrent.futures

    port = tls_server()
    expected = bytes(range(256)) * 4096 * 3

    def fetch(cid: int) -> bool:
        with client(pki, port) as sock:
            sock.sendall(request(1, cid) + request(1, cid + 1))
            return (read_frame(sock) == struct.pack(">i", cid) + expected
                    and read_frame(sock) == struct.pack(">i", cid + 1) + expected)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(fetch, range(100, 108, 2)))
