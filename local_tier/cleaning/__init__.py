"""The log cleaner: Kafka's log compaction for ``cleanup.policy=compact`` (ADR 0019).

* :mod:`.offset_map` — the bounded key → last offset map of a log's dirty section;
* :mod:`.batches` — the record walk and Kafka's ``MemoryRecords.filterTo``: a
  batch's retained records rewritten into a batch with the same offsets and
  producer metadata;
* :mod:`.txns` — Kafka's ``CleanedTransactionMetadata``: which transaction data
  and markers may go, and the rebuilt ``.txnindex``;
* :mod:`.cleaner` — one cleaning pass over any source of segments (the local
  log here, the bucket for :mod:`remote_tier.compaction`);
* :mod:`.local` — cleaning a local :class:`~local_tier.log.Log`: ``.cleaned``
  files, the swap on the log's owner thread;
* :mod:`.manager` — the cleaner threads, the choice of the filthiest log,
  ``cleaner-offset-checkpoint``, the I/O throttle, progress for the admin API.
"""
