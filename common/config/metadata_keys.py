"""The broker configs of the cluster metadata log (``docs/adr/0025-metadata-log.md``).

Part of :data:`common.config.keys.BROKER_CONFIGS`. The snapshot keys are Kafka's
(``metadata.log.max.record.bytes.between.snapshots``,
``metadata.log.max.snapshot.interval.ms``), with Kafka's defaults; the others are
Strata's own, marked "(Strata)".

Immutable; thread-safe.
"""

from __future__ import annotations

from common.config.configdef import ConfigDef, at_least

__all__ = ["METADATA_CONFIGS"]

# fmt: off
METADATA_CONFIGS = (
    ConfigDef("metadata.poll.interval.ms", "long", "500",
            "How often a broker checks the bucket for a newer cluster metadata (Strata).",
            validator=at_least(1)),
    ConfigDef("metadata.log.max.record.bytes.between.snapshots", "long", "20971520",
            "The controller snapshots the metadata log after this many bytes of batches.",
            validator=at_least(1)),
    ConfigDef("metadata.log.max.snapshot.interval.ms", "long", "3600000",
            "The controller snapshots the metadata log at least this often when it changed.",
            validator=at_least(0)),
    ConfigDef("metadata.log.retention.ms", "long", "3600000",
            "Batches of the metadata log are deleted once a snapshot covering them is this old "
            "(Strata).", validator=at_least(0)),
    ConfigDef("metadata.log.head.check.ms", "long", "60000",
            "How often a broker reads the metadata log's head, to find it was trimmed past its "
            "position while it was away (Strata).", validator=at_least(1)),
)
# fmt: on
