"""Strata's log layer: record batches, segments, indexes and partition logs on local disk."""

from __future__ import annotations

from common.record.batch import (
    BatchHeader,
    Compression,
    Record,
    ValidatedRecords,
    build_batch,
    decode_all,
    decode_batch,
    validate_batches,
)
from local_tier.config import LogConfig
from local_tier.epoch import LeaderEpochCache
from local_tier.index import CorruptIndexError, OffsetIndex, TimeIndex
from local_tier.log import FetchDataInfo, Log, LogAppendInfo
from local_tier.manager import LogManager
from local_tier.segment import FileRegion, LogSegment

__all__ = [
    "BatchHeader",
    "Compression",
    "CorruptIndexError",
    "FetchDataInfo",
    "FileRegion",
    "LeaderEpochCache",
    "Log",
    "LogAppendInfo",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "OffsetIndex",
    "Record",
    "TimeIndex",
    "ValidatedRecords",
    "build_batch",
    "decode_all",
    "decode_batch",
    "validate_batches",
]
