"""The broker's own share of end-to-end latency, read off the wire: Strata against Kafka 4.1.2.

    KAFKA_HOME=/tmp/kafka-4.1.2 python bench/wire_latency.py [--count 2000] [--rounds 3] [--warm 20000] [--json FILE]

bench/latency.py measures what an application sees through librdkafka, whose own queueing,
poll loop and scheduling on two shared cores are in every figure. This bench leaves the
clients out. One partition of each system; a raw Fetch (v4, max_wait 5 s, min_bytes 1)
parks at the log end on one connection, then a raw Produce (v3, acks=1, one 100 B record)
goes on another. The kernel stamps each received segment (``SO_TIMESTAMPNS``; on loopback
the stamp is taken as the broker sends), so from the produce's send, for each produce:

* **fetch answered**: until the parked fetch's answer left the broker (what a tailing
  consumer waits for);
* **produce answered**: until the produce's own answer left.

Each round first makes ``--warm`` produce-and-fetch round trips (the JVM's JIT compiles
both paths), then ``--count`` produces, one at a time (the next once both answers are in),
``--rounds`` rounds alternating which system goes first; each system's figures are the
median over its rounds of each percentile. Without ``KAFKA_HOME`` (or with ``--strata-only``)
Strata alone.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from foundation import create_topic, log, machine_info  # noqa: E402
from kafka_peer_systems import System, start_kafka, start_strata  # noqa: E402

from common.record.batch import build_batch  # noqa: E402

#: Linux's SO_TIMESTAMPNS (= SCM_TIMESTAMPNS), which Python's socket module does not name
SO_TIMESTAMPNS = 35
CLIENT_ID = b"strata-wire-latency"


def _string(value: bytes) -> bytes:
    return struct.pack(">h", len(value)) + value


def _request(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    payload = struct.pack(">hhi", api_key, version, correlation_id) + _string(CLIENT_ID) + body
    return struct.pack(">i", len(payload)) + payload


def _produce_v3(topic: bytes, records: bytes) -> bytes:
    partition = struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", len(records)) + records
    return struct.pack(">hhi", -1, 1, 10_000) + struct.pack(">i", 1) + _string(topic) + partition


def _fetch_v4(topic: bytes, offset: int) -> bytes:
    partition = struct.pack(">i", 1) + struct.pack(">iqi", 0, offset, 1 << 20)
    return struct.pack(">iiiib", -1, 5_000, 1, 1 << 20, 0) + struct.pack(">i", 1) + _string(topic) + partition


class _Conn:
    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.correlation_id = 0

    def send(self, api_key: int, version: int, body: bytes) -> int:
        self.correlation_id += 1
        sent = time.time_ns()
        self.sock.sendall(_request(api_key, version, self.correlation_id, body))
        return sent

    def answer(self) -> tuple[int, bytes]:
        """(when its first bytes left the broker, ns; the answer after the correlation id)."""
        sent_at, head = -1, b""
        while len(head) < 4:
            data, ancdata, _, _ = self.sock.recvmsg(4 - len(head), socket.CMSG_SPACE(16))
            if not data:
                raise ConnectionError("the broker closed the connection")
            for level, kind, value in ancdata:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and sent_at < 0:
                    seconds, nanos = struct.unpack("qq", value[:16])
                    sent_at = seconds * 1_000_000_000 + nanos
            head += data
        (size,) = struct.unpack(">i", head)
        if not 4 <= size <= 64 << 20:
            raise ValueError(f"an answer of {size} bytes")
        body = bytearray()
        while len(body) < size:
            chunk = self.sock.recv(size - len(body))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            body += chunk
        (correlation_id,) = struct.unpack_from(">i", body)
        if correlation_id != self.correlation_id:
            raise ValueError(f"answer {correlation_id} to request {self.correlation_id}")
        if sent_at < 0:
            raise RuntimeError("no receive timestamp (SO_TIMESTAMPNS)")
        return sent_at, bytes(body[4:])

    def close(self) -> None:
        self.sock.close()


def _produce_offset(answer: bytes) -> int:
    """The base offset of a Produce v3 answer of one partition; raises on its error code."""
    pos = 4  # topics array length
    (name_len,) = struct.unpack_from(">h", answer, pos)
    pos += 2 + name_len + 4 + 4  # name, partitions array length, partition index
    error, base_offset = struct.unpack_from(">hq", answer, pos)
    if error:
        raise RuntimeError(f"produce error code {error}")
    return base_offset


def _fetch_error(answer: bytes) -> int:
    """The partition error code of a Fetch v4 answer of one partition."""
    pos = 4 + 4  # throttle time, topics array length
    (name_len,) = struct.unpack_from(">h", answer, pos)
    pos += 2 + name_len + 4 + 4  # name, partitions array length, partition index
    (error,) = struct.unpack_from(">h", answer, pos)
    return error


def measure(system: System, topic: str, count: int, warm: int = 200) -> dict[str, float]:
    fetcher, producer = _Conn(system.bootstrap), _Conn(system.bootstrap)
    name = topic.encode()
    value = b"x" * 100
    fetched_us: list[float] = []
    answered_us: list[float] = []
    try:
        offset = _warm(producer, fetcher, name, value, warm)
        for _ in range(count):
            fetcher.send(1, 4, _fetch_v4(name, offset))
            time.sleep(0.002)  # the fetch parks
            sent = producer.send(0, 3, _produce_v3(name, build_batch([(None, value, [], None)])))
            produced_at, answer = producer.answer()
            fetched_at, fetched = fetcher.answer()
            offset = _produce_offset(answer) + 1
            if error := _fetch_error(fetched):
                raise RuntimeError(f"fetch error code {error}")
            fetched_us.append((fetched_at - sent) / 1000)
            answered_us.append((produced_at - sent) / 1000)
    finally:
        fetcher.close()
        producer.close()
    return {**_percentiles("fetch_us", fetched_us), **_percentiles("produce_us", answered_us)}


def _warm(producer: _Conn, fetcher: _Conn, name: bytes, value: bytes, count: int) -> int:
    """Produce until the partition takes records (a new topic's leader may take a moment),
    then ``count`` more, each read back by a fetch (the JVM's JIT warms both paths); the
    next offset."""
    deadline = time.monotonic() + 60
    offset = -1
    while offset < 0:
        producer.send(0, 3, _produce_v3(name, build_batch([(None, value, [], None)])))
        try:
            offset = _produce_offset(producer.answer()[1]) + 1
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    for _ in range(count):
        producer.send(0, 3, _produce_v3(name, build_batch([(None, value, [], None)])))
        produced = _produce_offset(producer.answer()[1])
        fetcher.send(1, 4, _fetch_v4(name, produced))
        fetcher.answer()
        offset = produced + 1
    return offset


def _percentiles(prefix: str, values: list[float]) -> dict[str, float]:
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return {f"{prefix}_p50": pick(0.5), f"{prefix}_p90": pick(0.9), f"{prefix}_p99": pick(0.99)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=2000, help="produces per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm", type=int, default=20_000, help="produce-and-fetch round trips before each round")
    ap.add_argument("--strata-only", action="store_true")
    ap.add_argument("--work-dir", default="/tmp")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    with_kafka = not args.strata_only and "KAFKA_HOME" in os.environ
    work = Path(tempfile.mkdtemp(prefix="strata-wire-latency-", dir=args.work_dir))
    systems = [start_strata(work / "strata", 1)]
    try:
        if with_kafka:
            systems.append(start_kafka(work / "kafka", 1))
        runs: dict[str, list[dict[str, float]]] = {s.key: [] for s in systems}
        for rnd in range(args.rounds):
            for s in systems if rnd % 2 == 0 else systems[::-1]:
                topic = f"wire-{rnd}"
                create_topic(s.bootstrap, topic)
                runs[s.key].append(measure(s, topic, args.count, args.warm))
                log(f"round {rnd + 1}, {s.name}: {runs[s.key][-1]}")
    finally:
        for s in systems:
            s.stop()
    result = {"machine": machine_info(work), "count": args.count, "rounds": args.rounds,
              "when": time.strftime("%Y-%m-%d %H:%M:%S"), "runs": runs,
              "median": {key: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for key, rs in runs.items()}}
    print("| system | fetch answered p50 / p90 / p99 µs | produce answered p50 / p90 / p99 µs |")
    print("| --- | ---: | ---: |")
    for s in systems:
        m = result["median"][s.key]
        print(f"| {s.name} | {m['fetch_us_p50']:.0f} / {m['fetch_us_p90']:.0f} / {m['fetch_us_p99']:.0f} | "
              f"{m['produce_us_p50']:.0f} / {m['produce_us_p90']:.0f} / {m['produce_us_p99']:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
