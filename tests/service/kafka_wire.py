"""Kafka requests built from kio's schemas, for tests (and bench/fuzz.py) that talk raw protocol.

* :func:`example_request` builds a plausible request of any API and version: every
  field is filled (entity arrays get one element, so nested fields are exercised
  too), from ``values`` by field name when given, else from :data:`PLAUSIBLE` by
  field name, else by type. ``values`` apply at every depth; a list of dicts for an
  array field builds one element per dict (each dict on top of the outer values).
* :func:`frame` encodes a request (header and body) as a size-prefixed frame with
  kio's writer; :func:`decode_response` decodes a response with kio's reader at
  that version (the conformance check: a well-formed answer).
* :class:`WireConnection` sends frames and reads answers over one socket
  (``rawkafka.Connection`` with kio entities).
* :func:`error_codes` collects every ``error_code`` in a response entity.
* :func:`read_to_end` reads a topic from offset 0 to its end with confluent-kafka.

Shares no code with the broker's protocol layer beyond kio itself.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import time
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

from tests.e2e import rawkafka

__all__ = [
    "PLAUSIBLE",
    "WireConnection",
    "decode_response",
    "error_codes",
    "example_request",
    "frame",
    "offsets_held",
    "read_to_end",
    "records",
    "with_crc",
]

_I32 = struct.Struct(">i")


def records(count: int = 3, value: bytes = b"strata", compression_type: int = 0,
            keyless: Collection[int] = ()) -> bytes:
    """One valid v2 batch of ``count`` records (kafka-python's builder, not the broker's); record
    i has the key ``k<i>``, none when i is in ``keyless``."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression_type, is_transactional=False,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i in range(count):
        key = None if i in keyless else b"k%d" % i
        builder.append(i, timestamp=1_700_000_000_000 + i, key=key, value=value, headers=[])
    return bytes(builder.build())


#: RecordBatch v2: the CRC-32C at byte 17 covers everything from byte 21 (attributes) on
_CRC_AT, _CRC_FROM = 17, 21


def with_crc(batch: bytes | bytearray) -> bytes:
    """``batch`` with its CRC recomputed, so a lie in its body passes the CRC check."""
    out = bytearray(batch)
    struct.pack_into(">I", out, _CRC_AT, crc32c(bytes(out[_CRC_FROM:])))
    return bytes(out)


#: Plausible values by field name (ints in ms where the schema wants a timedelta).
PLAUSIBLE: Mapping[str, Any] = {
    "acks": -1,
    "timeout": 5_000,
    "replica_id": -1,
    "max_wait": 10,
    "min_bytes": 1,
    "max_bytes": 1 << 20,
    "partition_max_bytes": 1 << 20,
    "isolation_level": 0,
    "session_id": 0,
    "session_epoch": -1,
    "current_leader_epoch": -1,
    "last_fetched_epoch": -1,
    "log_start_offset": -1,
    "fetch_offset": 0,
    "timestamp": -1,
    "num_partitions": 1,
    "replication_factor": 1,
    "generation_id": -1,
    "generation_id_or_member_epoch": -1,
    "member_epoch": -1,
    "member_id": "",
    "group_instance_id": None,
    "reason": None,
    "session_timeout": 10_000,
    "rebalance_timeout": 10_000,
    "protocol_type": "consumer",
    "protocol_name": "range",
    "retention_time": -1,
    "committed_offset": 0,
    "committed_leader_epoch": -1,
    "committed_metadata": "",
    "key_type": 0,
    "resource_type": 2,
    "config_operation": 0,
    "client_software_name": "strata-test",
    "client_software_version": "1.0",
    "rack_id": "",
    "transactional_id": None,
    "records": records(),
    "validate_only": False,
    "allow_auto_topic_creation": False,
    "include_cluster_authorized_operations": False,
    "include_topic_authorized_operations": False,
    "include_authorized_operations": False,
    "include_synonyms": False,
    "include_documentation": False,
    "require_stable": False,
    "endpoint_type": 1,
    "configuration_keys": None,
    "states_filter": (),
    "types_filter": (),
    "forgotten_topics_data": (),
    "assignments": (),
    "configs": (),
    "topic_id": None,
    "transaction_timeout": 60_000,
    "producer_id": -1,
    "producer_epoch": -1,
    "leader_epoch": 0,
}

_BY_TYPE: Mapping[str, Any] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint16": 0,
    "uint32": 0,
    "float64": 0.0,
    "bool": False,
    "string": "strata",
    "bytes": b"",
    "records": None,
    "uuid": None,
    "timedelta_i32": 0,
    "timedelta_i64": 0,
}


def _coerce(kafka_type: str, value: Any) -> Any:
    if kafka_type.startswith("timedelta") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    return value


def _lookup(f: dataclasses.Field[Any], values: Mapping[str, Any]) -> tuple[bool, Any]:
    """The value given for field ``f``, else its plausible one; a plausible null only where
    this version lets the field be null (AddPartitionsToTxn v4's ``transactional_id`` may not)."""
    if f.name in values:
        return True, values[f.name]
    if f.name in PLAUSIBLE and (PLAUSIBLE[f.name] is not None or is_optional(f)):
        return True, PLAUSIBLE[f.name]
    return False, None


def example_request(api_key: int, version: int, **values: Any) -> Any:
    """A request entity of ``api_key`` at ``version`` with every field filled (see module doc)."""
    return _fill(load_request_schema(api_key, version), values)


def _fill(cls: type, values: Mapping[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        shape = classify_field(f)
        found, value = _lookup(f, values)
        if isinstance(shape, EntityTupleField):
            if not found or value is ...:
                value = (_fill(shape.type_, values),)
            elif isinstance(value, list):
                value = tuple(_fill(shape.type_, {**values, **item}) for item in value)
            kwargs[f.name] = value
        elif isinstance(shape, EntityField):
            kwargs[f.name] = value if found else _fill(shape.type_, values)
        else:
            kafka_type = get_schema_field_type(f)
            if isinstance(shape, PrimitiveTupleField):
                if not found:
                    value = (_BY_TYPE[kafka_type],)
                kwargs[f.name] = None if value is None else tuple(_coerce(kafka_type, v) for v in value)
                continue
            if not found:
                value = None if is_optional(f) and kafka_type == "string" else _BY_TYPE[kafka_type]
            kwargs[f.name] = _coerce(kafka_type, value)
    return cls(**kwargs)


def encode_request(body: Any, correlation_id: int, client_id: str | None = "strata-test") -> bytes:
    """Header and body, without the size prefix."""
    cls = type(body)
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=cls.__api_key__,
            request_api_version=cls.__version__,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    entity_writer(cls)(buf, body)
    return buf.getvalue()


def frame(body: Any, correlation_id: int = 1) -> bytes:
    """The size-prefixed request frame of a request entity."""
    payload = encode_request(body, correlation_id)
    return _I32.pack(len(payload)) + payload


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, Any]:
    """``(correlation_id, response entity)``; raises if the bytes are not that response, whole."""
    schema = load_response_schema(api_key, version)
    header, used = entity_reader(schema.__header_schema__)(payload, 0)
    body, size = entity_reader(schema)(payload, used)
    if used + size != len(payload):
        raise ValueError(f"response has {len(payload) - used - size} trailing bytes")
    return int(header.correlation_id), body


def error_codes(entity: Any) -> list[int]:
    """Every ``error_code`` field (and ``partition_error_code``, AddPartitionsToTxn's) in a
    response entity, depth first."""
    return list(_walk_codes(entity))


def _walk_codes(value: Any) -> Iterator[int]:
    if isinstance(value, tuple):
        for item in value:
            yield from _walk_codes(item)
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            inner = getattr(value, f.name)
            if f.name in ("error_code", "partition_error_code"):
                yield int(inner)
            else:
                yield from _walk_codes(inner)


class BrokerClosed(ConnectionError):
    """The broker closed the connection instead of answering."""


class WireConnection(rawkafka.Connection):
    """A blocking socket speaking raw Kafka protocol to one broker, with kio entities."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, _, port = bootstrap.rpartition(":")
        super().__init__(host, int(port), timeout)

    def call(self, body: Any) -> Any:  # type: ignore[override]
        """Send a request entity; the decoded response (asserting its correlation id)."""
        self.correlation_id += 1
        self.sock.sendall(frame(body, self.correlation_id))
        payload = self.read_frame()
        if payload is None:
            raise BrokerClosed(f"broker closed the connection instead of answering {type(body).__name__}")
        correlation_id, response = decode_response(type(body).__api_key__, type(body).__version__, payload)
        assert correlation_id == self.correlation_id, (correlation_id, self.correlation_id)
        return response

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)


def offsets_held(bootstrap: str, topic: str, partitions: int = 1) -> int:
    """Offsets between the log start and the end of ``topic``'s partitions (ListOffsets v8, -2 and -1):
    what :func:`read_to_end` reads when there are no control records."""
    def total(timestamp: int) -> int:
        with WireConnection(bootstrap) as conn:
            listed = conn.call(example_request(2, 8, name=topic, timestamp=timestamp, partitions=[
                {"partition_index": p} for p in range(partitions)]))
        return sum(int(p.offset) for p in listed.topics[0].partitions)

    return total(-1) - total(-2)


def read_to_end(bootstrap: str, topic: str, partitions: int = 1, timeout: float = 30.0) -> list[bytes]:
    """Every record value of ``topic``, each partition read from its log start offset (0
    unless DeleteRecords moved it) to its end.

    Fails on any consumer error: a batch the broker acknowledged but a client
    cannot read stops here.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-read-to-end",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)}
    ends = {p: end for p, (_, end) in marks.items()}
    consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in marks.items()])
    values: list[bytes] = []
    at_end = {p for p, (start, end) in marks.items() if end == start}
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                if msg.offset() >= ends[msg.partition()]:
                    at_end.add(msg.partition())
                continue
            values.append(msg.value())
    finally:
        consumer.close()
    assert len(at_end) == partitions, f"stuck before the end of {topic} {ends}: read {len(values)}"
    return values
