"""Which broker configs change at run time, and where their dynamic values are kept.

Kafka's ``DynamicBrokerConfig`` names the broker configs an operator may change
with ``kafka-configs.sh --entity-type brokers (--entity-default | --entity-name N)
--alter`` without a restart. Strata accepts those of them it follows at run time
(docs/adr/0022-dynamic-broker-configs.md):

* :data:`DYNAMIC_LOG_CONFIGS`, Kafka's ``DynamicLogConfig``: the first broker synonym
  of every topic config (``log.retention.ms``, ``log.segment.bytes``,
  ``message.max.bytes`` ...). They are the defaults of topics without an override of
  their own, so a change reaches every such topic's logs at once. The lower-precedence
  synonyms (``log.retention.hours``, ``log.roll.hours`` ...) stay static, as in Kafka.
* :data:`DYNAMIC_CLEANER_CONFIGS`, Kafka's ``LogCleaner.RECONFIGURABLE_CONFIGS``: the
  cleaners' threads, buffers, I/O rate and back-off.
* the connection limits and KIP-956's remote-read rate, read where they are used.

The values live in the cluster metadata's section :data:`SECTION`, one object per
broker id and one, :data:`DEFAULT`, for the cluster-wide default, so every broker
of the cluster reads the same values and they survive restarts.

Constants only; thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.config.keys import TOPIC_CONFIGS

__all__ = ["DEFAULT", "DYNAMIC", "DYNAMIC_CLEANER_CONFIGS", "DYNAMIC_LOG_CONFIGS", "SECTION", "dynamic_levels"]

SECTION = "broker_configs"
DEFAULT = "default"  # the cluster-wide default's key in the section

#: Strata's own synonym of ``remote.storage.enable``: a topic can never turn tiering off,
#: so its default must not change under the topics that follow it (Kafka has no such key)
_STATIC_TOPIC_SYNONYMS = frozenset({"log.remote.storage.enable"})

DYNAMIC_LOG_CONFIGS = frozenset(
    d.broker_synonym for d in TOPIC_CONFIGS.values()
    if d.broker_synonym is not None and d.broker_synonym not in _STATIC_TOPIC_SYNONYMS
)

DYNAMIC_CLEANER_CONFIGS = frozenset({
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
})

DYNAMIC = DYNAMIC_LOG_CONFIGS | DYNAMIC_CLEANER_CONFIGS | frozenset({
    "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
    "max.connection.creation.rate", "remote.log.manager.fetch.max.bytes.per.second",
})


def dynamic_levels(section: Any, node_id: int) -> tuple[Mapping[str, str], Mapping[str, str]]:
    """Broker ``node_id``'s own dynamic configs and the cluster default's, in that
    (Kafka's) order of precedence, from the parsed section (None: none set)."""
    section = section or {}
    return section.get(str(node_id), {}), section.get(DEFAULT, {})
