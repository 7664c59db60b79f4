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
import time
from collections.abc import Iterator
from typing import Any

import pytest

from common.config.broker import BrokerConfig
from local_tier.segment import FileRegion
from service.network.server import KafkaServer
from service.security.listeners import SecurityProtocol
from service.security.principal_mapping import PrincipalMapper
from service.security.session import ListenerSecurity
from service.security.tls import tls_settings
from service.security.tls_engine import listener_context
from tests.security_fixtures import Pki

REGION = 3 * 1024 * 1024  # the bytes of an api key 1 response (a file region)


def region_start(cid: int) -> int:
    """Where the file region answering correlation id ``cid`` starts: each its own bytes."""
    return (cid * 4099) % 65536


class Echo:
    """Answers each frame with the principal of its connection; frames of api key 1 get a
    response of a file region (``REGION`` bytes from ``region_start(cid)`` of a random file)
    to exercise the encrypted send, frames of api key 2 the SHA-256 of the whole frame (the
    decrypted receive)."""

    def __init__(self, file: Any) -> None:
        self.file = file

    async def dispatch(self, frame: Any, conn: Any) -> Any:
        api, _, cid = struct.unpack_from(">hhi", frame, 0)
        if api == 1:
            region = FileRegion(self.file, region_start(cid), REGION, 0)
            head = struct.pack(">ii", 4 + REGION, cid)
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


@pytest.fixture(params=["C loop", "Python loop"])
def tls_server(pki: Pki, tmp_path: Any, request: pytest.FixtureRequest,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """start(client_auth) → port of a TLS listener served by a loop on a thread; with the
    record loop in C (service/security/_tlsread.c) and in Python, its fallback."""
    import threading

    from service.security import tls_transport

    if request.param == "C loop":
        if tls_transport.c_record_loop() is None:
            pytest.skip("service.security._tlsread is not built (pip install -e . builds it)")
    else:
        monkeypatch.setattr(tls_transport, "c_record_loop", lambda: None)

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servers: list[KafkaServer] = []
    blob = tmp_path / "blob"
    blob.write_bytes(os.urandom(REGION + 65536))
    file = open(blob, "rb", buffering=0)  # noqa: SIM115 - closed at teardown

    def start(client_auth: str = "requested", timeout_s: float = 10.0) -> int:
        config = BrokerConfig({"ssl.keystore.location": str(pki.keystore),
                               "ssl.truststore.location": str(pki.ca), "ssl.client.auth": client_auth})
        security = ListenerSecurity(
            "SSL", SecurityProtocol.SSL, listener_context(tls_settings(config)), timeout_s,
            PrincipalMapper(r"RULE:^CN=([^,]+),OU=eng,.*$/$1/L,DEFAULT"))
        server = KafkaServer(Echo(file), "127.0.0.1", 0, security=security)
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
        servers.append(server)
        return server.port

    start.loop = loop  # type: ignore[attr-defined]
    start.servers = servers  # type: ignore[attr-defined]
    start.blob = blob.read_bytes()  # type: ignore[attr-defined]
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


def _region(tls_server: Any, cid: int) -> bytes:
    """The response to api key 1 with correlation id ``cid``, as the client reads it."""
    start = region_start(cid)
    return struct.pack(">i", cid) + tls_server.blob[start : start + REGION]


def test_file_regions_arrive_encrypted_whole_and_in_order_with_pipelined_requests(pki: Pki, tls_server: Any) -> None:
    port = tls_server()
    with client(pki, port) as sock:
        sock.sendall(request(1, 1) + request(18, 2) + request(1, 3))
        assert read_frame(sock) == _region(tls_server, 1)
        assert read_frame(sock) == struct.pack(">i", 2) + b"User:ANONYMOUS"
        assert read_frame(sock) == _region(tls_server, 3)


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

    def fetch(cid: int) -> bool:
        with client(pki, port) as sock:
            sock.sendall(request(1, cid) + request(1, cid + 1))
            return read_frame(sock) == _region(tls_server, cid) and read_frame(sock) == _region(tls_server, cid + 1)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert all(pool.map(fetch, range(100, 108, 2)))


class _Client:
    """A client's socket after its handshake, with the TLS object and BIOs that make and
    read its records (so that a test can send part of one, or a forged one)."""

    def __init__(self, sock: socket.socket, tls: ssl.SSLObject, incoming: ssl.MemoryBIO,
                 outgoing: ssl.MemoryBIO) -> None:
        self.sock, self.tls, self.incoming, self.outgoing = sock, tls, incoming, outgoing

    def records(self, plaintext: bytes) -> bytes:
        self.tls.write(plaintext)
        return self.outgoing.read()

    def frame(self) -> bytes:
        """The next response frame, after its size."""
        data = b""
        while True:
            with contextlib.suppress(ssl.SSLWantReadError):
                data += self.tls.read(1 << 20)
            if len(data) >= 4 and len(data) >= 4 + struct.unpack_from(">i", data)[0]:
                return data[4:]
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            self.incoming.write(chunk)


def _established(pki: Pki, port: int) -> _Client:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            sock.sendall(outgoing.read())
            incoming.write(sock.recv(65536))
    sock.sendall(outgoing.read())
    return _Client(sock, tls, incoming, outgoing)


def _reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_clients_that_reset_or_forge_a_record_after_the_handshake_cost_only_their_connection(
    pki: Pki, tls_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The commonest ends of a connection, idle or halfway through a request, then the
    collector: the connection goes, quietly, and the broker serves the next client (a C
    view of a request buffer left behind by such an end crashed the process)."""
    import gc
    import logging

    port = tls_server()
    frame, _ = _big_request(31, 300_000)
    with caplog.at_level(logging.DEBUG, logger="strata"):
        for n in range(24):
            conn = _established(pki, port)
            if n % 3 == 1:  # halfway through a request's body
                conn.sock.sendall(conn.records(frame[: len(frame) // 2]))
            elif n % 3 == 2:  # a forged record after a good one, mid-body
                conn.sock.sendall(conn.records(frame[:1000]) + bytes([23, 3, 3, 0, 40]) + bytes(40))
            time.sleep(0.02)
            _reset(conn.sock)
            if n % 4 == 3:
                time.sleep(0.05)
                gc.collect()
        time.sleep(0.2)
        gc.collect()
        with client(pki, port) as sock:
            sock.sendall(request(18, 32))
            assert read_frame(sock).endswith(b"User:ANONYMOUS")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_an_error_another_connection_left_in_the_threads_queue_does_not_end_this_one(
    pki: Pki, tls_server: Any
) -> None:
    """OpenSSL's error queue is the thread's, shared by every connection on the loop: a
    stale entry must not be read as this connection's (OpenSSL 3.x's SSL_get_error did)."""
    from service.security.tls_engine import lib

    port = tls_server()
    conn = _established(pki, port)

    def request_records(cid: int) -> bytes:
        body = struct.pack(">hhi", 18, 0, cid) + b"\xff\xff"
        return conn.records(struct.pack(">i", len(body)) + body)

    async def leave_an_error() -> None:  # as a connection whose record failed would
        lib.ERR_put_error(lib.ERR_LIB_EVP, 0, 1, b"elsewhere.c", 1)

    conn.sock.sendall(request_records(40))
    assert conn.frame() == struct.pack(">i", 40) + b"User:ANONYMOUS"  # the broker waits for the next
    record = request_records(41)
    asyncio.run_coroutine_threadsafe(leave_an_error(), tls_server.loop).result(5)
    conn.sock.sendall(record[:7])  # the record cut in two: OpenSSL wants the rest
    time.sleep(0.1)
    asyncio.run_coroutine_threadsafe(leave_an_error(), tls_server.loop).result(5)
    conn.sock.sendall(record[7:])
    assert conn.frame() == struct.pack(">i", 41) + b"User:ANONYMOUS"
    conn.sock.sendall(request_records(42))
    assert conn.frame() == struct.pack(">i", 42) + b"User:ANONYMOUS"
    conn.sock.close()


def test_a_connection_gone_quiet_after_a_burst_holds_no_large_buffer(pki: Pki, tls_server: Any) -> None:
    """A busy connection reads 1 MiB at a time and encrypts a chunk at a time; once it is
    quiet its buffers go back to small ones (thousands of idle connections must not each
    keep a megabyte)."""
    port = tls_server()
    frame, digest = _big_request(51, 4 * 1024 * 1024)
    with client(pki, port) as sock:
        sock.sendall(frame + request(1, 52))  # a burst in, a file region out
        assert read_frame(sock) == struct.pack(">i", 51) + digest
        assert read_frame(sock) == _region(tls_server, 52)
        for cid in (53, 54):  # small requests: quiet reads
            sock.sendall(request(18, cid))
            assert read_frame(sock).endswith(b"User:ANONYMOUS")
        time.sleep(0.1)
        (conn,) = tls_server.servers[0]._connections
        peak, quiet = conn.transport.peak_buffer_bytes, conn.transport.buffer_bytes
    assert peak >= 1024 * 1024  # the burst: 1 MiB reads
    assert quiet <= 64 * 1024 + 17 * 1024, (peak, quiet)
