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


def test_an_index_request_and_its_answers_round_trip_with_errors_per_partition() -> None:
    entry = CommitEntry(TOPIC, 0, 1, 10, 2, "diskless/wal/1/0000000000001-a.wal", 0, 99, 5)
    answers = rpc.decode_index_answer(rpc.encode_index_answer(
        [rpc.IndexAnswer(10, 12, (entry,)), NotLeaderOrFollowerError("moved")]), 2)
    assert answers[0] == rpc.IndexAnswer(10, 12, (entry,))
    assert isinstance(answers[1], NotLeaderOrFollowerError) and "moved" in answers[1].message
    request = rpc.IndexRequest((rpc.IndexRead(TOPIC, 3, 44, 1000), rpc.IndexRead(TOPIC, 4, -1, 0, 1234)), 500, "p1")
    assert rpc.decode_index_request(rpc.encode_index_request(request)) == request
    wake = rpc.IndexRequest(wake="p1")
    assert rpc.decode_index_request(rpc.encode_index_request(wake)) == wake
    waiting = rpc.IndexRequest(request.reads, 500, "p2", min_bytes=65536)  # a Fetch's min_bytes
    assert rpc.decode_index_request(rpc.encode_index_request(waiting)).min_bytes == 65536
    # a peer from before min_bytes: its polls answer at the first entry, as they did
    older = orjson.dumps({"max_wait_ms": 5, "poll": "p", "partitions": []})
    assert rpc.decode_index_request(older).min_bytes == 1
    with pytest.raises(rpc.RpcFormatError):  # an answer for fewer partitions than asked
        rpc.decode_index_answer(rpc.encode_index_answer([rpc.IndexAnswer(0, 0, ())]), 2)


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
    {"max_wait_ms": 0, "poll": "", "partitions": [["x", 0, 0, 1, -1]]},
    {"max_wait_ms": 0, "poll": "", "partitions": [[str(TOPIC), "0", 0, 1, -1]]},
    {"max_wait_ms": 0, "poll": "", "partitions": [[str(TOPIC), 0, 0, 1]]},
    {"poll": "", "partitions": []},
    {"wake": 5},
    {"max_wait_ms": 0, "poll": "", "min_bytes": "1", "partitions": []},
    {"partitions": [{"start": 0, "end": 1, "objects": [], "entries": [["x"]]}]},
    {"partitions": [7]},
])
def test_malformed_index_bodies_are_refused(doc: dict[str, object]) -> None:
    with pytest.raises(rpc.RpcFormatError):
        if "partitions" in doc and "poll" not in doc and "max_wait_ms" not in doc:
            rpc.decode_index_answer(orjson.dumps(doc), 1)
        else:
            rpc.decode_index_request(orjson.dumps(doc))
