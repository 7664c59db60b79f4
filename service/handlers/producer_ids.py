"""InitProducerId (key 22): producer ids and epochs for idempotent and transactional producers.

Without a transactional id the answer comes from the broker's
:class:`service.transactions.producer_ids.ProducerIdManager` (a new id at epoch 0, or the
next epoch of the id the producer sends, KIP-360). With one, the request goes to
the transaction coordinator (``Broker.transaction_coordinator``, a
:class:`service.replication.txn_markers.TransactionalInit`); until one is registered such
requests get ``COORDINATOR_NOT_AVAILABLE``.
"""

from __future__ import annotations

import logging
from typing import Any

from common.errors import ErrorCode, KafkaError
from common.protocol.codec import build, response_module
from common.protocol.codec import timedelta_to_ms as _ms
from service.handlers.context import RequestContext
from service.replication.txn_markers import InitProducerIdResult

__all__ = ["handle_init_producer_id"]

log = logging.getLogger("strata.producer_ids")


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    result = await _init(ctx, request)
    error = result.error_code
    if ctx.version < 4 and error == ErrorCode.producer_fenced:
        error = ErrorCode.invalid_producer_epoch  # older clients do not know PRODUCER_FENCED
    if error != ErrorCode.none:
        ctx.broker.metrics_error("InitProducerId", error)
    mod = response_module(22, ctx.version)
    return build(
        mod.InitProducerIdResponse,
        throttle_time=0,
        error_code=error,
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
    )


async def _init(ctx: RequestContext, request: Any) -> InitProducerIdResult:
    producer_id = int(getattr(request, "producer_id", -1))
    producer_epoch = int(getattr(request, "producer_epoch", -1))
    if (producer_id < 0) != (producer_epoch < 0):
        return InitProducerIdResult(ErrorCode.invalid_request)
    transactional_id = request.transactional_id
    broker = ctx.broker
    if transactional_id is not None:
        if transactional_id == "":
            return InitProducerIdResult(ErrorCode.invalid_request)
        coordinator = broker.transaction_coordinator
        if coordinator is None:
            return InitProducerIdResult(ErrorCode.coordinator_not_available)
        return await coordinator.init_producer_id(
            transactional_id, _ms(request.transaction_timeout), producer_id, producer_epoch
        )
    try:
        new_id, epoch = await broker.producer_ids.init_idempotent(producer_id, producer_epoch)
    except KafkaError as exc:
        return InitProducerIdResult(exc.code)
    except OSError as exc:
        log.error("producer id allocation failed: %s", exc)
        return InitProducerIdResult(ErrorCode.coordinator_not_available)
    return InitProducerIdResult(ErrorCode.none, new_id, epoch)
