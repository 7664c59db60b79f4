"""Series under kafka_exporter's names, so dashboards built for it work on Strata unchanged.

Names, help texts' meaning and labels follow danielqsj/kafka_exporter
(``kafka_brokers``, ``kafka_broker_info{id,address}``, ``kafka_topic_partitions{topic}``,
``kafka_topic_partition_*{topic,partition}``, ``kafka_consumergroup_*{consumergroup,...}``).
Values are what ``strata groups describe`` and ``strata topics describe`` show:
``current_offset`` of a partition is its high watermark (what a consumer can read
up to, kafka_exporter's "newest" offset), ``oldest_offset`` its log start across
both tiers, a group's ``current_offset`` its committed offset and its ``lag`` the
high watermark minus that (never below 0, as the CLI shows it).

The two per-topic sums keep kafka_exporter's names (``kafka_consumergroup_lag_sum``,
``kafka_consumergroup_current_offset_sum``) but are typed ``untyped``, not
``gauge``: Prometheus reserves the ``_sum`` suffix for histograms and summaries,
and ``promtool check metrics`` flags it on any other typed metric. The type is
only metadata; queries and dashboards read the series the same way.

Each series comes from exactly one broker of a cluster, so summing over scrape
targets never counts twice: cluster-wide series (``kafka_brokers``,
``kafka_broker_info``, ``kafka_topic_partitions``) from the active controller,
partition series from the partition's leader, group series from the group's
coordinator (the broker holding it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, UntypedMetricFamily

from common.errors import KafkaError
from service.http.state import group_lag, member_count
from service.http.views import AdminView

__all__ = ["PAUSE", "SLICE", "kafka_exporter_families"]

#: yielded among the families after every :data:`SLICE` partitions: where the scrape's
#: asynchronous gather (:func:`service.http.metrics.gather`) lets the event loop run
PAUSE = object()
SLICE = 100


def _family(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def kafka_exporter_families(broker: AdminView) -> Iterator[Any]:
    """The families, with :data:`PAUSE` among them (:func:`service.http.metrics.gather` awaits there)."""
    c = broker.controller
    md = c.metadata
    if c.controller_id == c.node_id:
        live = [b for b in md.brokers.values() if not b.fenced]
        brokers = _family("kafka_brokers", "Number of Brokers in the Kafka Cluster.", [])
        brokers.add_metric([], len(live))
        yield brokers
        info = _family("kafka_broker_info", "Information about the Kafka Broker.", ["id", "address"])
        for b in sorted(live, key=lambda b: b.node_id):
            endpoint = b.endpoint()
            address = f"{endpoint.host}:{endpoint.port}" if endpoint is not None else ""
            info.add_metric([str(b.node_id), address], 1)
        yield info
        partitions = _family("kafka_topic_partitions", "Number of partitions for this Topic", ["topic"])
        for t in c.topics():
            partitions.add_metric([t.name], t.partitions)
        yield partitions
    yield from _partitions(broker)
    yield from _groups(broker)


def _partitions(broker: AdminView) -> Iterator[Any]:
    c = broker.controller
    labels = ["topic", "partition"]
    fams = {
        "current": _family("kafka_topic_partition_current_offset",
                           "Current Offset of a Broker at Topic/Partition", labels),
        "oldest": _family("kafka_topic_partition_oldest_offset",
                          "Oldest Offset of a Broker at Topic/Partition", labels),
        "isr": _family("kafka_topic_partition_in_sync_replica",
                       "Number of In-Sync Replicas for this Topic/Partition", labels),
        "leader": _family("kafka_topic_partition_leader", "Leader Broker ID of this Topic/Partition",
                          labels),
        "preferred": _family("kafka_topic_partition_leader_is_preferred",
                             "1 if Topic/Partition is using the Preferred Broker", labels),
        "replicas": _family("kafka_topic_partition_replicas",
                            "Number of Replicas for this Topic/Partition", labels),
        "under": _family("kafka_topic_partition_under_replicated_partition",
                         "1 if Topic/Partition is under Replicated", labels),
    }
    seen = 0
    for t in c.topics():
        try:
            registrations = c.partitions(t.name)
        except KafkaError:
            continue  # deleted while we read
        for p, reg in enumerate(registrations):
            seen += 1
            if seen % SLICE == 0:
                yield PAUSE
            if reg.leader != c.node_id:
                continue  # its leader exports it
            local = broker.logs.get_log(t.name, p)
            if local is None:
                continue
            values = [t.name, str(p)]
            fams["current"].add_metric(values, local.high_watermark)
            fams["oldest"].add_metric(values, broker.tiering.log_start_offset(t.name, p, local, exact=False))
            fams["isr"].add_metric(values, len(reg.isr))
            fams["leader"].add_metric(values, reg.leader)
            fams["preferred"].add_metric(values, int(reg.leader == reg.preferred_leader))
            fams["replicas"].add_metric(values, len(reg.replicas))
            fams["under"].add_metric(values, int(len(reg.isr) < len(reg.replicas)))
    yield from fams.values()


def _groups(broker: AdminView) -> Iterator[GaugeMetricFamily | UntypedMetricFamily]:
    part = ["consumergroup", "topic", "partition"]
    per_topic = ["consumergroup", "topic"]
    current = _family("kafka_consumergroup_current_offset",
                      "Current Offset of a ConsumerGroup at Topic/Partition", part)
    current_sum = UntypedMetricFamily("kafka_consumergroup_current_offset_sum",
                                      "Current Offset of a ConsumerGroup at Topic for all partitions",
                                      labels=per_topic)
    lag = _family("kafka_consumergroup_lag", "Current Approximate Lag of a ConsumerGroup at Topic/Partition",
                  part)
    lag_sum = UntypedMetricFamily("kafka_consumergroup_lag_sum",
                                  "Current Approximate Lag of a ConsumerGroup at Topic for all partitions",
                                  labels=per_topic)
    members = _family("kafka_consumergroup_members", "Amount of members in a consumer group",
                      ["consumergroup"])
    groups: Any = broker.groups
    if groups is not None:
        committed = groups.committed_offsets()
        for group_id, _, _, kind in sorted(groups.list_groups_by_type()):
            members.add_metric([group_id], member_count(groups, group_id, kind))
        for group_id, offsets in sorted(committed.items()):
            sums: dict[str, list[int]] = {}
            for row in group_lag(broker, offsets):
                if row["high_watermark"] is None:
                    continue  # not hosted here: its leader's broker knows its end
                labels = [group_id, row["topic"], str(row["partition"])]
                current.add_metric(labels, row["committed_offset"])
                lag.add_metric(labels, row["lag"])
                s = sums.setdefault(row["topic"], [0, 0])
                s[0] += row["committed_offset"]
                s[1] += row["lag"]
            for topic, (offset_sum, lag_total) in sorted(sums.items()):
                current_sum.add_metric([group_id, topic], offset_sum)
                lag_sum.add_metric([group_id, topic], lag_total)
    yield from (current, current_sum, lag, lag_sum, members)
