"""The ``__consumer_offsets`` record codec: Kafka's exact bytes, old versions, partitioning."""

from __future__ import annotations

import struct

import pytest

from service.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
    java_string_hash,
    partition_for,
)


def test_offset_key_is_kafka_version_1_bytes() -> None:
    raw = encode_key(OffsetKey("g1", "orders", 7))
    assert raw == b"\x00\x01" + b"\x00\x02g1" + b"\x00\x06orders" + b"\x00\x00\x00\x07"
    assert decode_key(raw) == OffsetKey("g1", "orders", 7)


def test_group_metadata_key_is_kafka_version_2_bytes() -> None:
    raw = encode_key(GroupMetadataKey("g1"))
    assert raw == b"\x00\x02\x00\x02g1"
    assert decode_key(raw) == GroupMetadataKey("g1")


def test_offset_value_is_kafka_version_3_bytes() -> None:
    raw = encode_offset_value(OffsetValue(42, 5, "meta", 1_700_000_000_000))
    assert raw == (b"\x00\x03" + struct.pack(">qi", 42, 5) + b"\x00\x04meta"
                   + struct.pack(">q", 1_700_000_000_000))
    assert decode_offset_value(raw) == OffsetValue(42, 5, "meta", 1_700_000_000_000)


def test_older_offset_value_versions_decode() -> None:
    v0 = b"\x00\x00" + struct.pack(">q", 9) + b"\x00\x00" + struct.pack(">q", 100)
    v1 = b"\x00\x01" + struct.pack(">q", 9) + b"\x00\x01m" + struct.pack(">qq", 100, 200)
    v2 = b"\x00\x02" + struct.pack(">q", 9) + b"\x00\x00" + struct.pack(">q", 100)
    assert decode_offset_value(v0) == OffsetValue(9, -1, "", 100)
    assert decode_offset_value(v1) == OffsetValue(9, -1, "m", 100, 200)
    assert decode_offset_value(v2) == OffsetValue(9, -1, "", 100)


def test_group_value_round_trips_with_static_and_dynamic_members() -> None:
    value = GroupMetadataValue(
        "consumer", 4, "range", "m-1", 1_700_000_000_123,
        (MemberValue("m-1", "instance-a", "client", "/10.0.0.1", 300_000, 10_000, b"sub", b"asg"),
         MemberValue("m-2", None, "client", "/10.0.0.2", 60_000, 6_000, b"", b"")),
    )
    raw = encode_group_value(value)
    assert raw[:2] == b"\x00\x03"
    assert decode_group_value(raw) == value


def test_empty_group_value_has_null_protocol_and_leader() -> None:
    value = GroupMetadataValue("consumer", 7, None, None, 5, ())
    raw = encode_group_value(value)
    assert raw == (b"\x00\x03\x00\x08consumer" + struct.pack(">i", 7) + b"\xff\xff\xff\xff"
                   + struct.pack(">qi", 5, 0))
    assert decode_group_value(raw) == value


def test_group_value_version_0_decodes_without_newer_fields() -> None:
    member = (b"\x00\x01m" + b"\x00\x01c" + b"\x00\x01h" + struct.pack(">i", 6000)
              + struct.pack(">i", 1) + b"s" + struct.pack(">i", 1) + b"a")
    raw = (b"\x00\x00\x00\x08consumer" + struct.pack(">i", 2) + b"\x00\x05range\x00\x01m"
           + struct.pack(">i", 1) + member)
    assert decode_group_value(raw) == GroupMetadataValue(
        "consumer", 2, "range", "m", -1, (MemberValue("m", None, "c", "h", 6000, 6000, b"s", b"a"),))


@pytest.mark.parametrize("raw", [b"", b"\x00", b"\x00\x09\x00\x01g", b"\x00\x01\x00\x05g"])
def test_garbage_keys_are_format_errors(raw: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_key(raw)


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0), ("hello", 99162322), ("Aa", 2112), ("BB", 2112),
    ("polygenelubricants", -(2**31)), ("\U0001F600", 31 * 0xD83D + 0xDE00),
])
def test_java_string_hash_matches_java(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_partition_for_is_abs_hash_mod_partitions_like_kafka() -> None:
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    negative = "consumer-group-of-the-orders-service"
    assert java_string_hash(negative) < 0
    assert partition_for(negative, 50) == abs(java_string_hash(negative)) % 50
