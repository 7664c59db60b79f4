"""__transaction_state records: Kafka's bytes, both value versions, and bad input refused."""

from __future__ import annotations

import struct

import pytest

from service.transactions.records import (
    TxnLogValue,
    TxnRecordFormatError,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
    txn_partition_for,
)


def test_key_is_version_0_and_an_int16_string() -> None:
    assert encode_txn_key("tx") == b"\x00\x00\x00\x02tx"
    assert decode_txn_key(b"\x00\x00\x00\x02tx") == "tx"


def test_value_v0_golden_bytes_and_round_trip() -> None:
    value = TxnLogValue(5, 1, 60000, 1, (("t", (0, 2)),), 10, 9)
    expected = (
        struct.pack(">hqhib", 0, 5, 1, 60000, 1)
        + struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">qq", 10, 9)
    )
    assert encode_txn_value(value) == expected
    assert decode_txn_value(expected) == value


def test_empty_state_writes_a_null_partition_array() -> None:
    raw = encode_txn_value(TxnLogValue(5, 0, 1000, 0, (), 3, -1))
    assert raw[17:21] == struct.pack(">i", -1)
    assert decode_txn_value(raw).partitions == ()


def test_value_v1_flexible_with_tagged_fields_is_read() -> None:
    raw = (
        struct.pack(">hqhib", 1, 7, 3, 5000, 2)
        + b"\x02"  # compact array: one entry
        + b"\x02t" + b"\x03" + struct.pack(">ii", 4, 5) + b"\x00"  # topic "t", [4, 5], no tags
        + struct.pack(">qq", 20, 19)
        + b"\x02" + b"\x00\x08" + struct.pack(">q", 6) + b"\x02\x02" + struct.pack(">h", 2)
    )
    value = decode_txn_value(raw)
    assert (value.producer_id, value.producer_epoch, value.state_id) == (7, 3, 2)
    assert value.partitions == (("t", (4, 5)),)
    assert (value.previous_producer_id, value.client_transaction_version) == (6, 2)
    assert value.next_producer_id == -1


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x05",  # unknown version
        b"\x00\x00\x00",  # ends early
        struct.pack(">hqhib", 0, 5, 1, 60000, 1) + struct.pack(">i", 2_000_000_000),  # huge array
    ],
)
def test_bad_values_are_refused(raw: bytes) -> None:
    with pytest.raises(TxnRecordFormatError):
        decode_txn_value(raw)


def test_partition_is_kafkas_hash() -> None:
    # abs("my-txn".hashCode()) % 50, as Kafka computes it
    h = 0
    for ch in "my-txn":
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h & 0x80000000 else h
    assert txn_partition_for("my-txn", 50) == abs(h) % 50
