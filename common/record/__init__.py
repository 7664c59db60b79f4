"""Kafka's record format: ``batch`` (RecordBatch v2: header, validation, offset stamping,
the record codec), ``scan`` (the record framing walk, in C by ``_recordscan.c`` when
built), ``compression`` (the batch codecs), ``control`` (COMMIT/ABORT markers)."""
