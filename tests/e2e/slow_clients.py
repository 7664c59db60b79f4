"""Clients that try to starve a broker of request memory (issue #36), for
tests/e2e/test_slow_clients.py and bench/slow_clients.py.

Three attacks, each in a thread of its own, until stopped:

* ``stall``: connections that each declare a request of ``declared`` bytes, send a
  few of them and then nothing;
* ``drip``: connections that declare the same and send one byte every
  ``drip_interval_s``, so that no "no progress for N seconds" rule ever fires;
* ``fuzz``: mutated request frames of every API (tests/service/wire_fuzz.py), many
  of whose size prefixes lie.

And the measure of a normal client meanwhile: a producer's delivery latency, and how
long a new connection waits for its ApiVersions answer.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Producer

from tests.service.wire_fuzz import Fuzzer, RandomDraw

__all__ = ["Attack", "ProduceLatency", "api_versions_seconds", "drip", "fuzz", "measure_produce", "stall"]

#: ApiVersions v0 with correlation id 1 and client id "probe"
_API_VERSIONS = struct.pack(">hhih", 18, 0, 1, 5) + b"probe"


@dataclass
class Attack:
    """Threads attacking until :meth:`stop`; ``closed_by_broker`` counts connections the
    broker hung up on."""

    name: str
    threads: list[threading.Thread] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    closed_by_broker: int = 0
    sockets: list[socket.socket] = field(default_factory=list)

    def start(self, target: Callable[[Attack], None], count: int = 1) -> Attack:
        for _ in range(count):
            thread = threading.Thread(target=target, args=(self,), daemon=True, name=f"attack-{self.name}")
            self.threads.append(thread)
            thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        for s in self.sockets:
            s.close()
        for thread in self.threads:
            thread.join(10)

    def connect(self, address: tuple[str, int]) -> socket.socket:
        s = socket.create_connection(address, timeout=5)
        self.sockets.append(s)
        return s


def _address(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


def _closed(s: socket.socket) -> bool:
    """Whether the broker closed ``s`` (a read returns EOF or fails at once)."""
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.setblocking(True)


def stall(bootstrap: str, connections: int = 3, declared: int = 100 * 1024 * 1024) -> Attack:
    """``connections`` requests of ``declared`` bytes that stop after their first 100."""
    def run(attack: Attack) -> None:
        s = attack.connect(_address(bootstrap))
        s.sendall(struct.pack(">ihhi", declared, 0, 9, 1) + bytes(92))
        while not attack.stopping.wait(0.5):
            if _closed(s):
                attack.closed_by_broker += 1
                s = attack.connect(_address(bootstrap))  # and again
                s.sendall(struct.pack(">ihhi", declared, 0, 9, 1) + bytes(92))

    return Attack("stall").start(run, connections)


def drip(bootstrap: str, connections: int = 3, declared: int = 100 * 1024 * 1024,
         interval_s: float = 4.0) -> Attack:
    """``connections`` requests of ``declared`` bytes that send one byte every ``interval_s``."""
    def run(attack: Attack) -> None:
        s = attack.connect(_address(bootstrap))
        s.sendall(struct.pack(">ihhi", declared, 0, 9, 1))
        while not attack.stopping.wait(interval_s):
            try:
                s.sendall(b"\x00")
            except OSError:
                attack.closed_by_broker += 1
                s = attack.connect(_address(bootstrap))
                s.sendall(struct.pack(">ihhi", declared, 0, 9, 1))
                continue
            if _closed(s):
                attack.closed_by_broker += 1
                s = attack.connect(_address(bootstrap))
                s.sendall(struct.pack(">ihhi", declared, 0, 9, 1))

    return Attack("drip").start(run, connections)


def fuzz(bootstrap: str, topic: str, seed: int = 36) -> Attack:
    """Mutated frames of every API, one case after another."""
    def run(attack: Attack) -> None:
        fuzzer = Fuzzer(bootstrap, topic)
        draw = RandomDraw(random.Random(seed))
        while not attack.stopping.is_set():
            try:
                fuzzer.case(draw)
            except OSError:
                fuzzer.close()
        fuzzer.close()

    return Attack("fuzz").start(run)


def api_versions_seconds(bootstrap: str, timeout: float = 30.0) -> float:
    """Seconds a new connection waits for its ApiVersions answer (``timeout`` if none)."""
    started = time.monotonic()
    try:
        with socket.create_connection(_address(bootstrap), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS)
            if not s.recv(4):
                return timeout
    except OSError:
        return timeout
    return time.monotonic() - started


@dataclass
class ProduceLatency:
    sent: int
    delivered: int
    failed: int
    latencies_ms: list[float]

    def percentile(self, p: float) -> float:
        if not self.latencies_ms:
            return float("inf")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def measure_produce(bootstrap: str, topic: str, seconds: float, rate: int = 200) -> ProduceLatency:
    """A confluent-kafka producer with its defaults (acks=all, linger.ms=5) sends ``rate``
    records a second for ``seconds``; the delivery latency of each."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 60000})
    latencies: list[float] = []
    failed = [0]

    def delivered(err: object, _msg: object, sent_at: float) -> None:
        if err is None:
            latencies.append((time.monotonic() - sent_at) * 1000)
        else:
            failed[0] += 1

    sent = 0
    started = time.monotonic()
    while (now := time.monotonic()) - started < seconds:
        due = int((now - started) * rate)
        while sent < due:
            producer.produce(topic, b"normal-%d" % sent,
                             on_delivery=lambda e, m, t=time.monotonic(): delivered(e, m, t))
            sent += 1
        producer.poll(0.002)
    producer.flush(60)
    return ProduceLatency(sent, len(latencies), failed[0], latencies)
