"""Reading a local partition log from its start, record by record, for coordinators' replays.

The group coordinator (``__consumer_offsets``) and the transaction coordinator
(``__transaction_state``) rebuild their state at load by reading their
partitions' local logs from the log start offset to the log end offset. This is
that loop, once: every record with the header of the batch it came in (so a
replay can tell transactional and control batches apart). Blocking file reads,
done at load only.
"""

from __future__ import annotations

from collections.abc import Iterator

from local_tier.log import Log
from local_tier.records import BatchHeader, Record, decode_batch, iter_batches

__all__ = ["iter_log_records"]

_READ_CHUNK = 4 * 1024 * 1024


def iter_log_records(log: Log) -> Iterator[tuple[BatchHeader, Record]]:
    """Every record of ``log`` in offset order, with its batch's header."""
    offset, end = log.log_start_offset, log.log_end_offset
    while offset < end:
        data = log.read(offset, _READ_CHUNK, max_offset=end)
        if not data.regions:
            break
        buf = b"".join(region.read_bytes() for region in data.regions)
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
