"""Helpers shared by the local_tier tests: small record batches."""

from __future__ import annotations

from common.record.batch import Compression, build_batch
from local_tier.config import LogConfig

__all__ = ["make_batch", "small_config"]


def make_batch(
    count: int = 3,
    *,
    timestamp: int = 1_000,
    value_size: int = 10,
    compression: Compression = Compression.NONE,
    base_offset: int = 0,
) -> bytes:
    """``count`` records whose timestamps are ``timestamp, timestamp + 1, ...``."""
    return build_batch(
        [
            (f"k{i}".encode(), bytes([65 + i % 26]) * value_size, [], timestamp + i)
            for i in range(count)
        ],
        compression=compression,
        base_offset=base_offset,
    )


def small_config(**overrides: object) -> LogConfig:
    """A LogConfig with tiny index intervals so tests exercise sparse indexing."""
    values: dict[str, object] = {"index_interval_bytes": 100, "file_delete_delay_ms": 0}
    values.update(overrides)
    return LogConfig(**values)  # type: ignore[arg-type]
