"""WriteTxnMarkers (key 27): a transaction coordinator's COMMIT/ABORT markers for this broker's partitions.

Each marker entry is written by :func:`service.replication.txn_markers.write_txn_markers`,
the function the in-process coordinator calls directly; the answer lists the
error code of every partition.
"""

from __future__ import annotations

from typing import Any

from common.errors import ErrorCode
from common.protocol.codec import build, response_module
from service.handlers.context import RequestContext
from service.security.acls import CLUSTER_NAME, AclOperation, ResourceType

__all__ = ["handle_write_txn_markers"]


def handle_write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(27, ctx.version)
    results = []
    for marker in request.markers:
        partitions = [(t.name, int(p)) for t in marker.topics for p in t.partition_indexes]
        if not ctx.allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):  # brokers only
            codes = dict.fromkeys(partitions, ErrorCode.cluster_authorization_failed)
        else:
            codes = ctx.broker.write_txn_markers(
            producer_id=int(marker.producer_id),
            producer_epoch=int(marker.producer_epoch),
            coordinator_epoch=int(marker.coordinator_epoch),
            committed=bool(marker.transaction_result),
            partitions=partitions,
            )
        topics = tuple(
            build(
                mod.WritableTxnMarkerTopicResult,
                name=t.name,
                partitions=tuple(
                    build(
                        mod.WritableTxnMarkerPartitionResult,
                        partition_index=p,
                        error_code=codes[(t.name, int(p))],
                    )
                    for p in t.partition_indexes
                ),
            )
            for t in marker.topics
        )
        results.append(build(mod.WritableTxnMarkerResult, producer_id=marker.producer_id, topics=topics))
    return build(mod.WriteTxnMarkersResponse, markers=tuple(results))
