"""A lean Kafka client for bench/tls.py's broker-bound view: what a broker does with TLS
when the client costs it little.

    python bench/tls_loadgen.py produce|consume HOST:PORT TOPIC RECORDS [--ca CA.pem]

kcat and the Java client spend more CPU on TLS than the broker does (librdkafka writes a
TLS record and a system call per piece of its buffer), and on a machine where client and
broker share the cores that cost is in every end-to-end figure. This client spends as
little as a client can, so the broker is what runs out of CPU:

* ``produce``: one record batch of 1,000 records of 1 KiB (``common.record.batch``),
  built once and sent in a Produce v3 request (acks=1) again and again, 8 in flight;
  every response is checked: no error, and base offsets 1,000 apart from 0.
* ``consume``: Fetch v4 from offset 0 up to ``RECORDS``, two requests in flight (each for a
  whole number of batches, about 16 MiB), every batch checked: its CRC-32C, and offsets
  that follow each other.

Over TLS (``--ca``: the broker's CA; the certificate chain is verified) it uses the
OpenSSL in ``cryptography``'s wheel through pyOpenSSL over memory BIOs, and the broker's
own C record loop (``service.security._tlsread``) to decrypt, reading and writing the
socket a MiB at a time; it writes whole requests, so the broker gets full 16 KiB records,
as from the Java client.
Prints one JSON line: records, seconds, MB/s, the client's own CPU seconds, the TLS
version and suite.
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from crc32c import crc32c

from common.record.batch import build_batch

PER_BATCH = 1000
IN_FLIGHT = 8


class Wire:
    """A connection's bytes: a socket, or TLS over it; frames read whole."""

    def __init__(self, address: str, ca: str | None) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.tls: dict[str, str] = {}
        self._buf = bytearray(72 << 20)
        self._view = memoryview(self._buf)
        self._start = self._end = 0
        if ca is None:
            self._send_raw, self._recv_raw = self.sock.sendall, self.sock.recv_into
            return
        from OpenSSL import SSL

        from service.security.tls_engine import address, c_record_loop, ffi, lib

        ctx = SSL.Context(SSL.TLS_CLIENT_METHOD)
        ctx.load_verify_locations(ca)
        ctx.set_verify(SSL.VERIFY_PEER)
        conn = SSL.Connection(ctx, None)  # memory BIOs: the socket is read and written a MiB at a time
        conn.set_tlsext_host_name(host.encode() if not host[0].isdigit() else b"localhost")
        conn.set_connect_state()
        while True:
            try:
                conn.do_handshake()
                break
            except SSL.WantReadError:
                self._drain(conn)
                conn.bio_write(self.sock.recv(65536))
        self._drain(conn)
        self.tls = {"version": conn.get_protocol_version_name(), "cipher": conn.get_cipher_name() or ""}
        ssl_, rbio, wbio = conn._ssl, conn._into_ssl, conn._from_ssl
        self._conn = conn  # keeps the SSL object alive
        out = bytearray(2 << 20)
        out_ptr = ffi.from_buffer(out)
        held = bytearray(1 << 20)
        state = [0, 0]  # ciphertext in ``held`` not yet given to OpenSSL
        read_records = c_record_loop()  # the broker's own record loop (service/security/_tlsread.c)
        if read_records is None:
            raise SystemExit("bench/tls_loadgen.py needs service.security._tlsread (pip install -e . builds it)")
        args = (address(ssl_), address(rbio))

        def send(data: bytes | memoryview) -> None:
            """Encrypted a record at a time into ``out``, sent a MiB or so at a time."""
            with ffi.from_buffer(data) as ptr:
                n, done, filled = len(data), 0, 0
                while done < n:
                    w = lib.SSL_write(ssl_, ptr + done, min(n - done, 16384))
                    if w <= 0:
                        raise OSError(f"TLS write failed ({lib.SSL_get_error(ssl_, w)})")
                    done += w
                    while (got := lib.BIO_read(wbio, out_ptr + filled, len(out) - filled)) > 0:
                        filled += got
                    if filled > len(out) // 2 or done == n:
                        self.sock.sendall(memoryview(out)[:filled])
                        filled = 0

        def recv_into(view: memoryview) -> int:
            while True:
                got, state[0], error = read_records(*args, held, state[0], state[1], 256 << 10, view, 0)
                if got:
                    return got
                if error != lib.SSL_ERROR_WANT_READ:
                    raise OSError(f"TLS read failed ({error})")
                state[0], state[1] = 0, self.sock.recv_into(held)
                if not state[1]:
                    return 0

        self._send_raw, self._recv_raw = send, recv_into

    def _drain(self, conn: Any) -> None:
        from OpenSSL import SSL

        try:
            while True:
                self.sock.sendall(conn.bio_read(65536))
        except SSL.WantReadError:
            pass

    def send(self, *parts: bytes) -> None:
        for part in parts:
            self._send_raw(part)

    def frame(self) -> memoryview:
        """The next response, after its size (valid until the next call)."""
        if self._start == self._end:
            self._start = self._end = 0
        if len(self._buf) - self._start < 64:  # room for at least the next size
            self._move_down()
        while self._end - self._start < 4:
            self._end += self._read()
        size = 4 + struct.unpack_from(">i", self._buf, self._start)[0]
        if size > len(self._buf):
            raise SystemExit(f"a response of {size} bytes is larger than this client's buffer")
        if self._start + size > len(self._buf):  # room for the whole response: what is left moves down
            self._move_down()
        while self._end - self._start < size:
            self._end += self._read()
        start, self._start = self._start, self._start + size
        return self._view[start + 4 : start + size]

    def _move_down(self) -> None:
        left = self._end - self._start
        self._buf[:left] = self._buf[self._start : self._end]
        self._start, self._end = 0, left

    def _read(self) -> int:
        got = self._recv_raw(self._view[self._end :])
        if not got:
            raise SystemExit("the broker closed the connection")
        return got


def _header(api: int, version: int, correlation: int) -> bytes:
    return struct.pack(">hhih", api, version, correlation, 6) + b"tlsgen"


def produce(wire: Wire, topic: bytes, records: int) -> None:
    batch = build_batch([(None, bytes(range(256)) * 4, [], None)] * PER_BATCH)
    body = (struct.pack(">hhi", -1, 1, 30000) + struct.pack(">ih", 1, len(topic)) + topic
            + struct.pack(">iii", 1, 0, len(batch)))
    requests, sent, answered = records // PER_BATCH, 0, 0
    while answered < requests:
        while sent < requests and sent - answered < IN_FLIGHT:
            head = _header(0, 3, sent)
            wire.send(struct.pack(">i", len(head) + len(body) + len(batch)) + head + body, batch)
            sent += 1
        frame = wire.frame()
        correlation, _count = struct.unpack_from(">ii", frame, 0)
        (name_len,) = struct.unpack_from(">h", frame, 8)
        _partition, error, base = struct.unpack_from(">ihq", frame, 10 + name_len + 4)
        if correlation != answered or error or base != answered * PER_BATCH:
            raise SystemExit(f"produce response {correlation}: error {error}, base offset {base} "
                             f"(expected {answered * PER_BATCH})")
        answered += 1


def _fetch(wire: Wire, topic: bytes, correlation: int, offset: int, max_bytes: int) -> None:
    head = _header(1, 4, correlation)
    body = (struct.pack(">iiiib", -1, 500, 1, max_bytes, 0) + struct.pack(">ih", 1, len(topic)) + topic
            + struct.pack(">iiqi", 1, 0, offset, max_bytes))
    wire.send(struct.pack(">i", len(head) + len(body)) + head + body)


def _batches(frame: memoryview, correlation: int, offset: int) -> tuple[int, int]:
    """Check a Fetch v4 response for ``offset`` (every whole batch's CRC-32C, offsets that
    follow each other); the offset after its last whole batch, and the first batch's size."""
    (got,) = struct.unpack_from(">i", frame, 0)
    (name_len,) = struct.unpack_from(">h", frame, 12)
    pos = 14 + name_len + 4
    _, error, _high, _lso, aborted = struct.unpack_from(">ihqqi", frame, pos)
    pos += 26 + max(aborted, 0) * 16
    (size,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    end, first = pos + size, 0
    if got != correlation or error:
        raise SystemExit(f"fetch {correlation} at offset {offset}: correlation {got}, error {error}")
    while pos + 61 <= end:
        base, length = struct.unpack_from(">qi", frame, pos)
        if pos + 12 + length > end:
            break  # a partial batch at the end of the response
        (crc,) = struct.unpack_from(">I", frame, pos + 17)
        (last_delta,) = struct.unpack_from(">i", frame, pos + 23)
        if base != offset or crc32c(frame[pos + 21 : pos + 12 + length]) != crc:
            raise SystemExit(f"batch at {base} (expected {offset}): {'bad CRC' if base == offset else 'a gap'}")
        first = first or 12 + length
        offset = base + last_delta + 1
        pos += 12 + length
    return offset, first


def consume(wire: Wire, topic: bytes, records: int) -> None:
    """Fetch from 0 to ``records``, two requests in flight: the first response tells the
    batches' size, and each later request asks for a whole number of them (16 MiB or so)
    from where the one before will end, so the broker always has the next to serve."""
    offset, batch_bytes = _batches(_fetch_one(wire, topic, 0, 64 << 20), 0, 0)
    if not batch_bytes:
        raise SystemExit("the first fetch returned no whole batch")
    per_fetch = max(1, (16 << 20) // batch_bytes)
    asked, pending, correlation = offset, [], 1
    while offset < records:
        while len(pending) < 2 and asked < records:
            _fetch(wire, topic, correlation, asked, per_fetch * batch_bytes)
            pending.append((correlation, asked))
            correlation, asked = correlation + 1, asked + per_fetch * PER_BATCH
        expected_correlation, expected_offset = pending.pop(0)
        offset, _ = _batches(wire.frame(), expected_correlation, expected_offset)
        if offset != min(expected_offset + per_fetch * PER_BATCH, records):
            raise SystemExit(f"fetch at {expected_offset} ended at {offset}: batches of unequal size?")


def _fetch_one(wire: Wire, topic: bytes, offset: int, max_bytes: int) -> memoryview:
    _fetch(wire, topic, 0, offset, max_bytes)
    return wire.frame()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("produce", "consume"))
    ap.add_argument("address")
    ap.add_argument("topic")
    ap.add_argument("records", type=int)
    ap.add_argument("--ca", default=None, help="TLS: the CA file the broker's certificate is verified with")
    args = ap.parse_args()
    if args.records % PER_BATCH:
        raise SystemExit(f"records must be a multiple of {PER_BATCH}")
    wire = Wire(args.address, args.ca)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    (produce if args.mode == "produce" else consume)(wire, args.topic.encode(), args.records)
    seconds = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    result: dict[str, Any] = {
        "mode": args.mode, "records": args.records, "seconds": seconds,
        "records_per_s": args.records / seconds, "mb_per_s": args.records * 1024 / seconds / 1e6,
        "client_cpu_seconds": (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime), **wire.tls}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
