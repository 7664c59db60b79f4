"""What a partition log does with producer state: check an append, apply it, rebuild it.

Kafka's ``UnifiedLog.analyzeAndValidateProducerState`` and the producer-state part
of its log loading, kept out of :mod:`local_tier.log` so the log stays about
segments. Functions over a :class:`ProducerStateManager` and segments; called on
the event loop thread with the log (not thread-safe, as the log).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from common.errors import CorruptRecordError, InvalidRecordError
from common.record.batch import BatchHeader, ValidatedRecords
from common.record.control import read_marker
from local_tier.producer_entry import increment_sequence
from local_tier.producer_state import (
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateManager,
)
from local_tier.segment import LogSegment
from local_tier.txn_index import AbortedTxn

__all__ = ["ProducerAppend", "analyze_append", "apply_append", "replay_segments"]

_log = logging.getLogger("strata.local_tier")


@dataclass(slots=True)
class ProducerAppend:
    """The producer-state outcome of one append, installed by :func:`apply_append` once written."""

    infos: dict[int, ProducerAppendInfo] = field(default_factory=dict)
    completed: list[CompletedTxn] = field(default_factory=list)
    duplicate: BatchMetadata | None = None


def _apply_batch(
    state: ProducerStateManager,
    out: ProducerAppend,
    origin: AppendOrigin,
    header: BatchHeader,
    first_offset: int,
    batch: bytes | bytearray | memoryview,
    pos: int,
) -> None:
    pid = header.producer_id
    info = out.infos.get(pid)
    if info is None:
        info = out.infos[pid] = state.prepare_update(pid, origin)
    if header.is_control:
        marker = read_marker(batch, pos)
        if marker is not None:
            completed = info.append_end_txn_marker(
                header.producer_epoch,
                marker.coordinator_epoch,
                marker.committed,
                first_offset,
                header.max_timestamp,
            )
            if completed is not None:
                out.completed.append(completed)
        return
    info.append_data_batch(
        header.producer_epoch,
        header.base_sequence,
        increment_sequence(header.base_sequence, header.last_offset_delta),
        header.max_timestamp,
        first_offset,
        first_offset + header.last_offset_delta,
        header.is_transactional,
    )


def analyze_append(
    state: ProducerStateManager,
    records: bytes | bytearray | memoryview,
    validated: ValidatedRecords,
    first_offset: int,
    origin: AppendOrigin,
) -> ProducerAppend:
    """Check every batch of an append against the producers' state, changing nothing.

    A client's batch already in the log (same producer, epoch and sequence range
    among the producer's last five) makes the outcome a ``duplicate``: the append
    must answer with that batch's offsets and write nothing. Raises Kafka's errors
    (``OUT_OF_ORDER_SEQUENCE_NUMBER``, ``INVALID_PRODUCER_EPOCH``,
    ``INVALID_TXN_STATE``, ``TRANSACTION_COORDINATOR_FENCED``, ``INVALID_RECORD``).
    """
    out = ProducerAppend()
    offset = first_offset
    for pos, header in validated.headers:
        if header.is_control and origin is AppendOrigin.CLIENT:
            raise InvalidRecordError("clients may not write control batches")
        if header.producer_id < 0:
            if header.is_transactional or header.is_control:
                raise InvalidRecordError("a transactional batch must carry a producer id")
            offset += header.last_offset_delta + 1
            continue
        if origin is AppendOrigin.CLIENT and header.producer_id not in out.infos:
            entry = state.last_entry(header.producer_id)
            if entry is not None:
                last_seq = increment_sequence(header.base_sequence, header.last_offset_delta)
                duplicate = entry.find_duplicate(header.producer_epoch, header.base_sequence, last_seq)
                if duplicate is not None:
                    return ProducerAppend(duplicate=duplicate)
        try:
            _apply_batch(state, out, origin, header, offset, records, pos)
        except CorruptRecordError:
            raise InvalidRecordError(f"malformed control record at offset {offset}") from None
        offset += header.last_offset_delta + 1
    return out


def apply_append(
    state: ProducerStateManager, outcome: ProducerAppend, segment: LogSegment, next_offset: int
) -> None:
    """Install an analysed append once its bytes are in ``segment`` (the active one)."""
    for info in outcome.infos.values():
        state.update(info)
    for completed in outcome.completed:
        if completed.is_aborted:
            lso = state.last_stable_offset(completed)
            segment.txn_index.append(
                AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso)
            )
        state.complete_txn(completed)
    state.map_end_offset = next_offset


def replay_segments(state: ProducerStateManager, segments: Sequence[LogSegment], start: int) -> int:
    """Rebuild the state (and the segments' transaction indexes) from ``start`` to the log end.

    Each segment's index entries at or past ``start`` are dropped first and
    re-made from the ABORT markers replayed. Returns the number of batches replayed.
    """
    replayed = 0
    for segment in segments:
        if segment.next_offset <= start:
            continue
        segment.txn_index.truncate_to(start)
        for pos, header in segment.batches_from(start):
            if header.base_offset < start:
                continue  # a batch straddling the snapshot offset cannot happen; be safe
            replayed += 1
            if header.producer_id < 0:
                continue
            out = ProducerAppend()
            batch = segment.read_at(pos, header.size) if header.is_control else b""
            try:
                _apply_batch(state, out, AppendOrigin.REPLICATION, header, header.base_offset, batch, 0)
            except CorruptRecordError as exc:
                _log.warning("%s: skipping unreadable marker at %d: %s", segment.log_path, header.base_offset, exc)
                continue
            apply_append(state, out, segment, header.next_offset)
    return replayed
