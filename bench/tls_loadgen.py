"""A lean Kafka client for bench/tls.py's broker-bound view: what a broker does with TLS
when the client costs it little.

    python bench/tls_loadgen.py produce|consume HOST:PORT TOPIC RECORDS [--ca CA.pem]

kcat and the Java client spend more CPU on TLS than the broker does (librdkafka writes a
TLS record and a system call per piece of its buffer), and on a machine where client and
broker share the cores that cost is in every end-to-end figure. This client spends as
little as a client can, so the broker is what runs out of CPU:

* ``produce``: one record batch of 1,000 records of 1 KiB (``local_tier.records``),
  built once and sent in a Produce v3 request (acks=1) again and again, 8 in flight;
  every response is checked: no error, and base offsets 1,000 apart from 0.
* ``consume``: Fetch v4 from offset 0 up to ``RECORDS`` (64 MiB a response), every batch
  checked: its CRC-32C, and offsets that follow each other.

Over TLS (``--ca``: the broker's CA; the certificate chain is verified) it uses the
OpenSSL in ``cryptography``'s wheel through pyOpenSSL, as the broker's listeners do, and
writes whole requests, so the broker gets full 16 KiB records, as from the Java client.
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

from local_tier.records import build_batch

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
        from cryptography.hazmat.bindings.openssl.binding import Binding
        from OpenSSL import SSL

        lib, ffi = Binding.lib, Binding.ffi
        ctx = SSL.Context(SSL.TLS_CLIENT_METHOD)
        ctx.load_verify_locations(ca)
        ctx.set_verify(SSL.VERIFY_PEER)
        conn = SSL.Connection(ctx, self.sock)
        conn.set_tlsext_host_name(host.encode() if not host[0].isdigit() else b"localhost")
        conn.set_connect_state()
        conn.do_handshake()
        self.tls = {"version": conn.get_protocol_version_name(), "cipher": conn.get_cipher_name() or ""}
        ssl_ = conn._ssl
        self._conn = conn  # keeps the SSL object alive

        def send(data: bytes | memoryview) -> None:
            ptr, n, done = ffi.from_buffer(data), len(data), 0
            while done < n:
                w = lib.SSL_write(ssl_, ptr + done, n - done)
                if w <= 0:
                    raise OSError(f"TLS write failed ({lib.SSL_get_error(ssl_, w)})")
                done += w

        def recv_into(view: memoryview) -> int:
            n = lib.SSL_read(ssl_, ffi.from_buffer(view), len(view))
            if n <= 0:
                raise OSError(f"TLS read failed ({lib.SSL_get_error(ssl_, n)})")
            return int(n)

        self._send_raw, self._recv_raw = send, recv_into

    def send(self, *parts: bytes) -> None:
        for part in parts:
            self._send_raw(part)

    def frame(self) -> memoryview:
        """The next response, after its size (valid until the next call)."""
        if self._start == self._end:
            self._start = self._end = 0
        if len(self._buf) - self._start < (8 << 20):  # room for the next reads: move what is left down
            left = self._end - self._start
            self._buf[:left] = self._buf[self._start : self._end]
            self._start, self._end = 0, left
        while self._end - self._start < 4:
            self._end += self._read()
        size = 4 + struct.unpack_from(">i", self._buf, self._start)[0]
        if self._start + size > len(self._buf):
            raise SystemExit(f"a response of {size} bytes is larger than this client's buffer")
        while self._end - self._start < size:
            self._end += self._read()
        start, self._start = self._start, self._start + size
        return self._view[start + 4 : start + size]

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


def consume(wire: Wire, topic: bytes, records: int) -> None:
    offset, correlation = 0, 0
    while offset < records:
        head = _header(1, 4, correlation)
        body = (struct.pack(">iiiib", -1, 500, 1, 64 << 20, 0) + struct.pack(">ih", 1, len(topic)) + topic
                + struct.pack(">iiqi", 1, 0, offset, 64 << 20))
        wire.send(struct.pack(">i", len(head) + len(body)) + head + body)
        frame = wire.frame()
        correlation += 1
        (name_len,) = struct.unpack_from(">h", frame, 12)
        pos = 14 + name_len + 4
        _, error, _high, _lso, aborted = struct.unpack_from(">ihqqi", frame, pos)
        pos += 26 + max(aborted, 0) * 16
        (size,) = struct.unpack_from(">i", frame, pos)
        pos += 4
        end = pos + size
        if error:
            raise SystemExit(f"fetch at offset {offset}: error {error}")
        while pos + 61 <= end:
            base, length = struct.unpack_from(">qi", frame, pos)
            if pos + 12 + length > end:
                break  # a partial batch at the end of the response
            (crc,) = struct.unpack_from(">I", frame, pos + 17)
            (last_delta,) = struct.unpack_from(">i", frame, pos + 23)
            if base != offset or crc32c(frame[pos + 21 : pos + 12 + length]) != crc:
                raise SystemExit(f"batch at {base} (expected {offset}): {'bad CRC' if base == offset else 'a gap'}")
            offset = base + last_delta + 1
            pos += 12 + length


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
