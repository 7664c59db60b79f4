"""Hand-built transaction requests (FindCoordinator v1, InitProducerId v1/v4, AddPartitionsToTxn v1,
AddOffsetsToTxn v1, EndTxn v1) for the coordinator's error-path tests.

Non-flexible versions on :mod:`tests.e2e.rawkafka` (header v1); shares no code
with the broker. Each call returns the error code (and ids where there are any).
"""

from __future__ import annotations

import struct

from tests.e2e.rawkafka import Connection, Reader, array, string

API_FIND_COORDINATOR = 10
API_INIT_PRODUCER_ID = 22
API_ADD_PARTITIONS_TO_TXN = 24
API_ADD_OFFSETS_TO_TXN = 25
API_END_TXN = 26

NONE = 0
INVALID_REQUEST = 42
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
UNKNOWN_TOPIC_OR_PARTITION = 3
PRODUCER_FENCED = 90


def find_coordinator(conn: Connection, key: str, key_type: int = 1) -> tuple[int, int]:
    """(error_code, port) from FindCoordinator v1."""
    r = Reader(conn.call(API_FIND_COORDINATOR, 1, string(key) + struct.pack(">b", key_type)))
    r.int32()
    r.int32()  # throttle
    error = r.int16()
    r.string()  # message
    r.int32()  # node id
    r.string()  # host
    return error, r.int32()


def init_producer_id(conn: Connection, tid: str | None, timeout_ms: int = 10_000) -> tuple[int, int, int]:
    """(error_code, producer_id, producer_epoch) from InitProducerId v1."""
    r = Reader(conn.call(API_INIT_PRODUCER_ID, 1, string(tid) + struct.pack(">i", timeout_ms)))
    r.int32()
    r.int32()
    return r.int16(), r.int64(), r.int16()


def add_partitions(conn: Connection, tid: str, pid: int, epoch: int,
                   partitions: dict[str, list[int]]) -> dict[tuple[str, int], int]:
    """Per-partition error codes from AddPartitionsToTxn v1."""
    topics = [string(t) + array([struct.pack(">i", p) for p in ps]) for t, ps in partitions.items()]
    body = string(tid) + struct.pack(">qh", pid, epoch) + array(topics)
    r = Reader(conn.call(API_ADD_PARTITIONS_TO_TXN, 1, body))
    r.int32()
    r.int32()
    return r.partition_codes()


def add_offsets(conn: Connection, tid: str, pid: int, epoch: int, group: str) -> int:
    body = string(tid) + struct.pack(">qh", pid, epoch) + string(group)
    r = Reader(conn.call(API_ADD_OFFSETS_TO_TXN, 1, body))
    r.int32()
    r.int32()
    return r.int16()


def end_txn(conn: Connection, tid: str, pid: int, epoch: int, commit: bool) -> int:
    body = string(tid) + struct.pack(">qhb", pid, epoch, 1 if commit else 0)
    r = Reader(conn.call(API_END_TXN, 1, body))
    r.int32()
    r.int32()
    return r.int16()
