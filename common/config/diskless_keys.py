"""The broker configs of diskless topics (``docs/adr/0027-diskless-topics.md``), all Strata's own.

Part of :data:`common.config.keys.BROKER_CONFIGS`. The topic config that makes a topic
diskless, ``diskless.enable``, is with the other topic configs.

Immutable; thread-safe.
"""

from __future__ import annotations

from common.config.configdef import ConfigDef, at_least

__all__ = ["DISKLESS_CONFIGS"]

# fmt: off
DISKLESS_CONFIGS = (
    ConfigDef("diskless.batch.ms", "int", "250", "A broker's write-ahead object of diskless topics goes "
            "to the bucket this long after its first batch (ADR 0027).", validator=at_least(1)),
    ConfigDef("diskless.batch.bytes", "int", "8388608", "... or once it holds this many bytes, whichever comes first.",
            validator=at_least(1024)),
    ConfigDef("diskless.max.inflight.objects", "int", "4", "A broker's write-ahead objects between their "
            "PUT and their producers' answers; at the bound the open object keeps filling, then produce "
            "requests wait (a slow bucket bounds what the broker buffers).", validator=at_least(1)),
    ConfigDef("diskless.commit.deadline.ms", "long", "30000", "A diskless produce whose commit has not "
            "finished this long after its object was created fails (REQUEST_TIMED_OUT).", validator=at_least(100)),
    ConfigDef("diskless.orphan.grace.ms", "long", "600000", "A write-ahead object no commit names is "
            "deleted once this old; at least 4x diskless.commit.deadline.ms.", validator=at_least(400)),
    ConfigDef("diskless.merge.interval.ms", "long", "60000", "A sequencer merges a diskless partition's "
            "committed tail into a tiered segment this long after its oldest entry, or at segment.bytes.",
            validator=at_least(1)),
    ConfigDef("diskless.collect.interval.ms", "long", "300000", "How often the active controller "
            "deletes merged commit objects and orphaned write-ahead objects.", validator=at_least(100)),
    ConfigDef("diskless.cache.bytes", "long", "268435456", "Bytes of write-ahead objects a broker "
            "keeps in memory for reads of diskless topics.", validator=at_least(0)),
)
# fmt: on
