"""Reading a local partition log from its start, record by record, for coordinators' replays.

The group coordinator (``__consumer_offsets``) and the transaction coordinator
(``__transaction_state``) rebuild their state at load by reading their
partitions' local logs from the log start offset to the log end offset. This is
that loop, once: every record with the header of the batch it came in (so a
replay can tell transactional and control batches apart). Blocking file reads,
done at load only, over a :class:`~local_tier.read_view.LogReadView` taken on the
log's owner thread (so the replay itself may run on a worker thread).
"""

from __future__ import annotations

from collections.abc import Iterator

from common.record.batch import BatchHeader, Record, decode_batch, iter_batches
from local_tier.read_view import LogReadView

__all__ = ["iter_log_records"]

_READ_CHUNK = 4 * 1024 * 1024


def iter_log_records(view: LogReadView) -> Iterator[tuple[BatchHeader, Record]]:
    """Every record of the log ``view`` was taken of, in offset order, with its batch's header."""
    offset, end = view.log_start_offset, view.log_end_offset
    while offset < end:
        region = view.read(offset, _READ_CHUNK, end)
        if region is None:
            break
        buf = region.read_bytes()
        advanced = False
        for pos, header in iter_batches(buf):
            if header.next_offset <= offset:
                continue
            for record in decode_batch(buf, pos)[1]:
                if record.offset >= offset:
                    yield header, record
            offset = header.next_offset
            advanced = True
        if not advanced:
            break
