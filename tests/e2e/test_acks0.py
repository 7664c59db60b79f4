"""An acks=0 produce the broker cannot take closes the connection, as Kafka's does.

An acks=0 producer gets no answer, so a partition error (its leader moved, the partition does
not exist) would otherwise reach it never: librdkafka would keep sending to the old leader,
every record dropped, until its next periodic metadata refresh (5 minutes by default). Kafka
closes the connection instead; the client reconnects and refreshes its metadata. A produce the
broker takes leaves the connection open.
"""

from __future__ import annotations

from typing import Any

from tests.e2e import helpers
from tests.e2e.rawkafka import (
    API_PRODUCE,
    API_VERSIONS,
    Connection,
    produce_v3_body,
    record_batch,
    request,
)


def test_an_acks0_produce_with_a_partition_error_closes_the_connection_and_one_without_does_not(
    module_broker: Any,
) -> None:
    topic = helpers.topic_name("acks0")
    helpers.create_topic(module_broker.bootstrap, topic, partitions=1)
    conn = Connection.to(module_broker.bootstrap)
    try:
        conn.correlation_id += 1
        taken = produce_v3_body(topic, 0, record_batch([b"taken"]), acks=0)
        conn.send_raw(request(API_PRODUCE, 3, conn.correlation_id, taken))
        assert conn.call(API_VERSIONS, 0, b"")  # no answer to the produce; the connection still serves
        conn.correlation_id += 1
        lost = produce_v3_body(topic, 7, record_batch([b"lost"]), acks=0)
        conn.send_raw(request(API_PRODUCE, 3, conn.correlation_id, lost))
        assert conn.read_frame() is None  # partition 7 does not exist: closed, not answered
    finally:
        conn.sock.close()
    [record] = helpers.consume(module_broker.bootstrap, topic, [0], 1)
    assert record.value() == b"taken" and record.offset() == 0

