"""Prometheus metrics of the broker, gathered at scrape time.

The hot paths only bump plain counters and bucket counts on the broker (a dict
increment, a ``bisect``); everything else — partition offsets and sizes, tiering
state, group lag — is read when ``GET /metrics`` asks, by :class:`BrokerCollector`,
and rendered with ``prometheus_client``. Names follow Prometheus conventions:
``strata_`` prefix, base units (seconds, bytes), ``_total`` on counters, and
counters rather than since-start ratios (a ratio is ``rate(a) / rate(b)`` in
PromQL over whatever window the dashboard wants).

Beside the ``strata_*`` series: kafka_exporter's names (:mod:`service.http.exporter`),
the process (``process_*``: memory, CPU, open files) and Python (``python_*``)
collectors of ``prometheus_client``, and ``strata_build_info``.

Error codes that are steps of a normal exchange are counted apart, in
``strata_kafka_request_expected_errors_total``, so ``strata_kafka_request_errors_total``
moves only when something went wrong (:data:`EXPECTED_ERRORS` says which and why).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from common.errors import KafkaError
from common.latency import LatencyHistograms
from service.http.exporter import PAUSE, SLICE, kafka_exporter_families
from service.http.state import group_lag, partition_state
from service.http.views import AdminView
from service.loop_lag import LoopLagProbe
from service.quotas.connections import ConnectionQuotas
from service.security.tls_reload import TlsSources
from service.version import python_version, strata_version

__all__ = ["EXPECTED_ERRORS", "BrokerCollector", "exposition", "gather"]

#: ``(api, error)`` pairs that are part of a normal exchange, not failures:
#:
#: * JoinGroup ``MEMBER_ID_REQUIRED``: KIP-394; every member's first JoinGroup (v4+)
#:   is answered so, with the member id to join again with at once.
#: * Heartbeat and SyncGroup ``REBALANCE_IN_PROGRESS``: how the coordinator tells the
#:   members of a classic group that a rebalance began; clients rejoin (the Java
#:   client logs it at INFO). On OffsetCommit the same code fails a commit the
#:   application sees, so there it stays an error.
#: * AddPartitionsToTxn and InitProducerId ``CONCURRENT_TRANSACTIONS``: the previous
#:   transaction's markers (or the abort that fences an older epoch) are still being
#:   written; transactional clients back off (20 ms) and retry.
#:
#: Kafka draws a similar line in its failure meters: ``FailedFetchRequestsPerSec``
#: leaves out the answers it considers part of the protocol (unknown partition, not
#: the leader, fenced or unknown leader epoch, storage errors, ...). Those stay in
#: ``strata_kafka_request_errors_total`` here, by code, because an operator must
#: see them (a full disk answers KAFKA_STORAGE_ERROR).
EXPECTED_ERRORS = frozenset({
    ("JoinGroup", "MEMBER_ID_REQUIRED"),
    ("Heartbeat", "REBALANCE_IN_PROGRESS"),
    ("SyncGroup", "REBALANCE_IN_PROGRESS"),
    ("AddPartitionsToTxn", "CONCURRENT_TRANSACTIONS"),
    ("InitProducerId", "CONCURRENT_TRANSACTIONS"),
})


def _histogram(
    name: str, doc: str, label: str, histograms: LatencyHistograms
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=[label])
    for value, cumulative, total in histograms.series():
        family.add_metric([value], [(_bound(bound), count) for bound, count in cumulative], total)
    return family


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class BrokerCollector(Collector):
    """Everything ``/metrics`` shows, read from the broker when scraped."""

    def __init__(self, broker: AdminView, connections: Any, tls: TlsSources | None = None,
                 limits: ConnectionQuotas | None = None) -> None:
        self._broker = broker
        self._connections = connections  # () -> int
        self._tls = tls
        self._limits = limits

    def collect(self) -> Iterator[Any]:
        return (family for family in self.steps() if family is not PAUSE)

    def steps(self) -> Iterator[Any]:
        """The families, with :data:`PAUSE` between slices of per-partition work."""
        b = self._broker
        info = GaugeMetricFamily("strata_build_info", "Strata's version and the Python running it (always 1).",
                                 labels=["version", "python_version"])
        info.add_metric([strata_version(), python_version()], 1)
        yield info
        requests = CounterMetricFamily("strata_kafka_requests", "Kafka requests handled, by API.",
                                       labels=["api"])
        for api, n in sorted(b.requests.items()):
            requests.add_metric([api], n)
        yield requests
        errors = CounterMetricFamily("strata_kafka_request_errors",
                                     "Partitions or requests answered with a Kafka error code, by API and code "
                                     "(expected protocol steps are counted apart).",
                                     labels=["api", "error"])
        expected = CounterMetricFamily("strata_kafka_request_expected_errors",
                                       "Error codes that are steps of a normal exchange "
                                       "(JoinGroup MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS on heartbeats).",
                                       labels=["api", "error"])
        for (api, code), n in sorted(b.errors.items()):
            (expected if (api, code) in EXPECTED_ERRORS else errors).add_metric([api, code], n)
        yield errors
        yield expected
        yield _histogram("strata_kafka_request_duration_seconds",
                         "Time from a request's decoding to its response being ready.", "api",
                         b.request_latency)
        yield _gauge("strata_connections", "Open Kafka client connections.", [], [((), self._connections())])
        yield from _loop_lag(b.loop_lag)
        yield from self._fetch_sessions()

        for name, doc, counter in (
            ("strata_topic_bytes_in", "Record batch bytes appended, by topic.", b.bytes_in),
            ("strata_topic_records_in", "Records appended, by topic.", b.records_in),
            ("strata_topic_bytes_out", "Record batch bytes sent to consumers, by topic.", b.bytes_out),
            ("strata_topic_records_out", "Records sent to consumers (whole batches), by topic.", b.records_out),
        ):
            family = CounterMetricFamily(name, doc, labels=["topic"])
            for topic, n in sorted(counter.items()):
                family.add_metric([topic], n)
            yield family

        yield from self._partitions()
        yield from self._replication()
        yield from self._tiering()
        yield from self._diskless()
        yield from self._groups()
        yield from self._tls_families()
        yield from self._connection_limits()
        yield from kafka_exporter_families(b)

    def _partitions(self) -> Iterator[Any]:
        """Read and added to the families :data:`SLICE` partitions at a time: at 1,000
        partitions the eight families made in one go held the loop 30 ms per scrape."""
        families = [(field, GaugeMetricFamily(name, doc, labels=["topic", "partition"])) for field, name, doc in (
            ("log_end_offset", "strata_partition_log_end_offset", "Next offset to be written."),
            ("high_watermark", "strata_partition_high_watermark", "Offset up to which consumers read."),
            ("log_start_offset", "strata_partition_log_start_offset",
             "First offset of the log, local or remote."),
            ("local_log_start_offset", "strata_partition_local_log_start_offset",
             "First offset still on local disk."),
            ("local_bytes", "strata_partition_local_bytes", "Bytes of the partition's local segments."),
            ("remote_bytes", "strata_partition_remote_bytes", "Bytes of the partition's segments in the bucket."),
            ("upload_lag_offsets", "strata_partition_upload_lag_offsets",
             "Offsets below the high watermark not in the bucket yet."),
            ("upload_lag_bytes", "strata_partition_upload_lag_bytes",
             "Bytes of local segments not in the bucket yet."),
        )]
        for n, (topic, partition) in enumerate(sorted(self._broker.logs.all_logs())):
            if n % SLICE == SLICE - 1:
                yield PAUSE
            try:
                row = partition_state(self._broker, topic, partition)
            except KafkaError:  # a partition deleted mid-scrape, or created and not open yet
                continue
            labels = [topic, str(partition)]
            for field, family in families:
                family.add_metric(labels, row[field] or 0)
        for _, family in families:
            yield family

    def _fetch_sessions(self) -> Iterator[Any]:
        sessions = self._broker.fetch_sessions
        yield _gauge("strata_fetch_sessions", "Incremental fetch sessions cached (KIP-227).", [],
                     [((), len(sessions))])
        yield _gauge("strata_fetch_session_partitions", "Partitions held by cached fetch sessions.",
                     [], [((), sessions.cached_partitions)])
        for name, doc, value in (
            ("strata_fetch_session_evictions", "Fetch sessions evicted to make room for others.",
             sessions.evictions),
            ("strata_incremental_fetches", "Fetch requests served from a fetch session.",
             sessions.incremental_fetches),
        ):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], value)
            yield family

    def _replication(self) -> Iterator[Any]:
        b = self._broker
        led = b.replicas.led()
        under = sum(1 for p in led if len(p.isr) < len(p.replicas))
        under_min = sum(1 for p in led if len(p.isr) < p.log.config.min_insync_replicas)
        yield _gauge("strata_under_replicated_partitions",
                     "Partitions this broker leads with fewer in-sync replicas than replicas.", [],
                     [((), under)])
        yield _gauge("strata_under_min_isr_partitions",
                     "Partitions this broker leads with fewer in-sync replicas than "
                     "min.insync.replicas (acks=all produce fails).", [], [((), under_min)])
        offline = 0
        if b.is_active_controller():  # as Kafka's OfflinePartitionsCount: the controller's alone
            offline = sum(1 for _, _, p in b.controller.metadata.iter_partitions() if not p.has_leader)
        yield _gauge("strata_offline_partitions",
                     "Partitions with no leader (reported by the active controller; 0 elsewhere).",
                     [], [((), offline)])
        yield _gauge("strata_leader_partitions", "Partitions this broker leads.", [], [((), len(led))])
        yield _gauge("strata_offline_log_dirs",
                     "Log directories of this broker taken offline by a failed fsync or write "
                     "(Kafka's OfflineLogDirectoryCount); restart the broker once the disk is fixed.",
                     [], [((), 1 if b.logs.offline else 0)])
        followers = b.replicas.followers
        fetched = sum(f.fetched_bytes for f in getattr(followers, "fetchers", {}).values())
        fetches = sum(f.fetch_requests for f in getattr(followers, "fetchers", {}).values())
        for name, doc, value in (
            ("strata_isr_shrinks", "ISR shrinks this broker asked for as a leader.", b.replicas.isr_shrinks),
            ("strata_isr_expands", "ISR expansions this broker asked for as a leader.",
             b.replicas.isr_expands),
            ("strata_replica_fetched_bytes", "Record bytes this broker copied from leaders as a follower.",
             fetched),
            ("strata_replica_fetch_requests", "Fetch requests this broker sent to leaders as a follower.",
             fetches),
        ):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], value)
            yield family

    def _diskless(self) -> Iterator[Any]:
        node = self._broker.diskless
        committer = node.sequencer.committer if node.sequencer is not None else None
        for name, doc, value in (
            ("strata_diskless_wal_objects", "Write-ahead objects of diskless topics this broker wrote (PUTs).",
             node.writer.objects_written),
            ("strata_diskless_wal_bytes", "Bytes of those objects.", node.writer.bytes_written),
            ("strata_diskless_commit_slots", "Commit slots this broker wrote as a sequencer (PUTs).",
             committer.slots_written if committer is not None else 0),
            ("strata_diskless_merged_segments", "Tiered segments merged from diskless partitions' tails.",
             node.merged_segments),
            ("strata_diskless_takeovers", "Diskless partitions this broker took over as sequencer.",
             node.takeovers),
            ("strata_diskless_wal_cache_misses", "Reads of diskless records that had to GET their object.",
             node.cache.misses),
        ):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], value)
            yield family
        rpc = CounterMetricFamily("strata_diskless_rpc_bytes", "Bytes of DisklessCommit and DisklessIndex "
                                  "between brokers (entries; never record bytes), by direction.", labels=["direction"])
        rpc.add_metric(["out"], node.rpc_bytes_out)
        rpc.add_metric(["in"], node.rpc_bytes_in)
        yield rpc
        for name, doc, value in (
            ("strata_diskless_wal_inflight", "Write-ahead objects between their close and their producers' "
             "answers (at most diskless.max.inflight.objects).", node.writer.inflight),
            ("strata_diskless_writes_waiting", "Produced batches waiting for room: the bucket is slower "
             "than the producers.", node.writer.waiting),
        ):
            gauge = GaugeMetricFamily(name, doc)
            gauge.add_metric([], value)
            yield gauge

    def _tiering(self) -> Iterator[Any]:
        t = self._broker.tiering
        store = t.rsm.store
        requests = CounterMetricFamily("strata_object_store_requests",
                                       "Requests to the object store for segments and manifests, by "
                                       "operation (retries not counted).", labels=["op"])
        moved = CounterMetricFamily("strata_object_store_bytes",
                                    "Bytes read (get) and written (put) in those requests.", labels=["op"])
        for op in ("get", "put", "head", "list", "delete"):
            requests.add_metric([op], store.requests[op])
            if op in ("get", "put"):
                moved.add_metric([op], store.bytes[op])
        yield requests
        yield moved
        for name, doc, value in (
            ("strata_tiering_uploaded_segments", "Segments uploaded and published.", t.uploaded_segments),
            ("strata_tiering_uploaded_bytes", "Segment bytes uploaded and published.", t.uploaded_bytes),
            ("strata_tiering_upload_failures", "Segment uploads that failed (and will be retried).",
             t.upload_failures),
        ):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], value)
            yield family
        reads = self._broker.tiered_reads
        cache = reads.reader.cache
        yield _gauge("strata_tiered_fetch_queue_depth", "Distinct remote reads queued or running.", [],
                     [((), reads.reader.queue_depth)])
        hits = CounterMetricFamily("strata_tiered_fetch_chunk_cache_hits", "Chunk cache hits.")
        hits.add_metric([], cache.hits)
        yield hits
        misses = CounterMetricFamily("strata_tiered_fetch_chunk_cache_misses", "Chunk cache misses (GETs).")
        misses.add_metric([], cache.misses)
        yield misses
        yield _gauge("strata_tiered_fetch_chunk_cache_bytes", "Bytes held by the chunk cache.", [],
                     [((), cache.size_bytes)])
        yield _histogram("strata_remote_read_duration_seconds",
                         "Time a tiered read takes from its request to its data, queueing included.",
                         "kind", reads.read_latency)

    def _groups(self) -> Iterator[Any]:
        b = self._broker
        committed = GaugeMetricFamily("strata_consumer_group_committed_offset",
                                      "Committed offset, by group and partition.",
                                      labels=["group", "topic", "partition"])
        lag = GaugeMetricFamily("strata_consumer_group_lag",
                                "High watermark minus the committed offset, by group and partition.",
                                labels=["group", "topic", "partition"])
        if b.groups is not None:
            for group, offsets in sorted(b.groups.committed_offsets().items()):
                for row in group_lag(b, offsets):
                    labels = [group, row["topic"], str(row["partition"])]
                    committed.add_metric(labels, row["committed_offset"])
                    if row["high_watermark"] is not None:
                        lag.add_metric(labels, row["lag"])
        yield committed
        yield lag


    def _tls_families(self) -> Iterator[Any]:
        sources = [] if self._tls is None else self._tls.sources
        if not sources:
            return
        by = ["context"]
        yield _gauge("strata_tls_certificate_expiry_timestamp_seconds",
                     "When the certificate a TLS context serves expires (Unix seconds).", by,
                     [((s.label,), s.facts.not_after) for s in sources if s.facts.not_after is not None])
        yield _gauge("strata_tls_truststore_expiry_timestamp_seconds",
                     "When the first certificate a TLS context trusts expires (Unix seconds).", by,
                     [((s.label,), s.facts.truststore_not_after) for s in sources
                      if s.facts.truststore_not_after is not None])
        for name, doc, attr in (
            ("strata_tls_reloads", "Changed certificate files a TLS context loaded and uses.", "reloads"),
            ("strata_tls_reload_failures", "Changed certificate files a TLS context refused (see the log).",
             "failures"),
        ):
            family = CounterMetricFamily(name, doc, labels=by)
            for s in sources:
                family.add_metric([s.label], getattr(s, attr))
            yield family

    def _connection_limits(self) -> Iterator[Any]:
        limits = self._limits
        if limits is None:
            return
        yield _gauge("strata_listener_connections", "Open Kafka connections, by listener.", ["listener"],
                     [((name,), n) for name, n in sorted(limits.by_listener.items())])
        yield _gauge("strata_connections_max",
                     "The most connections the broker serves: max.connections, or the open-files limit "
                     "less connections.reserved.fds if lower (the broker's own files count against it).", [],
                     [((), min(limits.max_connections, limits.fd_limit - limits.fd_reserve))])
        refused = CounterMetricFamily("strata_connections_refused",
                                      "Connections closed unserved, by listener and reason "
                                      "(max_connections_per_ip, ip_connection_rate, open_files).",
                                      labels=["listener", "reason"])
        for (listener, reason), n in sorted(limits.refused.items()):
            refused.add_metric([listener, reason], n)
        yield refused
        throttled = CounterMetricFamily("strata_connection_accept_throttle_seconds",
                                        "Time listeners waited before accepting, over max.connection.creation.rate.",
                                        labels=["listener"])
        for listener, seconds in sorted(limits.accept_throttle_s.items()):
            throttled.add_metric([listener], seconds)
        yield throttled
        backlogs = CounterMetricFamily("strata_connection_receive_backlogs",
                                       "Connections whose small requests backed up in the kernel and were given "
                                       "socket.receive.backlog.buffer.bytes as their receive buffer, by listener.",
                                       labels=["listener"])
        for listener, n in sorted(limits.receive_backlogs.items()):
            backlogs.add_metric([listener], n)
        yield backlogs


def _loop_lag(probe: LoopLagProbe) -> Iterator[Any]:
    """The event loop's lag (:mod:`service.loop_lag` says why both)."""
    lag = HistogramMetricFamily("strata_event_loop_lag_seconds",
                                "How much later than due a periodic callback ran on the event loop "
                                "(a blocked loop delays every request by as much).")
    lag.add_metric([], [(_bound(bound), count) for bound, count in probe.cumulative()], probe.total_s)
    yield lag
    yield _gauge("strata_event_loop_lag_max_seconds",
                 "The largest event loop lag of the last one to two minutes.", [],
                 [((), probe.recent_max_s)])
    if probe.watch is not None:
        stalls = CounterMetricFamily("strata_event_loop_stalls", "Event loop stalls longer than "
                                     "event.loop.stall.log.ms, each logged with what the loop ran.")
        stalls.add_metric([], probe.watch.stalls)
        yield stalls
        pauses = CounterMetricFamily("strata_gc_pauses", "Garbage collections longer than "
                                     "event.loop.stall.log.ms (they hold every thread), each logged.")
        pauses.add_metric([], probe.watch.gc_pauses)
        yield pauses


def _gauge(name: str, doc: str, labels: list[str], values: list[tuple[tuple[str, ...], float]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for label_values, value in values:
        family.add_metric(list(label_values), value)
    return family


async def gather(broker: AdminView, connections: Any, tls: TlsSources | None = None,
                 limits: ConnectionQuotas | None = None) -> list[Any]:
    """Every broker family, read now, on the event loop (the broker's state is not thread-safe),
    giving the loop a turn between slices of partitions: at 1,000 partitions reading them all
    at once stalled it 60-270 ms per scrape. A partition deleted meanwhile is left out."""
    families = []
    for family in BrokerCollector(broker, connections, tls, limits).steps():
        if family is PAUSE:
            await asyncio.sleep(0)
        else:
            families.append(family)
    return families


class _Collected(Collector):
    """Families already gathered (a snapshot): safe to format on another thread."""

    def __init__(self, families: list[Any]) -> None:
        self._families = families

    def collect(self) -> Iterator[Any]:
        return iter(self._families)


def exposition(families: list[Any]) -> bytes:
    """The Prometheus text of gathered families, with the process's own (any thread: at
    1,000 partitions the text is about 1 MB, and formatting it is most of a scrape)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collected(families))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return generate_latest(registry)

