"""Metadata names the active controller, as DescribeCluster does (issue 32, item 9).

Three broker processes; every one of them is asked Metadata and DescribeCluster, and
both name the lease holder (before, Metadata named the answering broker itself, so
three brokers gave three controllers). librdkafka's ``describe_cluster``, which reads
Metadata, names it too. After a kill -9 of the controller, every survivor names the
new lease holder.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka.admin import AdminClient

from common.protocol.codec import build
from service.cluster.wire import request_module
from service.handlers.metadata import named_controller
from tests.e2e.test_cluster import _controller_named, _raw

TIMEOUT_S = 30.0


def _metadata(version: int) -> Any:
    """A Metadata request for no topic (brokers, cluster id, controller)."""
    mod = request_module(3, version)
    return build(mod.MetadataRequest, topics=(), allow_auto_topic_creation=False,
                 include_cluster_authorized_operations=False, include_topic_authorized_operations=False)


def _named_everywhere(cluster: Any, live: list[int]) -> dict[int, tuple[int, int]]:
    """{broker: (Metadata's controller_id, DescribeCluster's)} asked of each live broker."""
    return {n: (int(_raw(cluster.brokers[n], 3, _metadata).controller_id), _controller_named(cluster.brokers[n]))
            for n in live}


def test_every_broker_names_the_lease_holder_in_metadata_before_and_after_a_failover(
    start_cluster: Any,
) -> None:
    cluster = start_cluster(3)
    holder = cluster.wait_for("a controller", lambda: (h := cluster.controller_id()) != -1 and h)
    cluster.wait_for("every broker naming the lease holder", lambda: set(
        _named_everywhere(cluster, [1, 2, 3]).values()) == {(holder, holder)}, TIMEOUT_S)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # its futures die with it
    described = admin.describe_cluster(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    assert described.controller is not None and described.controller.id == holder

    cluster.kill(holder)
    survivors = [n for n in cluster.brokers if n != holder]
    new = cluster.wait_for("a new controller", lambda: (h := cluster.controller_id()) not in (-1, holder) and h,
                           TIMEOUT_S)
    cluster.wait_for("the survivors naming the new controller", lambda: set(
        _named_everywhere(cluster, survivors).values()) == {(new, new)}, TIMEOUT_S)



def test_a_holder_missing_from_the_live_brokers_is_not_named() -> None:
    """During a failover (the lease free, or its holder fenced a moment ago) a broker names
    itself, which relays admin writes, never a node the answer does not list."""
    live = tuple(SimpleNamespace(node_id=n) for n in (1, 3))
    assert named_controller(3, 1, live) == 3
    assert named_controller(2, 1, live) == 1  # the holder was fenced
    assert named_controller(-1, 3, live) == 3  # no holder
