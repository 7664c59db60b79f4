"""A connection whose small requests back up in the kernel gets a small receive buffer
(service/network/backlog.py).

* After CHECK_EVERY small requests in a row with BACKLOG_BYTES or more waiting in the kernel,
  SO_RCVBUF is set once to the size given; with less waiting, after a large request, or with
  a size of 0, it is left alone.
* A real broker, sent thousands of one-record produce requests at once on one connection
  (a client at linger.ms 0 outrunning it), answers every one in order with its offset, and
  counts the connection in ``strata_connection_receive_backlogs``.
"""

from __future__ import annotations

import socket
import threading
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from service.network.backlog import (
    BACKLOG_BYTES,
    BACKLOG_REQUEST_BYTES,
    CHECK_EVERY,
    ReceiveBacklog,
)
from tests.e2e import helpers, rawkafka
from tests.e2e.helpers import wait_until

KIB = 1024


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    return client, server


def _waiting(sock: socket.socket, at_least: int) -> None:
    import fcntl
    import struct
    import termios

    def waiting() -> bool:
        raw = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
        return struct.unpack("i", raw)[0] >= at_least

    wait_until(waiting, f"{at_least} bytes waiting", timeout=10, interval=0.01)


def test_a_backlog_of_small_requests_sets_the_small_receive_buffer_once() -> None:
    client, server = _tcp_pair()
    try:
        client.sendall(b"x" * (BACKLOG_BYTES + 1))
        _waiting(server, BACKLOG_BYTES + 1)
        before = server.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        backlog = ReceiveBacklog(server, 100 * KIB)
        seen = [backlog.read(150) for _ in range(CHECK_EVERY)]
        assert seen == [False] * (CHECK_EVERY - 1) + [True]
        assert backlog.clamped
        assert server.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 2 * 100 * KIB != before
        assert not any(backlog.read(150) for _ in range(2 * CHECK_EVERY)), "set once"
    finally:
        client.close()
        server.close()


def test_no_backlog_a_large_request_or_a_size_of_zero_leaves_the_buffer_alone() -> None:
    client, server = _tcp_pair()
    try:
        before = server.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        quiet = ReceiveBacklog(server, 100 * KIB)
        assert not any(quiet.read(150) for _ in range(4 * CHECK_EVERY)), "nothing waiting: no backlog"

        client.sendall(b"x" * (BACKLOG_BYTES + 1))
        _waiting(server, BACKLOG_BYTES + 1)
        large = ReceiveBacklog(server, 100 * KIB)
        for _ in range(4):  # a large request in every CHECK_EVERY: a client sending big batches
            assert not any(large.read(150) for _ in range(CHECK_EVERY - 1))
            assert not large.read(BACKLOG_REQUEST_BYTES + 1)
        never = ReceiveBacklog(server, 0)
        assert never.clamped and not any(never.read(150) for _ in range(4 * CHECK_EVERY))
        assert server.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == before
    finally:
        client.close()
        server.close()


def _backlogs(broker: Any) -> float:
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "strata_connection_receive_backlogs_total")


def test_a_broker_outrun_by_one_record_requests_answers_each_in_order_and_says_so(broker: Any) -> None:
    topic = helpers.topic_name("backlog")
    helpers.create_topic(broker.bootstrap, topic)
    count = 4000
    requests = b"".join(
        rawkafka.request(0, 3, i, rawkafka.produce_v3_body(topic, 0, rawkafka.record_batch([b"v%05d" % i]), acks=1))
        for i in range(count))
    assert len(requests) / count < BACKLOG_REQUEST_BYTES
    assert _backlogs(broker) == 0
    with rawkafka.Connection.to(broker.bootstrap, timeout=60) as conn:
        # all at once, from a thread (answers are read meanwhile): far more than the broker answers
        sender = threading.Thread(target=conn.send_raw, args=(requests,))
        sender.start()
        for i in range(count):
            payload = conn.read_frame()
            assert payload is not None, f"connection closed after {i} answers"
            correlation_id, results = rawkafka.parse_produce_v3(payload)
            assert correlation_id == i
            assert [(r.error_code, r.base_offset) for r in results] == [(0, i)]
        sender.join(timeout=60)
    assert _backlogs(broker) == 1
    assert helpers.watermarks(broker.bootstrap, topic) == (0, count)
    values = [m.value() for m in helpers.consume(broker.bootstrap, topic, [0], count)]
    assert values == [b"v%05d" % i for i in range(count)]
