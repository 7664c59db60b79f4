"""The inter-broker APIs of diskless topics: DisklessCommit and DisklessIndex bodies (ADR 0027, "On the wire")."""

from __future__ import annotations

import uuid

import orjson
import pytest

from common.errors import FencedLeaderEpochError, NotLeaderOrFollowerError
from remote_tier.diskless.commits import CommitEntry
from service.diskless import rpc
from service.diskless.sequence import Proposal

TOPIC = uuid.UUID(int=7)


def _proposal(position: int, key: str = "diskless/wal/1/0000000000001-a.wal") -> Proposal:
    return Proposal(TOPIC, 2, 5, key, position, 120, 3, 1_700_000_000_000 + position, 4000, 1, position)


def test_a_commit_request_and_its_answer_round_trip_in_order() -> None:
    proposals = [_proposal(0), _proposal(120), _proposal(0, "diskless/wal/2/0000000000002-b.wal")]
    assert rpc.decode_commit_request(rpc.encode_commit_request(proposals)) == proposals
    first = CommitEntry(TOPIC, 2, 5, 40, 3, proposals[0].object_key, 0, 120, proposals[0].max_timestamp, 4000, 1, 0)
    answers = rpc.decode_commit_answer(rpc.encode_commit_answer([first, FencedLeaderEpochError("old epoch"), first]),
                                       proposals)
    assert answers[0] == first
    assert isinstance(answers[1], FencedLeaderEpochError) and "old epoch" in answers[1].message
    assert isinstance(answers[2], CommitEntry) and answers[2].object_key == proposals[2].object_key


def test_an_index_answer_round_trips_and_an_error_is_raised() -> None:
    entry = CommitEntry(TOPIC, 0, 1, 10, 2, "diskless/wal/1/0000000000001-a.wal", 0, 99, 5)
    answer = rpc.IndexAnswer(10, 12, (entry,))
    assert rpc.decode_index_answer(rpc.encode_index_answer(answer)) == answer
    with pytest.raises(NotLeaderOrFollowerError, match="moved"):
        rpc.decode_index_answer(rpc.encode_index_answer(NotLeaderOrFollowerError("moved")))
    assert rpc.decode_index_request(rpc.encode_index_request(TOPIC, 3, 44, 1000, 500)) == (TOPIC, 3, 44, 1000, 500)


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'{"objects": ["k"]}', b'{"objects": ["k"], "proposals": [[1]]}',
    b'{"objects": ["k"], "proposals": [["not-a-uuid", 0, 0, 0, 0, 1, 1, 0, -1, -1, -1, 0]]}',
    b'{"objects": ["k"], "proposals": [["%s", 0, 0, 3, 0, 1, 1, 0, -1, -1, -1, 0]]}' % str(TOPIC).encode(),
    b'{"objects": ["k"], "proposals": [["%s", -1, 0, 0, 0, 1, 1, 0, -1, -1, -1, 0]]}' % str(TOPIC).encode(),
    b'{"objects": ["k"], "proposals": [["%s", 0, 0, 0, 0, 1, 1, true, -1, -1, -1, 0]]}' % str(TOPIC).encode(),
])
def test_a_malformed_commit_request_is_refused_before_use(body: bytes) -> None:
    with pytest.raises(rpc.RpcFormatError):
        rpc.decode_commit_request(body)


@pytest.mark.parametrize("body", [
    b'{"answers": []}', b'{"answers": [[0, null, 1, -5, 1, 0]]}', b'{"answers": [[0, null, 1, 0, 0, 0]]}',
    b'{"error": 0}', b'{"error": "x"}', b"{",
])
def test_a_malformed_commit_answer_is_refused(body: bytes) -> None:
    with pytest.raises(rpc.RpcFormatError):
        rpc.decode_commit_answer(body, [_proposal(0)])


@pytest.mark.parametrize("doc", [
    {"topic_id": "x", "partition": 0, "offset": 0, "max_bytes": 1, "max_wait_ms": 0},
    {"topic_id": str(TOPIC), "partition": "0", "offset": 0, "max_bytes": 1, "max_wait_ms": 0},
    {"topic_id": str(TOPIC), "partition": 0, "offset": 0, "max_bytes": 1},
    {"start": 0, "end": 1, "objects": [], "entries": [["x"]]},
])
def test_malformed_index_bodies_are_refused(doc: dict[str, object]) -> None:
    with pytest.raises(rpc.RpcFormatError):
        if "start" in doc:
            rpc.decode_index_answer(orjson.dumps(doc))
        else:
            rpc.decode_index_request(orjson.dumps(doc))
