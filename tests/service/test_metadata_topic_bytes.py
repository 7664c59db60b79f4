"""Metadata v10-v13's per-topic bytes written without kio (service/handlers/metadata_topic.py)
are kio's bytes, for any topic: empty, large (lengths past one varint byte), non-ASCII names,
every field at its bounds."""

from __future__ import annotations

import sys
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema

from common.protocol.codec import build, encode_entity
from service.handlers.metadata_topic import FIRST_VERSION, LAST_VERSION, encode_topic

_INT32 = st.integers(-(2**31), 2**31 - 1)
_NODES = st.lists(st.integers(0, 2**31 - 1), max_size=5)
_PARTITION = st.tuples(st.sampled_from([0, 5, 3]), st.integers(0, 2**31 - 1), _INT32, _INT32,
                       _NODES, _NODES, _NODES)


@settings(max_examples=200, deadline=None)
@given(
    version=st.integers(FIRST_VERSION, LAST_VERSION),
    name=st.text(min_size=1, max_size=200),
    internal=st.booleans(),
    partitions=st.lists(_PARTITION, max_size=140),
    operations=_INT32,
)
def test_the_bytes_are_kios(version: int, name: str, internal: bool, partitions: list, operations: int) -> None:
    mod = sys.modules[load_response_schema(3, version).__module__]
    topic_id = uuid.uuid4()
    expected = encode_entity(build(
        mod.MetadataResponseTopic, error_code=0, name=name, topic_id=topic_id, is_internal=internal,
        partitions=tuple(
            build(mod.MetadataResponsePartition, error_code=code, partition_index=index, leader_id=leader,
                  leader_epoch=epoch, replica_nodes=tuple(replicas), isr_nodes=tuple(isr),
                  offline_replicas=tuple(offline))
            for code, index, leader, epoch, replicas, isr, offline in partitions),
        topic_authorized_operations=operations,
    ))
    assert encode_topic(0, name, topic_id, internal, partitions, operations) == expected
