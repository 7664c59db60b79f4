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
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from foundation import create_topic, log, machine_info  # noqa: E402
from kafka_peer_systems import System, start_kafka, start_strata  # noqa: E402

from tests.e2e import rawkafka  # noqa: E402  (hand-built Produce v3 / Fetch v4, stamped receives)

VALUE = b"x" * 100


def _connect(system: System) -> rawkafka.Connection:
    conn = rawkafka.Connection.to(system.bootstrap.split(",")[0], timeout=30)
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.stamp_receives()
    return conn


def _send(conn: rawkafka.Connection, api_key: int, body: bytes) -> int:
    """Send a Produce v3 or Fetch v4; when, in ns since the epoch."""
    conn.correlation_id += 1
    sent = time.time_ns()
    conn.send_raw(rawkafka.request(api_key, 3 if api_key == rawkafka.API_PRODUCE else 4, conn.correlation_id, body))
    return sent


def _produce(conn: rawkafka.Connection, topic: str) -> int:
    return _send(conn, rawkafka.API_PRODUCE, rawkafka.produce_v3_body(topic, 0, rawkafka.record_batch([VALUE]), acks=1))


def _fetch(conn: rawkafka.Connection, topic: str, offset: int) -> int:
    return _send(conn, rawkafka.API_FETCH, rawkafka.fetch_v4_body(topic, 0, offset, max_wait_ms=5_000, min_bytes=1))


def _answer(conn: rawkafka.Connection, parse: Callable[[bytes], tuple[int, list[Any]]]) -> tuple[int, Any]:
    """(when the answer left the broker, ns; its one partition's result), its correlation id
    and error code checked."""
    stamp, payload = conn.read_stamped_frame()
    correlation_id, (result,) = parse(payload)
    if correlation_id != conn.correlation_id:
        raise ValueError(f"answer {correlation_id} to request {conn.correlation_id}")
    if result.error_code != rawkafka.NONE:
        raise RuntimeError(f"error code {result.error_code}")
    return stamp, result


def measure(system: System, topic: str, count: int, warm: int = 200) -> dict[str, float]:
    fetcher, producer = _connect(system), _connect(system)
    fetched_us: list[float] = []
    answered_us: list[float] = []
    try:
        offset = _warm(producer, fetcher, topic, warm)
        for _ in range(count):
            _fetch(fetcher, topic, offset)
            time.sleep(0.002)  # the fetch parks
            sent = _produce(producer, topic)
            produced_at, produced = _answer(producer, rawkafka.parse_produce_v3)
            fetched_at, _ = _answer(fetcher, rawkafka.parse_fetch_v4)
            offset = produced.base_offset + 1
            fetched_us.append((fetched_at - sent) / 1000)
            answered_us.append((produced_at - sent) / 1000)
    finally:
        fetcher.close()
        producer.close()
    return {**_percentiles("fetch_us", fetched_us), **_percentiles("produce_us", answered_us)}


def _warm(producer: rawkafka.Connection, fetcher: rawkafka.Connection, topic: str, count: int) -> int:
    """Produce until the partition takes records (a new topic's leader may take a moment),
    then ``count`` more, each read back by a fetch (the JVM's JIT warms both paths); the
    next offset."""
    deadline = time.monotonic() + 60
    offset = -1
    while offset < 0:
        _produce(producer, topic)
        try:
            offset = _answer(producer, rawkafka.parse_produce_v3)[1].base_offset + 1
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    for _ in range(count):
        _produce(producer, topic)
        produced = _answer(producer, rawkafka.parse_produce_v3)[1].base_offset
        _fetch(fetcher, topic, produced)
        _answer(fetcher, rawkafka.parse_fetch_v4)
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
