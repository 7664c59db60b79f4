"""Kafka's topic and broker config keys: names, types, defaults, validation.

Over 500 lines because it is one table: every topic config and every broker config not
grouped in a module of its own (security, the metadata log, diskless topics), with the
cross-key checks that read them.

``TOPIC_CONFIGS`` and ``BROKER_CONFIGS`` are the single source of truth for the
config vocabulary; names and defaults are Kafka's (3.x), with one documented
deviation: ``segment.bytes`` / ``log.segment.bytes`` accept anything from 1024
bytes (Kafka 4 requires 1 MiB, Kafka 3 only 14 bytes) so tests can roll small
segments.

Every topic config names its ``broker_synonym``, the broker config providing its
default (``retention.ms`` <- ``log.retention.ms``); every synonym is itself a key
of ``BROKER_CONFIGS``. See :mod:`common.config.broker` for how the broker's
values resolve (``log.retention.ms`` > ``log.retention.minutes`` > ``log.retention.hours``).

Immutable; thread-safe.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from common.config.configdef import (
    ConfigDef,
    ConfigKind,
    InvalidConfigValue,
    Validator,
    at_least,
    between,
    local_retention_problem,
    parse_cpu_list,
)
from common.config.diskless_keys import DISKLESS_CONFIGS
from common.config.metadata_keys import METADATA_CONFIGS
from common.config.security_keys import SECURITY_CONFIGS
from common.errors import InvalidConfigError

__all__ = [
    "BROKER_CONFIGS",
    "TOPIC_CONFIGS",
    "check_topic_config_combination",
    "validate_topic_config",
]

_LONG_MAX = str(2**63 - 1)
_WEEK_MS = str(7 * 24 * 3600 * 1000)
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_CLEANUP_POLICIES = ("delete", "compact")
_MIN_SEGMENT_BYTES = 1024


def _cpu_list(value: object) -> str | None:
    """A Linux CPU list ("1", "2-3", "0,2-5") naming CPUs this machine has."""
    try:
        cpus = parse_cpu_list(str(value))
    except ValueError as exc:
        return str(exc)
    count = os.cpu_count() or 1
    missing = sorted(c for c in cpus if c >= count)
    if missing:
        return f"CPU {missing[0]} does not exist on this machine (CPUs 0-{count - 1})"
    return None


def _table(*defs: ConfigDef) -> Mapping[str, ConfigDef]:
    return {d.name: d for d in sorted(defs, key=lambda d: d.name)}


def _topic(
    name: str,
    kind: ConfigKind,
    default: str | None,
    synonym: str | None,
    doc: str,
    *,
    validator: Validator | None = None,
    valid_values: tuple[str, ...] = (),
) -> ConfigDef:
    return ConfigDef(name, kind, default, doc, validator, valid_values, synonym)


# fmt: off
TOPIC_CONFIGS: Mapping[str, ConfigDef] = _table(
    _topic("cleanup.policy", "list", "delete", "log.cleanup.policy",
           "delete: drop old segments by retention; compact: keep the last value per key.",
           valid_values=_CLEANUP_POLICIES),
    _topic("compression.type", "string", "producer", "compression.type",
           "Final compression of the topic's batches; producer keeps the producer's codec.",
           valid_values=_COMPRESSION_TYPES),
    _topic("delete.retention.ms", "long", "86400000", "log.cleaner.delete.retention.ms",
           "How long delete tombstones are kept on compacted topics.", validator=at_least(0)),
    _topic("diskless.enable", "boolean", "false", None,
           "Diskless topic (ADR 0027): records go to the bucket through any broker, no local "
           "log and no replication between brokers; set at creation only."),
    _topic("file.delete.delay.ms", "long", "60000", "log.segment.delete.delay.ms",
           "Time to wait before deleting a file from the filesystem.", validator=at_least(0)),
    _topic("flush.messages", "long", _LONG_MAX, "log.flush.interval.messages",
           "Force an fsync after this many messages (default: rely on the page cache).",
           validator=at_least(1)),
    _topic("flush.ms", "long", _LONG_MAX, "log.flush.interval.ms",
           "Force an fsync after this much time (default: rely on the page cache).",
           validator=at_least(0)),
    _topic("index.interval.bytes", "int", "4096", "log.index.interval.bytes",
           "Bytes of log between two offset index entries.", validator=at_least(0)),
    _topic("local.retention.bytes", "long", "-2", "log.local.retention.bytes",
           "Bytes kept on local disk before tiered segments are deleted locally; "
           "-2 means retention.bytes.", validator=at_least(-2)),
    _topic("local.retention.ms", "long", "-2", "log.local.retention.ms",
           "Time a tiered segment stays on local disk; -2 means retention.ms.",
           validator=at_least(-2)),
    _topic("max.compaction.lag.ms", "long", _LONG_MAX, "log.cleaner.max.compaction.lag.ms",
           "Maximum time a message stays ineligible for compaction.", validator=at_least(1)),
    _topic("max.message.bytes", "int", "1048588", "message.max.bytes",
           "Largest record batch size allowed.", validator=at_least(0)),
    _topic("message.timestamp.after.max.ms", "long", _LONG_MAX,
           "log.message.timestamp.after.max.ms",
           "Largest allowed amount a CreateTime timestamp may be ahead of the broker.",
           validator=at_least(0)),
    _topic("message.timestamp.before.max.ms", "long", _LONG_MAX,
           "log.message.timestamp.before.max.ms",
           "Largest allowed amount a CreateTime timestamp may be behind the broker.",
           validator=at_least(0)),
    _topic("message.timestamp.type", "string", "CreateTime", "log.message.timestamp.type",
           "Whether record timestamps are the producer's or the broker's append time.",
           valid_values=_TIMESTAMP_TYPES),
    _topic("min.cleanable.dirty.ratio", "double", "0.5", "log.cleaner.min.cleanable.ratio",
           "Dirty ratio above which the log is compacted.", validator=between(0, 1)),
    _topic("min.compaction.lag.ms", "long", "0", "log.cleaner.min.compaction.lag.ms",
           "Minimum time a message stays uncompacted.", validator=at_least(0)),
    _topic("min.insync.replicas", "int", "1", "min.insync.replicas",
           "Replicas that must acknowledge an acks=all write.", validator=at_least(1)),
    _topic("preallocate", "boolean", "false", "log.preallocate",
           "Preallocate the file of a new segment."),
    _topic("remote.storage.enable", "boolean", "false", "log.remote.storage.enable",
           "Tier sealed segments to the object store (needs "
           "remote.log.storage.system.enable on the broker)."),
    _topic("retention.bytes", "long", "-1", "log.retention.bytes",
           "Largest size of a partition before old segments are deleted; -1: no limit."),
    _topic("retention.ms", "long", _WEEK_MS, "log.retention.ms",
           "Longest time a segment is kept; -1: forever.", validator=at_least(-1)),
    _topic("segment.bytes", "int", "1073741824", "log.segment.bytes",
           f"Segment file size; at least {_MIN_SEGMENT_BYTES} (smaller than Kafka's minimum, "
           "so tests can roll small segments).", validator=at_least(_MIN_SEGMENT_BYTES)),
    _topic("segment.index.bytes", "int", "10485760", "log.index.size.max.bytes",
           "Size of the offset and time index of a segment.", validator=at_least(4)),
    _topic("segment.jitter.ms", "long", "0", "log.roll.jitter.ms",
           "Random jitter subtracted from segment.ms.", validator=at_least(0)),
    _topic("segment.ms", "long", _WEEK_MS, "log.roll.ms",
           "Roll a new segment after this much time even if it is not full.",
           validator=at_least(1)),
    _topic("unclean.leader.election.enable", "boolean", "false",
           "unclean.leader.election.enable",
           "Allow an out-of-sync replica to become leader (may lose data)."),
)
# fmt: on


# fmt: off
BROKER_CONFIGS: Mapping[str, ConfigDef] = _table(
    ConfigDef("node.id", "int", "1", "This node's id in the cluster.", validator=at_least(0)),
    ConfigDef("broker.id", "int", None, "Legacy name of node.id; must equal it when both are set.",
            validator=at_least(0)),
    ConfigDef("listeners", "string", "PLAINTEXT://:9092", "Addresses the broker listens on."),
    ConfigDef("advertised.listeners", "string", None, "Addresses given to clients."),
    ConfigDef("log.dirs", "string", None, "Directories of the local tier (overrides log.dir)."),
    ConfigDef("log.dir", "string", "/tmp/kafka-logs", "Directory of the local tier."),
    ConfigDef("num.partitions", "int", "1", "Default partition count of new topics.",
            validator=at_least(1)),
    ConfigDef("default.replication.factor", "int", "3",
            "Default replication factor of new topics; when not set, 3, or the number of "
            "registered brokers when there are fewer.", validator=at_least(1)),
    ConfigDef("auto.create.topics.enable", "boolean", "true",
            "Create a topic when a client asks for metadata of an unknown one."),
    ConfigDef("delete.topic.enable", "boolean", "true", "Allow topics to be deleted."),
    ConfigDef("message.max.bytes", "int", "1048588", "Largest record batch size allowed.",
            validator=at_least(0)),
    ConfigDef("log.segment.bytes", "int", "1073741824", "Segment file size.",
            validator=at_least(_MIN_SEGMENT_BYTES)),
    ConfigDef("log.roll.ms", "long", None, "Time before a new segment is rolled (wins over hours).",
            validator=at_least(1)),
    ConfigDef("log.roll.hours", "int", "168", "Time before a new segment is rolled, in hours.",
            validator=at_least(1)),
    ConfigDef("log.roll.jitter.ms", "long", None, "Maximum jitter subtracted from the roll time.",
            validator=at_least(0)),
    ConfigDef("log.roll.jitter.hours", "int", "0", "Maximum roll jitter, in hours.",
            validator=at_least(0)),
    ConfigDef("log.retention.ms", "long", None, "Retention time in ms; -1: forever (wins)."),
    ConfigDef("log.retention.minutes", "int", None, "Retention time in minutes (over hours)."),
    ConfigDef("log.retention.hours", "int", "168", "Retention time in hours."),
    ConfigDef("log.retention.bytes", "long", "-1", "Retention size of a partition; -1: none."),
    ConfigDef("log.retention.check.interval.ms", "long", "300000",
            "How often the retention policies are checked.", validator=at_least(1)),
    ConfigDef("log.index.interval.bytes", "int", "4096", "Bytes between offset index entries.",
            validator=at_least(0)),
    ConfigDef("log.index.size.max.bytes", "int", "10485760", "Size of a segment's indexes.",
            validator=at_least(4)),
    ConfigDef("log.flush.interval.messages", "long", _LONG_MAX, "Messages before an fsync.",
            validator=at_least(1)),
    ConfigDef("log.flush.interval.ms", "long", None,
            "Time before an fsync; unset: log.flush.scheduler.interval.ms."),
    ConfigDef("log.flush.scheduler.interval.ms", "long", _LONG_MAX,
            "How often the flusher checks whether a log needs an fsync."),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", "int", "60000",
            "How often the recovery point checkpoint is written.", validator=at_least(0)),
    ConfigDef("log.message.timestamp.type", "string", "CreateTime", "Default timestamp type.",
            valid_values=_TIMESTAMP_TYPES),
    ConfigDef("log.message.timestamp.before.max.ms", "long", _LONG_MAX,
            "Default of message.timestamp.before.max.ms.", validator=at_least(0)),
    ConfigDef("log.message.timestamp.after.max.ms", "long", _LONG_MAX,
            "Default of message.timestamp.after.max.ms.", validator=at_least(0)),
    ConfigDef("log.cleanup.policy", "list", "delete", "Default cleanup policy.",
            valid_values=_CLEANUP_POLICIES),
    ConfigDef("log.cleaner.delete.retention.ms", "long", "86400000",
            "Default of delete.retention.ms.", validator=at_least(0)),
    ConfigDef("log.cleaner.max.compaction.lag.ms", "long", _LONG_MAX,
            "Default of max.compaction.lag.ms.", validator=at_least(1)),
    ConfigDef("log.cleaner.min.cleanable.ratio", "double", "0.5",
            "Default of min.cleanable.dirty.ratio.", validator=between(0, 1)),
    ConfigDef("log.cleaner.min.compaction.lag.ms", "long", "0",
            "Default of min.compaction.lag.ms.", validator=at_least(0)),
    ConfigDef("log.cleaner.enable", "boolean", "true",
            "Run the log cleaner, which compacts topics with cleanup.policy=compact."),
    ConfigDef("log.cleaner.threads", "int", "1", "Threads of the log cleaner.",
            validator=at_least(0)),
    ConfigDef("log.cleaner.dedupe.buffer.size", "long", "134217728",
            "Memory of the cleaners' key maps, all threads together.", validator=at_least(1)),
    ConfigDef("log.cleaner.io.buffer.size", "int", "524288",
            "Bytes the cleaner reads (and writes) at a time.", validator=at_least(1)),
    ConfigDef("log.cleaner.io.buffer.load.factor", "double", "0.9",
            "How full the key map may get before a pass stops reading.", validator=between(0, 1)),
    ConfigDef("log.cleaner.io.max.bytes.per.second", "double", "1.7976931348623157E308",
            "I/O throttle of all cleaner threads together (reads plus writes).",
            validator=at_least(1)),
    ConfigDef("log.cleaner.backoff.ms", "long", "15000",
            "How long a cleaner thread sleeps when no log needs cleaning.", validator=at_least(0)),
    ConfigDef("log.cleaner.test.pause.at", "list", "",
            "Tests only (Strata): named points where the cleaner stops and waits (mapped, cleaned, "
            "swapping, swapped; remote-uploaded, remote-swapped), writing cleaner-paused-POINT "
            "in the log directory, so a test can kill the broker there. Never set it in production."),
    ConfigDef("remote.log.compaction.object.retention.ms", "long", "3600000",
            "How long the objects a remote compaction replaced stay in the bucket, listed as "
            "replaced in the manifest, so reads planned before it (Spark, tiered fetches) "
            "finish (Strata).", validator=at_least(0)),
    ConfigDef("remote.log.compaction.enable", "boolean", "true",
            "Compact the bucket's part of compacted tiered topics (Strata; the partition's "
            "leader does it).",),
    ConfigDef("log.preallocate", "boolean", "false", "Default of preallocate."),
    ConfigDef("log.segment.delete.delay.ms", "long", "60000", "Default of file.delete.delay.ms.",
            validator=at_least(0)),
    ConfigDef("log.local.retention.ms", "long", "-2", "Default of local.retention.ms.",
            validator=at_least(-2)),
    ConfigDef("log.local.retention.bytes", "long", "-2", "Default of local.retention.bytes.",
            validator=at_least(-2)),
    ConfigDef("remote.log.storage.system.enable", "boolean", "false",
            "Enable tiered storage on this broker (topics opt in with remote.storage.enable)."),
    ConfigDef("compression.type", "string", "producer", "Default compression of topics.",
            valid_values=_COMPRESSION_TYPES),
    ConfigDef("min.insync.replicas", "int", "1", "Default of min.insync.replicas.",
            validator=at_least(1)),
    ConfigDef("unclean.leader.election.enable", "boolean", "false",
            "Default of unclean.leader.election.enable."),
    ConfigDef("socket.request.max.bytes", "int", "104857600", "Largest request accepted.",
            validator=at_least(1)),
    ConfigDef("fetch.max.bytes", "int", "57671680", "Largest fetch response.",
            validator=at_least(1024)),
    ConfigDef("max.incremental.fetch.session.cache.slots", "int", "1000",
            "Incremental fetch sessions (KIP-227) the broker keeps; 0 disables them.",
            validator=at_least(0)),
    ConfigDef("replica.fetch.max.bytes", "int", "8388608",
            "Bytes fetched per partition by followers (Kafka's default is 1 MiB; a Strata "
            "broker's cost per request is higher, so a follower asks for more at once: ADR 0020).",
            validator=at_least(0)),
    ConfigDef("group.initial.rebalance.delay.ms", "int", "3000",
            "Delay before the first rebalance of a new group."),
    ConfigDef("group.consumer.session.timeout.ms", "int", "45000",
            "Session of a consumer-protocol (KIP-848) group member: fenced when silent this long.",
            validator=at_least(1)),
    ConfigDef("group.consumer.heartbeat.interval.ms", "int", "5000",
            "Heartbeat interval the coordinator gives consumer-protocol members.",
            validator=at_least(1)),
    ConfigDef("group.coordinator.append.linger.ms", "int", "5", "A ConsumerGroupHeartbeat that changed the group "
              "is answered this long after its write at the least, as Kafka's batched writes are.", validator=at_least(0)),
    ConfigDef("group.consumer.max.size", "int", "2147483647",
            "Most members of one consumer-protocol group (GROUP_MAX_SIZE_REACHED beyond).",
            validator=at_least(1)),
    ConfigDef("group.consumer.assignors", "list", "uniform,range",
            "Server-side assignors of consumer-protocol groups; the first is the default.",
            valid_values=("uniform", "range")),
    ConfigDef("group.consumer.migration.policy", "string", "bidirectional",
            "Online migration of groups with members between the classic and consumer protocols "
            "(Kafka 4's; empty groups convert whatever the policy; "
            "docs/adr/0015-consumer-group-protocol.md).",
            valid_values=("disabled", "upgrade", "downgrade", "bidirectional")),
    ConfigDef("offsets.topic.num.partitions", "int", "50", "Partitions of __consumer_offsets.",
            validator=at_least(1)),
    ConfigDef("offsets.topic.segment.bytes", "int", "10485760",
            "Segment size of __consumer_offsets (Kafka: 104857600; Strata's default is smaller "
            "because the active segment is never compacted and is replayed at start).",
            validator=at_least(_MIN_SEGMENT_BYTES)),
    ConfigDef("offsets.retention.minutes", "int", "10080", "Retention of committed offsets.",
            validator=at_least(1)),
    ConfigDef("transaction.state.log.num.partitions", "int", "50",
            "Partitions of __transaction_state.", validator=at_least(1)),
    ConfigDef("transaction.state.log.segment.bytes", "int", "104857600",
            "Segment size of __transaction_state.", validator=at_least(1024)),
    ConfigDef("transaction.max.timeout.ms", "int", "900000",
            "Longest transaction timeout a producer may ask for.", validator=at_least(1)),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", "10000",
            "How often transactions open past their timeout are looked for and aborted.",
            validator=at_least(1)),
    ConfigDef("transactional.id.expiration.ms", "int", "604800000",
            "Idle time after which a transactional id is forgotten.", validator=at_least(1)),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", "int", "3600000",
            "How often idle transactional ids are looked for and expired.", validator=at_least(1)),
    ConfigDef("transaction.markers.delay.ms", "int", "0",
            "FOR TESTS ONLY: wait this long after PrepareCommit/PrepareAbort before writing the "
            "transaction markers (Strata; lets a test kill the broker in between).",
            validator=at_least(0)),
    ConfigDef("queued.max.requests", "int", "500", "Requests queued before reads stop.",
            validator=at_least(1)),
    ConfigDef("queued.max.request.bytes", "long", "268435456",
            "Bytes of requests being read or handled, across all connections, before no more "
            "requests are read; at least socket.request.max.bytes, or -1 for no limit (Kafka's "
            "default is -1; Strata's is 256 MiB).", validator=at_least(-1)),
    ConfigDef("request.receive.min.rate.bytes", "long", "16384", "A request arriving slower than this, in "
            "bytes/s, after request.receive.grace.ms is closed; 0: no minimum (Strata).", validator=at_least(0)),
    ConfigDef("request.receive.grace.ms", "long", "5000", "How long before request.receive.min.rate.bytes "
            "applies to a request (Strata).", validator=at_least(1)),
    ConfigDef("socket.send.buffer.bytes", "int", "102400",
            "SO_SNDBUF of client connections (as Kafka); -1: the OS default, which grows with the "
            "traffic. A few hundred KiB in flight per connection cost the kernel less per byte sent "
            "than megabytes: docs/benchmarks.md.", validator=at_least(-1)),
    ConfigDef("socket.receive.buffer.bytes", "int", "-1",
            "SO_RCVBUF of client connections; -1: the OS default (Kafka's default is 102400, which "
            "made Strata's produce slower and dearer: docs/benchmarks.md).", validator=at_least(-1)),
    ConfigDef("socket.receive.backlog.buffer.bytes", "int", "102400",
            "With socket.receive.buffer.bytes -1: the SO_RCVBUF a connection gets once its small requests "
            "back up in the kernel (a client sending a request per record faster than the broker answers), "
            "so that the client gathers records into fewer requests; 0: never (Strata).",
            validator=at_least(0)),
    ConfigDef("connections.max.idle.ms", "long", "600000",
            "Close connections with no traffic and no request in progress for this long; "
            "-1: never.", validator=at_least(-1)),
    ConfigDef("num.io.threads", "int", "8", "Threads processing requests.", validator=at_least(1)),
    ConfigDef("remote.log.reader.threads", "int", "10", "Threads of the tiered fetch pool.",
            validator=at_least(1)),
    ConfigDef("remote.log.reader.cpus", "string", "",
            "CPUs the tiered-fetch and history-send threads run on, e.g. 2-3; empty: any (Strata).",
            validator=_cpu_list),
    ConfigDef("remote.fetch.max.wait.ms", "int", "500",
            "Longest wait of a fetch that reads the remote tier.", validator=at_least(1)),
    ConfigDef("log.remote.storage.enable", "boolean", "false",
            "Default of remote.storage.enable for new topics (Strata; `strata up` sets it true)."),
    ConfigDef("remote.log.manager.task.interval.ms", "long", "30000",
            "How often sealed segments are looked for, uploaded and remote retention applied.",
            validator=at_least(1)),
    ConfigDef("remote.log.manager.copier.thread.pool.size", "int", "4",
            "Threads uploading segments to the object store.", validator=at_least(1)),
    ConfigDef("remote.fetch.chunk.bytes", "int", "1048576",
            "Size of the ranged GETs of tiered reads (Strata).", validator=at_least(4096)),
    ConfigDef("remote.fetch.chunk.cache.bytes", "long", "268435456",
            "Memory of the tiered-read chunk cache (Strata).", validator=at_least(0)),
    ConfigDef("remote.fetch.read.ahead.chunks", "int", "2",
            "Chunks fetched ahead of a sequential tiered reader (Strata).", validator=at_least(0)),
    ConfigDef("remote.fetch.timestamp.scan.max.bytes", "int", "33554432",
            "Most bytes of a remote segment one ListOffsets by timestamp reads past its indexes; "
            "KAFKA_STORAGE_ERROR beyond (Strata).", validator=at_least(4096)),
    ConfigDef("producer.id.expiration.ms", "int", "86400000",
            "How long a producer id with no open transaction is remembered after its last write.",
            validator=at_least(1)),
    ConfigDef("producer.id.expiration.check.interval.ms", "int", "600000",
            "How often expired producer ids are removed.", validator=at_least(1)),
    ConfigDef("remote.log.orphan.cleanup.min.age.ms", "long", "3600000",
            "Objects no manifest references are deleted once this old (Strata).",
            validator=at_least(0)),
    # The cluster: membership and the controller lease (docs/adr/0009-controller-lease.md).
    ConfigDef("broker.rack", "string", None,
            "Rack of this broker; replicas of a partition are spread across racks."),
    ConfigDef("broker.session.timeout.ms", "int", "9000",
            "A broker that has not heartbeated the controller for this long is fenced; one "
            "whose heartbeats go unanswered for five sixths of it stops leading partitions "
            "first.", validator=at_least(1)),
    ConfigDef("broker.heartbeat.interval.ms", "int", "500",
            "How often a broker heartbeats the active controller (Kafka: 2000; shorter here so "
            "that a controller cut off from the brokers notices within "
            "controller.quorum.timeout.ms).", validator=at_least(1)),
    ConfigDef("broker.session.connection.loss.ms", "int", "500",
            "The broker of a controller whose lease ran out unrenewed is fenced this long after "
            "a successor takes over, unless it heartbeats to the successor; -1 gives it a whole "
            "broker.session.timeout.ms (Strata). (A broker whose listener refuses connections "
            "is fenced at once.)", validator=at_least(-1)),
    ConfigDef("controller.quorum.timeout.ms", "int", "1500",
            "The active controller stands down when it has heard nothing from a majority of "
            "the live brokers (three or more) for this long, neither a heartbeat nor a follower "
            "fetch: it is the one cut off; -1 never (Strata).", validator=at_least(-1)),
    ConfigDef("controller.lease.ms", "long", "5000",
            "How long the controller lease lasts without renewal (Strata).",
            validator=at_least(1)),
    ConfigDef("controller.lease.renew.ms", "long", "1000",
            "How often the controller renews its lease; below controller.lease.ms minus "
            "controller.lease.safety.margin.ms (Strata).", validator=at_least(1)),
    ConfigDef("controller.lease.safety.margin.ms", "long", "1500",
            "The controller stops acting this long before its lease would run out (Strata).",
            validator=at_least(0)),
    ConfigDef("object.store.control.timeout.ms", "long", "2000",
            "Read timeout of the object store's small control requests (leases, metadata and commit "
            "slots, heads, lists, whole-object GETs), at most half of controller.lease.ms minus "
            "controller.lease.safety.margin.ms; a stalled one is retried on a new connection (Strata).",
            validator=at_least(100)),
    ConfigDef("object.store.start.wait.ms", "long", "300000",
            "How long a starting broker waits for an object store that does not answer or answers "
            "5xx or 429 (a store restarting with the cluster), in its check of the bucket and again "
            "in its first read of the cluster metadata, saying what fails every 10 s, before it exits; "
            "a missing bucket, refused credentials or an untrusted certificate end the start at once. "
            "0: no wait (Strata).", validator=at_least(0)),
    ConfigDef("controller.lease.clock.skew.ms", "long", "500",
            "Extra time a candidate waits, beyond controller.lease.ms, before taking over an "
            "unrenewed lease (Strata).", validator=at_least(0)),
    ConfigDef("controller.lease.poll.ms", "long", "500",
            "How often a broker that is not the controller reads the lease (Strata).",
            validator=at_least(1)),
    ConfigDef("controller.bucket.outage.hold.ms", "long", "300000",
            "How long at most the controller holds the cluster as it is (every broker leads "
            "what it led, no metadata is written) when its lease runs out because the bucket "
            "does not answer and every other unfenced broker reports the same; 0: never, every "
            "broker stops leading within a session of the outage (Strata, ADR 0031).",
            validator=at_least(0)),
    ConfigDef("event.loop.lag.probe.interval.ms", "int", "100",
            "How often the event loop's lag is probed (strata_event_loop_lag_seconds); a stall "
            "shorter than this may fall between two probes (Strata).",
            validator=at_least(1)),
    ConfigDef("event.loop.stall.log.ms", "int", "200", "A longer stall of the event loop is logged with "
              "what its thread ran, as is a garbage collection this long (0: off; Strata).", validator=at_least(0)),
    # Brokers talking to each other (docs/adr/0016-inter-broker-protocol.md).
    ConfigDef("offsets.topic.replication.factor", "int", "3",
            "Replication factor of __consumer_offsets when it is created; when not set, 3, or "
            "the number of registered brokers when there are fewer.", validator=at_least(1)),
    ConfigDef("transaction.state.log.replication.factor", "int", "3",
            "Replication factor of __transaction_state when it is created; when not set, 3, or "
            "the number of registered brokers when there are fewer.", validator=at_least(1)),
    ConfigDef("controller.socket.timeout.ms", "int", "30000",
            "How long a broker waits for the controller to answer (registration, heartbeats, "
            "forwarded admin requests, AlterPartition), looking for a new one meanwhile.",
            validator=at_least(1)),
    ConfigDef("controlled.shutdown.enable", "boolean", "true",
            "On SIGTERM, ask the controller to move this broker's leaderships away first."),
    ConfigDef("controlled.shutdown.timeout.ms", "int", "5000",
            "How long a clean shutdown waits for the controller to release the broker (Strata).",
            validator=at_least(0)),
    ConfigDef("shutdown.timeout.ms", "int", "30000",
            "How much longer than controlled.shutdown.timeout.ms a shutdown may take: then the "
            "broker prints every thread's stack and exits 1, as after a crash (Strata).",
            validator=at_least(1)),
    ConfigDef("replica.fetch.wait.max.ms", "int", "500",
            "Longest time a follower's fetch waits at the leader for data.", validator=at_least(0)),
    ConfigDef("replica.fetch.min.bytes", "int", "1",
            "Bytes a follower's fetch waits for at the leader.", validator=at_least(1)),
    ConfigDef("replica.fetch.response.max.bytes", "int", "10485760",
            "Largest answer to a follower's fetch.", validator=at_least(0)),
    ConfigDef("replica.fetch.backoff.ms", "int", "1000",
            "Pause of a follower after a failed fetch.", validator=at_least(0)),
    ConfigDef("replica.socket.timeout.ms", "int", "30000",
            "Timeout of a follower's requests to its leader.", validator=at_least(1)),
    # Replication (docs/adr/0020-replication.md).
    ConfigDef("offsets.commit.timeout.ms", "int", "5000",
            "How long a coordinator's write (offsets, group and transaction state, markers) waits "
            "for the in-sync replicas before the request fails.", validator=at_least(1)),
    ConfigDef("replica.lag.time.max.ms", "long", "30000",
            "A follower that has not caught up with the leader's log end for this long leaves "
            "the ISR.", validator=at_least(1)),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", "long", "5000",
            "How often the high watermarks are written to disk.", validator=at_least(1)),
    ConfigDef("auto.leader.rebalance.enable", "boolean", "true",
            "The controller moves leadership back to each partition's preferred replica when "
            "the leaders are out of balance."),
    ConfigDef("leader.imbalance.check.interval.seconds", "long", "300",
            "How often the controller checks the leaders' balance.", validator=at_least(1)),
    ConfigDef("leader.imbalance.per.broker.percentage", "int", "10",
            "Share of a broker's preferred partitions led elsewhere that triggers a rebalance.",
            validator=between(0, 100)),
    ConfigDef("replica.selector.class", "string", None,
            "Lets consumers fetch from a replica in their rack (client.rack) when set to "
            "org.apache.kafka.common.replica.RackAwareReplicaSelector (KIP-392)."),
    *SECURITY_CONFIGS,  # listeners, TLS, SASL, ACLs, quotas: common/config/security_keys.py
    *METADATA_CONFIGS,  # the metadata log: common/config/metadata_keys.py
    *DISKLESS_CONFIGS,  # diskless topics: common/config/diskless_keys.py
)
# fmt: on


def validate_topic_config(name: str, value: str | None) -> str:
    """The normalised value of one topic config; raises ``InvalidConfigError``."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    if value is None:
        raise InvalidConfigError(f"Null value not supported for topic configs: {name}")
    try:
        return definition.normalize(value)
    except InvalidConfigValue as err:
        raise InvalidConfigError(str(err)) from None


def check_topic_config_combination(
    effective: Mapping[str, str],
    previous: Mapping[str, str] | None,
    remote_log_storage_enabled: bool,
) -> None:
    """Kafka's cross-key checks on a topic's complete effective config.

    ``previous`` is the effective config before an alter (None on create);
    ``remote_log_storage_enabled`` is the broker's ``remote.log.storage.system.enable``.
    Raises ``InvalidConfigError``.
    """
    if previous is not None and effective["diskless.enable"] != previous["diskless.enable"]:
        raise InvalidConfigError("diskless.enable is set when a topic is created and cannot be changed")
    if effective["diskless.enable"] == "true" and "compact" in effective["cleanup.policy"]:
        raise InvalidConfigError("a diskless topic cannot be compacted (cleanup.policy=delete only)")
    if effective["remote.storage.enable"] != "true":
        if previous is not None and previous["remote.storage.enable"] == "true":
            raise InvalidConfigError(
                "Disabling remote storage feature on the topic level is not supported."
            )
        return
    if not remote_log_storage_enabled:
        raise InvalidConfigError(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be "
            "configured with remote log storage (set remote.log.storage.system.enable=true)."
        )
    # Kafka (KIP-405) refuses compacted tiered topics; Strata compacts the bucket too (ADR 0019).
    for local_key, total_key in (
        ("local.retention.ms", "retention.ms"),
        ("local.retention.bytes", "retention.bytes"),
    ):
        reason = local_retention_problem(int(effective[local_key]), total_key, int(effective[total_key]))
        if reason is not None:
            raise InvalidConfigError(f"Invalid value {effective[local_key]} for configuration {local_key}: {reason}")
