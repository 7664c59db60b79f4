"""A fuzzer of Kafka request frames against a running broker (tests/service/test_fuzz_wire.py, bench/fuzz.py).

Seeds are valid requests of every API and version the broker advertises
(``kafka_wire.example_request``), Produce seeds carrying uncompressed and
compressed record batches. Each case mutates a seed with one of the faults of
issue 21 and sends it:

* ``flip``: 1-4 random bytes changed (size prefix kept consistent);
* ``length``: a 1/2/4/5-byte window overwritten with a forged length
  (2^31-1, 2^15-1, -1, -2, the varints 2^31-1 and 2^35-1) — defect 1;
* ``truncate`` / ``extend``: the frame cut short or grown by random bytes or an
  unknown tagged field (size prefix consistent) — defect 2;
* ``size-lie``: the size prefix claims more than is sent (up to 100 MiB), then
  the client goes away — defect 3;
* ``records``: the record batch inside a Produce frame mutated and its CRC
  recomputed, so only record-level validation can catch it — defect 4.

Randomness comes from a ``Draw`` (hypothesis in the suite, ``random.Random`` in
the bench). A case never waits long for an answer (``reply_timeout``): a mutated
request may be a legitimate long poll.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from service.handlers.router import api_table, hand_decoders
from tests.service.kafka_wire import encode_request, example_request, records, with_crc

__all__ = ["Draw", "FuzzStats", "Fuzzer", "RandomDraw", "rss_bytes"]

_I32 = struct.Struct(">i")
_FORGED = [
    struct.pack(">i", 2**31 - 1),
    struct.pack(">h", 0x7FFF),
    struct.pack(">i", -1),
    struct.pack(">h", -2),
    b"\xff\xff\xff\xff\x07",
    b"\xff\xff\xff\xff\x7f",
    b"\xff",
]
KINDS = ("flip", "length", "truncate", "extend", "size-lie", "records")
#: seeds name this group; each case renames it (same length), so no JoinGroup waits for another member
_GROUP = "fuzz-group-00000"


class Draw(Protocol):
    def integer(self, low: int, high: int) -> int: ...  # inclusive bounds


class RandomDraw:
    """A ``Draw`` from a seeded ``random.Random``."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd

    def integer(self, low: int, high: int) -> int:
        return self.rnd.randint(low, high)


@dataclass
class FuzzStats:
    cases: int = 0
    frames: int = 0
    answered: int = 0
    closed: int = 0
    slow: int = 0  # no answer within reply_timeout (e.g. a long poll): connection dropped
    slow_apis: dict[int, int] = field(default_factory=dict)
    by_kind: dict[str, int] = field(default_factory=dict)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _seed_values(api: int, topic: str) -> dict[str, Any]:
    values: dict[str, Any] = {"name": topic, "topic": topic, "resource_name": topic, "group_id": _GROUP,
                              "partition_index": 0, "index": 0, "partition": 0}
    if api in (19, 37):  # never really create topics or partitions (a flipped count could be 65,536)
        values.update(validate_only=True, name="fuzz-new", count=2)
    if api == 20:
        values.update(name="fuzz-absent", topic_names=("fuzz-absent",))
    if api == 27:  # a marker a flip makes valid takes an offset no consumer is given: keep the count checkable
        values.update(name="fuzz-absent")
    return values


class Fuzzer:
    """Mutates seed frames and sends them to ``bootstrap``; counts what comes back."""

    def __init__(self, bootstrap: str, topic: str, reply_timeout: float = 0.25) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.address = (host, int(port))
        self.reply_timeout = reply_timeout
        self.stats = FuzzStats()
        self.seeds: list[tuple[int, bytes, bytes | None]] = []  # (api, frame without size, batch in it)
        # ListOffsets v0 has no kio schema (the broker decodes it by hand): a seed built by hand
        v0 = struct.pack(">hhih", 2, 0, 1, 4) + b"fuzz" + struct.pack(">ii", -1, 1)
        v0 += struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">iiqi", 1, 0, -1, 10)
        self.seeds.append((2, v0, None))
        for spec in sorted(api_table().values(), key=lambda s: s.key):
            for version in range(spec.min_version, spec.max_version + 1):
                if (spec.key, version) in hand_decoders():
                    continue
                batches: Sequence[bytes | None] = [None]
                if spec.key == 0:
                    batches = [records(5), records(5, compression_type=1), records(5, compression_type=4)]
                for batch in batches:
                    values = _seed_values(spec.key, topic)
                    if batch is not None:
                        values["records"] = batch
                    frame = encode_request(example_request(spec.key, version, **values), 1)
                    self.seeds.append((spec.key, frame, batch))
        self._produce_seeds = [seed for seed in self.seeds if seed[2] is not None]
        self._sock: socket.socket | None = None
        #: the last frames sent (kind, api, bytes), to say what a failure followed
        self.recent: deque[tuple[str, int, bytes]] = deque(maxlen=20)
        self._groups = 0

    # -- mutation -------------------------------------------------------------------

    def case(self, draw: Draw) -> None:
        """One mutated seed, sent; waits briefly for an answer or a close."""
        kind = KINDS[draw.integer(0, len(KINDS) - 1)]
        seeds = self._produce_seeds if kind == "records" else self.seeds
        api, frame, batch = seeds[draw.integer(0, len(seeds) - 1)]
        self._groups += 1
        body = bytearray(frame.replace(_GROUP.encode(), b"fuzz-group-%05d" % (self._groups % 100000)))
        if kind == "flip":
            for _ in range(draw.integer(1, 4)):
                body[draw.integer(8, len(body) - 1)] = draw.integer(0, 255)
        elif kind == "length":
            forged = _FORGED[draw.integer(0, len(_FORGED) - 1)]
            at = draw.integer(8, max(8, len(body) - len(forged)))
            body[at : at + len(forged)] = forged
        elif kind == "truncate":
            del body[draw.integer(8, len(body) - 1) :]
        elif kind == "extend":
            extra = b"\x01\x05\x02hi" if draw.integer(0, 1) else bytes(draw.integer(0, 255) for _ in range(8))
            body += extra
        elif kind == "records":
            assert batch is not None
            at = frame.index(batch)
            lying = bytearray(batch)
            for _ in range(draw.integer(1, 3)):
                lying[draw.integer(21, len(lying) - 1)] = draw.integer(0, 255)
            body[at : at + len(batch)] = with_crc(lying)
        if kind == "size-lie":
            declared = len(body) + draw.integer(1, 100 * 1024 * 1024)
            data = _I32.pack(declared) + bytes(body[: draw.integer(0, len(body))])
        else:
            data = _I32.pack(len(body)) + bytes(body)
        self.stats.cases += 1
        self.stats.by_kind[kind] = self.stats.by_kind.get(kind, 0) + 1
        self.recent.append((kind, api, data))
        if kind == "size-lie":
            self._send_and_leave(data)
        else:
            self._exchange(data)

    # -- sockets ----------------------------------------------------------------------

    def _connect(self) -> socket.socket:
        if self._sock is None:
            self._sock = socket.create_connection(self.address, timeout=10)
        return self._sock

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _send_and_leave(self, data: bytes) -> None:
        self.stats.frames += 1
        with socket.create_connection(self.address, timeout=10) as sock:
            sock.sendall(data)

    def _exchange(self, data: bytes) -> None:
        self.stats.frames += 1
        sock = self._connect()
        try:
            sock.sendall(data)
            sock.settimeout(self.reply_timeout)
            head = _recv_exactly(sock, 4)
            if head is None:
                self.stats.closed += 1
                self._drop()
                return
            if _recv_exactly(sock, _I32.unpack(head)[0]) is None:
                raise ConnectionError("the broker closed the connection in the middle of an answer")
            self.stats.answered += 1
        except TimeoutError:
            self.stats.slow += 1
            api = struct.unpack_from(">h", data, 4)[0]
            self.stats.slow_apis[api] = self.stats.slow_apis.get(api, 0) + 1
            self._drop()
        except (ConnectionResetError, BrokenPipeError):
            self.stats.closed += 1
            self._drop()

    def close(self) -> None:
        self._drop()

    def run_for(self, seconds: float, draw: Draw, stop: Callable[[], bool] = lambda: False) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not stop():
            self.case(draw)


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)
