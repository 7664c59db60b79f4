"""The log cleaner's settings from the broker's ``log.cleaner.*`` configs.

The cleaner threads (``local_tier.cleaning``) read a log's state and swap
segments only on the thread that owns the logs, the broker's event loop, through
:class:`local_tier.ownership.LoopOwner`. Tiered compacted logs are left to the remote
cleaner (ADR 0019): their sealed segments go to the bucket, which is compacted instead.
"""

from __future__ import annotations

from common.config import BrokerConfig
from local_tier.cleaning.manager import CleanerConfig

__all__ = ["cleaner_config"]



def cleaner_config(config: BrokerConfig) -> CleanerConfig:
    """The broker's ``log.cleaner.*`` keys as the cleaner's settings."""
    points = frozenset(p.strip() for p in config.get_str("log.cleaner.test.pause.at").split(",") if p.strip())
    return CleanerConfig(
        enable=config.get_bool("log.cleaner.enable"),
        threads=config.get_int("log.cleaner.threads"),
        dedupe_buffer_size=config.get_int("log.cleaner.dedupe.buffer.size"),
        io_buffer_size=config.get_int("log.cleaner.io.buffer.size"),
        io_buffer_load_factor=float(config.get_str("log.cleaner.io.buffer.load.factor")),
        io_max_bytes_per_second=float(config.get_str("log.cleaner.io.max.bytes.per.second")),
        backoff_ms=config.get_int("log.cleaner.backoff.ms"),
        test_pause_points=points,
    )
