"""Fetch v13+ names topics by id (ADR 0028): what a consumer's fetch session does with an id
the broker does not know.

Kafka keeps such a partition unnamed in the session and answers UNKNOWN_TOPIC_ID each
time. This broker keeps no partition it cannot name in a session: a full fetch naming one
opens no session (the next full fetch names it again), and an incremental fetch naming one
is answered FETCH_SESSION_TOPIC_ID_ERROR, on which clients start over with a full fetch.
A session opened while a partition was unknown would otherwise leave it unread for good:
the client does not name an unchanged partition again.
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode as E

from tests.service.kafka_wire import WireConnection, error_codes, example_request

TOPIC = "by-id"


def _fetch(conn: WireConnection, topics: list[uuid.UUID], *, session_id: int, epoch: int) -> Any:
    return conn.call(example_request(1, 17, topics=[{"topic_id": t} for t in topics], partition=0, fetch_offset=0,
                                     session_id=session_id, session_epoch=epoch, max_wait=0, min_bytes=0,
                                     forgotten_topics_data=()))


def test_a_consumer_session_never_holds_a_partition_whose_topic_id_is_unknown(start_broker: Any) -> None:
    broker = start_broker()
    stranger = uuid.uuid4()
    with WireConnection(broker.bootstrap) as conn:
        assert error_codes(conn.call(example_request(19, 7, name=TOPIC, num_partitions=1))) == [E.none]
        assert error_codes(conn.call(example_request(0, 9, name=TOPIC, index=0))) == [E.none]
        known = conn.call(example_request(3, 12, name=TOPIC)).topics[0].topic_id

        full = _fetch(conn, [known, stranger], session_id=0, epoch=0)
        by_id = {t.topic_id: t.partitions[0] for t in full.responses}
        assert (full.error_code, full.session_id) == (E.none, 0)  # no session opened
        assert by_id[known].error_code == E.none and by_id[known].records
        assert by_id[stranger].error_code == E.unknown_topic_id

        opened = _fetch(conn, [known], session_id=0, epoch=0)
        assert opened.error_code == E.none and opened.session_id != 0
        later = _fetch(conn, [stranger], session_id=opened.session_id, epoch=1)
        assert (later.error_code, later.responses) == (E.fetch_session_topic_id_error, ())
