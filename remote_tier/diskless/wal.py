"""The write-ahead objects of diskless topics: keys and bytes (ADR 0027, section 2).

One object holds the batches a broker took for many partitions in one window::

    {prefix}/diskless/wal/{broker_id}/{created_ms:013d}-{object_id}.wal

    batches of the first partition, in arrival order   (RecordBatch v2, as produced)
    batches of the next partition ...
    trailer: one run per partition                     (topic id, partition, position, length, batches)
    footer, 16 bytes: b"SWAL", version u16, 0 u16, trailer length u32, CRC-32C of the trailer u32

Base offsets stay as the producer sent them: the sequencer assigns them at commit and a
reader writes them into the bytes it serves. A partition's batches are one contiguous run,
so a reader or the merge job reads a partition's bytes with one ranged GET. ``created_ms``
in the key is the writer's clock when the object was opened: the sequencer's commit
deadline and the collector's grace period are measured from it without a HEAD.

Pure functions and values: thread-safe, no I/O. Every length read from an object is
bounded by the object's size before it is used.
"""

from __future__ import annotations

import re
import struct
import uuid
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

__all__ = [
    "FOOTER_BYTES",
    "WalFormatError",
    "WalKey",
    "WalObject",
    "WalObjectBuilder",
    "WalRun",
    "parse_footer",
    "parse_trailer",
]

_MAGIC = b"SWAL"
_VERSION = 1
_FOOTER = struct.Struct(">4sHHII")
FOOTER_BYTES = _FOOTER.size
_RUN = struct.Struct(">16siQII")  # topic id, partition, position, length, batch count
_COUNT = struct.Struct(">I")
_NAME = re.compile(r"([0-9]{13})-([0-9a-f]{32})\.wal")  # ASCII digits only (\d takes any Unicode digit)


class WalFormatError(ValueError):
    """A write-ahead object (or its key) that is not one this module wrote."""


@dataclass(frozen=True, slots=True)
class WalKey:
    """Where a write-ahead object lives and what its name says."""

    prefix: str
    broker_id: int
    created_ms: int
    object_id: str  # 32 lower-case hex digits, new per object

    @classmethod
    def new(cls, prefix: str, broker_id: int, created_ms: int) -> WalKey:
        return cls(prefix, broker_id, created_ms, uuid.uuid4().hex)

    @property
    def key(self) -> str:
        head = f"{self.prefix}/" if self.prefix else ""
        return f"{head}diskless/wal/{self.broker_id}/{self.created_ms:013d}-{self.object_id}.wal"

    @classmethod
    def parse(cls, key: str) -> WalKey:
        """The inverse of :attr:`key`; :class:`WalFormatError` for any other key."""
        head, sep, rest = key.rpartition("diskless/wal/")
        broker, slash, name = rest.partition("/")
        match = _NAME.fullmatch(name)
        if not sep or not slash or match is None or re.fullmatch(r"[0-9]+", broker) is None or (
                head and not head.endswith("/")):
            raise WalFormatError(f"not a write-ahead object key: {key!r}")
        return cls(head.rstrip("/"), int(broker), int(match.group(1)), match.group(2))


@dataclass(frozen=True, slots=True)
class WalRun:
    """The batches of one partition in an object: ``length`` bytes from ``position``."""

    topic_id: uuid.UUID
    partition: int
    position: int
    length: int
    batches: int


class WalObject(NamedTuple):
    """A built object: its bytes, its runs, and where each batch landed (in the order added)."""

    data: bytes
    runs: list[WalRun]
    positions: list[int]


class WalObjectBuilder:
    """Collects batches by partition while a window is open; :meth:`build` lays them out.

    Not thread-safe: the broker's event loop adds, then hands the built bytes to the PUT.
    """

    def __init__(self) -> None:
        self._parts: dict[tuple[uuid.UUID, int], list[tuple[int, bytes]]] = {}  # (order added, batch)
        self._count = 0
        self.size = 0  # the batches' bytes so far (what ``diskless.batch.bytes`` bounds)

    def add(self, topic_id: uuid.UUID, partition: int, batch: bytes) -> None:
        self._parts.setdefault((topic_id, partition), []).append((self._count, batch))
        self._count += 1
        self.size += len(batch)

    def __len__(self) -> int:
        return self._count

    def build(self) -> WalObject:
        """The object's bytes, its runs (partitions by topic id, then index) and each
        batch's position."""
        chunks: list[bytes] = []
        runs: list[WalRun] = []
        positions = [0] * self._count
        position = 0
        for (topic_id, partition), batches in sorted(self._parts.items(), key=lambda kv: (kv[0][0].bytes, kv[0][1])):
            start = position
            for added, batch in batches:
                positions[added] = position
                chunks.append(batch)
                position += len(batch)
            runs.append(WalRun(topic_id, partition, start, position - start, len(batches)))
        trailer = _COUNT.pack(len(runs)) + b"".join(
            _RUN.pack(r.topic_id.bytes, r.partition, r.position, r.length, r.batches) for r in runs
        )
        footer = _FOOTER.pack(_MAGIC, _VERSION, 0, len(trailer), crc32c(trailer))
        return WalObject(b"".join((*chunks, trailer, footer)), runs, positions)


def parse_footer(footer: bytes | memoryview, object_size: int) -> int:
    """The trailer's length from an object's last :data:`FOOTER_BYTES` bytes, checked
    against ``object_size`` (so the ranged GET of the trailer is bounded)."""
    if len(footer) != FOOTER_BYTES:
        raise WalFormatError(f"a footer is {FOOTER_BYTES} bytes, not {len(footer)}")
    magic, version, _, length, _ = _FOOTER.unpack(footer)
    if magic != _MAGIC:
        raise WalFormatError("not a write-ahead object (bad magic)")
    if version != _VERSION:
        raise WalFormatError(f"write-ahead object version {version} is not one this broker reads")
    if length < _COUNT.size or length > object_size - FOOTER_BYTES:
        raise WalFormatError(f"trailer of {length} bytes does not fit an object of {object_size}")
    return length


def parse_trailer(data: bytes | memoryview, object_size: int | None = None) -> list[WalRun]:
    """The runs of an object, from its whole bytes (``object_size`` None) or from its tail
    (the trailer and footer, ``object_size`` the whole object's size)."""
    view = memoryview(data)
    size = len(view) if object_size is None else object_size
    if len(view) < FOOTER_BYTES:
        raise WalFormatError(f"an object of {len(view)} bytes has no footer")
    length = parse_footer(view[-FOOTER_BYTES:], size)
    if length > len(view) - FOOTER_BYTES:
        raise WalFormatError(f"the trailer ({length} bytes) is not in the {len(view)} bytes given")
    trailer = view[len(view) - FOOTER_BYTES - length : len(view) - FOOTER_BYTES]
    if crc32c(trailer) != _FOOTER.unpack(view[-FOOTER_BYTES:])[4]:
        raise WalFormatError("the trailer's CRC does not match")
    (count,) = _COUNT.unpack_from(trailer)
    if count * _RUN.size != length - _COUNT.size:
        raise WalFormatError(f"a trailer of {length} bytes cannot hold {count} runs")
    batches_end = size - FOOTER_BYTES - length
    runs = []
    end = 0
    for i in range(count):
        raw_id, partition, position, run_length, batches = _RUN.unpack_from(trailer, _COUNT.size + i * _RUN.size)
        if position != end or position + run_length > batches_end or partition < 0 or batches < 1:
            raise WalFormatError(f"run {i} ({position}+{run_length}) does not follow its predecessor")
        end = position + run_length
        runs.append(WalRun(uuid.UUID(bytes=raw_id), partition, position, run_length, batches))
    if end != batches_end:
        raise WalFormatError(f"the runs end at {end}, the batches at {batches_end}")
    return runs
