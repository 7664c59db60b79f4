"""Producer ids: handed out from blocks the controller allocates durably, never reused.

Kafka's ``RPCProducerIdManager``: the broker takes a block of ids (1,000 of
them) from the controller, which records the next free id in the cluster
metadata in the bucket *before* it answers, so an id is never given twice, even
across restarts of every broker. When a block runs out the next one is taken;
the allocation (an object-store write) runs off the event loop.

This module also holds the idempotent side of InitProducerId
(:meth:`ProducerIdManager.init_idempotent`), and the epoch rule both sides share
(:func:`bump_epoch`, KIP-360). The transaction coordinator calls
:meth:`ProducerIdManager.generate_producer_id` for transactional ids.

Thread-safety: coroutines on the broker's event loop; one allocation at a time.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "MAX_PRODUCER_EPOCH",
    "IdBlock",
    "ProducerIdManager",
    "bump_epoch",
]

# Kafka bumps to at most Short.MAX_VALUE - 1; at that epoch the next init takes a new id.
MAX_PRODUCER_EPOCH = 2**15 - 2
_log = logging.getLogger("strata.producer_ids")


class IdBlock(Protocol):
    """A block of ids ``first_producer_id .. first_producer_id + size - 1`` (the controller's
    ``ProducerIdsBlock``)."""

    @property
    def first_producer_id(self) -> int: ...

    @property
    def size(self) -> int: ...


def bump_epoch(producer_id: int, producer_epoch: int, new_id: int | None) -> tuple[int, int]:
    """KIP-360: the id and epoch after a re-initialisation of ``(producer_id, producer_epoch)``.

    The epoch grows by one; an exhausted epoch (``MAX_PRODUCER_EPOCH``) moves to
    ``new_id`` at epoch 0 (``new_id`` must then be given).
    """
    if producer_epoch >= MAX_PRODUCER_EPOCH:
        if new_id is None:
            raise ValueError("the epoch is exhausted: a new producer id is needed")
        return new_id, 0
    return producer_id, producer_epoch + 1


@dataclass(slots=True)
class _Current:
    next_id: int
    end: int  # exclusive


class ProducerIdManager:
    """Hands out producer ids from blocks ``allocate()`` returns (a blocking call)."""

    def __init__(self, allocate: Callable[[], IdBlock | Awaitable[IdBlock]]) -> None:
        """``allocate`` takes the next block: a blocking call (run on a worker thread) or a
        coroutine function (the broker's, which asks the active controller)."""
        self._allocate = allocate
        self._block: _Current | None = None
        self._lock = asyncio.Lock()

    async def generate_producer_id(self) -> int:
        """A producer id no one was ever given (takes a new block when this one is used up).

        Raises whatever the allocation raises (the controller's retriable
        ``NOT_CONTROLLER``/storage errors); the caller answers with that error code.
        """
        async with self._lock:
            block = self._block
            if block is None or block.next_id >= block.end:
                loop = asyncio.get_running_loop()
                if inspect.iscoroutinefunction(self._allocate):
                    new = await self._allocate()
                else:
                    new = await loop.run_in_executor(None, self._allocate)
                block = self._block = _Current(new.first_producer_id, new.first_producer_id + new.size)
                _log.info("producer id block %d..%d", block.next_id, block.end - 1)
            producer_id = block.next_id
            block.next_id += 1
            return producer_id

    async def init_idempotent(self, producer_id: int, producer_epoch: int) -> tuple[int, int]:
        """InitProducerId without a transactional id: ``(producer id, epoch)`` to use.

        A new producer (``-1, -1``) gets a new id at epoch 0. A producer that sends
        its current id and epoch (KIP-360, after an error that lost its sequence
        state) gets the next epoch of the same id, or a new id once the epoch is
        exhausted. No state is kept per idempotent producer: the partitions check
        epochs and sequences.
        """
        if producer_id < 0:
            return await self.generate_producer_id(), 0
        new_id = await self.generate_producer_id() if producer_epoch >= MAX_PRODUCER_EPOCH else None
        return bump_epoch(producer_id, producer_epoch, new_id)
