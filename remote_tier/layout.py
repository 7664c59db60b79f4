"""The bucket's object layout: the only module that makes or parses object keys.

The layout is a public contract (Spark and other readers depend on it), written
down in ``docs/object-layout.md``; change the two together, and bump
:data:`FORMAT_VERSION` in :mod:`remote_tier.manifest` for anything a reader of the
old layout would misread. Per partition::

    {prefix}/topics/{topic_id}/{partition}/manifest.json
    {prefix}/topics/{topic_id}/{partition}/{base_offset:020d}-{upload_id}.log
    {prefix}/topics/{topic_id}/{partition}/{base_offset:020d}-{upload_id}.index
    {prefix}/topics/{topic_id}/{partition}/{base_offset:020d}-{upload_id}.timeindex
    {prefix}/topics/{topic_id}/{partition}/{base_offset:020d}-{upload_id}.txnindex   (v2, optional)
    {prefix}/topics/{topic_id}/{partition}/{base_offset:020d}-{upload_id}.snapshot   (v2, optional)

``prefix`` is optional (no leading or trailing ``/``); ``topic_id`` is the topic's
UUID in its canonical hyphenated lower-case form, so a topic deleted and created
again under the same name never mixes with its predecessor's objects;
``upload_id`` is 32 lower-case hex digits, new for every upload attempt, so a
retried upload never overwrites an object a manifest already references.

Pure functions and frozen values: thread-safe, no I/O.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "MANIFEST_NAME",
    "PartitionLayout",
    "SegmentFile",
    "SegmentObjectKey",
    "new_upload_id",
]

MANIFEST_NAME = "manifest.json"
_UPLOAD_ID = re.compile(r"[0-9a-f]{32}")
_SEGMENT_NAME = re.compile(r"(\d{20})-([0-9a-f]{32})\.(log|index|timeindex|txnindex|snapshot)")


class SegmentFile(Enum):
    """The objects of one remote segment, by their name suffix.

    ``.txnindex`` (the segment's aborted transactions) and ``.snapshot`` (the
    producer state at the segment's end) exist only when the manifest entry
    says so (format version 2).
    """

    LOG = "log"
    OFFSET_INDEX = "index"
    TIME_INDEX = "timeindex"
    TXN_INDEX = "txnindex"
    PRODUCER_SNAPSHOT = "snapshot"


@dataclass(frozen=True, slots=True)
class SegmentObjectKey:
    """What a segment object's key says: base offset, upload id and which file."""

    base_offset: int
    upload_id: str
    file: SegmentFile


def new_upload_id() -> str:
    """A fresh upload id (a random UUID as 32 hex digits)."""
    return uuid.uuid4().hex


def _normalize_prefix(prefix: str) -> str:
    stripped = prefix.strip("/")
    return stripped + "/" if stripped else ""


@dataclass(frozen=True, slots=True)
class PartitionLayout:
    """Keys of one partition's objects under ``prefix`` (relative to the store's root)."""

    prefix: str
    topic_id: str
    partition: int

    def __post_init__(self) -> None:
        canonical = str(uuid.UUID(str(self.topic_id)))
        object.__setattr__(self, "topic_id", canonical)
        if self.partition < 0:
            raise ValueError(f"partition must be >= 0, not {self.partition}")

    @property
    def directory(self) -> str:
        """The partition's key prefix, ending with ``/``: list it to see every object."""
        return f"{_normalize_prefix(self.prefix)}topics/{self.topic_id}/{self.partition}/"

    @property
    def manifest_key(self) -> str:
        return self.directory + MANIFEST_NAME

    def segment_key(self, base_offset: int, upload_id: str, file: SegmentFile) -> str:
        if base_offset < 0 or not _UPLOAD_ID.fullmatch(upload_id):
            raise ValueError(f"invalid segment name: base {base_offset}, upload id {upload_id!r}")
        return f"{self.directory}{base_offset:020d}-{upload_id}.{file.value}"

    def segment_keys(self, base_offset: int, upload_id: str) -> tuple[str, str, str]:
        """The ``.log``, ``.index`` and ``.timeindex`` keys of one uploaded segment."""
        return (
            self.segment_key(base_offset, upload_id, SegmentFile.LOG),
            self.segment_key(base_offset, upload_id, SegmentFile.OFFSET_INDEX),
            self.segment_key(base_offset, upload_id, SegmentFile.TIME_INDEX),
        )

    def all_segment_keys(self, base_offset: int, upload_id: str) -> tuple[str, ...]:
        """Every key an upload of this segment may have written (for deletion)."""
        return tuple(self.segment_key(base_offset, upload_id, file) for file in SegmentFile)

    def parse_segment_key(self, key: str) -> SegmentObjectKey | None:
        """The parts of a segment object's key in this partition; None for any other key."""
        if not key.startswith(self.directory):
            return None
        match = _SEGMENT_NAME.fullmatch(key[len(self.directory) :])
        if match is None:
            return None
        return SegmentObjectKey(int(match[1]), match[2], SegmentFile(match[3]))
