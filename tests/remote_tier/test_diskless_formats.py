"""The bucket formats of diskless topics (ADR 0027): write-ahead objects and commit chains,
against a real store (a directory and the moto S3 server over HTTP)."""

from __future__ import annotations

import gzip
import struct
import uuid

import orjson
import pytest

from common.record.batch import build_batch, decode_all
from remote_tier import ObjectStore
from remote_tier.diskless.commits import (
    MAX_COMMIT_BYTES,
    ChainId,
    CommitBatch,
    CommitChain,
    CommitEntry,
    CommitFormatError,
    decode_commit,
    encode_commit,
)
from remote_tier.diskless.wal import (
    FOOTER_BYTES,
    WalFormatError,
    WalKey,
    WalObjectBuilder,
    parse_trailer,
)

TOPIC_A = uuid.UUID("00000000-0000-0000-0000-00000000000a")
TOPIC_B = uuid.UUID("00000000-0000-0000-0000-00000000000b")


def _batch(value: bytes, sequence: int = -1) -> bytes:
    return build_batch([(b"k", value, (), 1_700_000_000_000)], producer_id=7 if sequence >= 0 else -1,
                       producer_epoch=0 if sequence >= 0 else -1, base_sequence=sequence)


def test_an_object_groups_batches_by_partition_in_arrival_order_and_reads_back():
    builder = WalObjectBuilder()
    arrivals = [(TOPIC_B, 0, _batch(b"b0-first")), (TOPIC_A, 1, _batch(b"a1")),
                (TOPIC_B, 0, _batch(b"b0-second")), (TOPIC_A, 0, _batch(b"a0"))]
    for topic, partition, batch in arrivals:
        builder.add(topic, partition, batch)
    assert len(builder) == 4 and builder.size == sum(len(b) for _, _, b in arrivals)

    data, runs, _ = builder.build()

    assert [(r.topic_id, r.partition, r.batches) for r in runs] == [(TOPIC_A, 0, 1), (TOPIC_A, 1, 1), (TOPIC_B, 0, 2)]
    assert parse_trailer(data) == runs
    tail = data[-(FOOTER_BYTES + 4 + 3 * 36):]  # what a ranged GET of the trailer brings
    assert parse_trailer(tail, object_size=len(data)) == runs
    for run, values in zip(runs, ([b"a0"], [b"a1"], [b"b0-first", b"b0-second"]), strict=True):
        assert [r.value for r in decode_all(data[run.position:run.position + run.length])] == values


def test_a_key_says_who_wrote_the_object_and_when():
    key = WalKey.new("pre/fix", 3, 1_795_942_904_489)
    assert key.key.startswith("pre/fix/diskless/wal/3/1795942904489-") and key.key.endswith(".wal")
    assert WalKey.parse(key.key) == key
    assert WalKey.parse(WalKey.new("", 12, 5).key).prefix == ""
    for bad in ("pre/diskless/wal/x/1795942904489-" + "0" * 32 + ".wal", "pre/diskless/wal/3/17-abc.wal",
                "topics/x/0/manifest.json"):
        with pytest.raises(WalFormatError):
            WalKey.parse(bad)


@pytest.mark.parametrize("damage", ["magic", "version", "crc", "length", "overlap", "short"])
def test_a_damaged_object_is_refused_not_misread(damage: str):
    builder = WalObjectBuilder()
    builder.add(TOPIC_A, 0, _batch(b"x" * 100))
    builder.add(TOPIC_A, 1, _batch(b"y" * 100))
    data = bytearray(builder.build()[0])
    footer_at = len(data) - FOOTER_BYTES
    if damage == "magic":
        data[footer_at] ^= 0xFF
    elif damage == "version":
        struct.pack_into(">H", data, footer_at + 4, 9)
    elif damage == "crc":
        data[footer_at - 1] ^= 0x01  # the last run's batch count
    elif damage == "length":
        struct.pack_into(">I", data, footer_at + 8, 10**9)
    elif damage == "overlap":  # the second run claims to start inside the first; CRC made to match
        from crc32c import crc32c

        length = struct.unpack_from(">I", data, footer_at + 8)[0]
        trailer_at = footer_at - length
        struct.pack_into(">Q", data, trailer_at + 4 + 36 + 20, 1)
        struct.pack_into(">I", data, footer_at + 12, crc32c(bytes(data[trailer_at:footer_at])))
    else:
        data = data[:FOOTER_BYTES - 1]
    with pytest.raises(WalFormatError):
        parse_trailer(bytes(data))


def _entry(n: int, key: str = "diskless/wal/1/1795942904489-" + "a" * 32 + ".wal") -> CommitEntry:
    return CommitEntry(TOPIC_A, n % 3, 4, 100 + 10 * n, 10, key, 1000 * n, 1000, 1_700_000_000_000 + n,
                       producer_id=7, producer_epoch=0, base_sequence=10 * n)


def test_a_commit_batch_round_trips_small_and_gzipped():
    chain = ChainId(2, 17)
    small = CommitBatch(chain, 5, uuid.uuid4().hex, 1234, (_entry(0), _entry(1, "other.wal")))
    assert decode_commit(encode_commit(small), chain, 5) == small
    assert small.objects == [_entry(0).object_key, "other.wal"]
    big = CommitBatch(chain, 6, "b", 1, tuple(_entry(n) for n in range(2000)))
    data = encode_commit(big)
    assert data[:2] == b"\x1f\x8b" and len(data) < 64 * 1024
    assert decode_commit(data, chain, 6) == big
    assert ChainId.parse(str(chain)) == chain


def test_a_commit_object_from_another_slot_or_malformed_is_refused():
    chain = ChainId(2, 17)
    data = encode_commit(CommitBatch(chain, 5, "x", 1, (_entry(0),)))
    for other_chain, slot in ((ChainId(2, 18), 5), (chain, 6)):
        with pytest.raises(CommitFormatError, match="holds"):
            decode_commit(data, other_chain, slot)
    doc = orjson.loads(data)
    doc["entries"][0][5] = 3  # an object index past the list
    with pytest.raises(CommitFormatError, match="malformed entry"):
        decode_commit(orjson.dumps(doc), chain, 5)
    with pytest.raises(CommitFormatError):
        decode_commit(b"{not json", chain, 5)
    bomb = gzip.compress(b" " * (MAX_COMMIT_BYTES + 10))  # small on the wire, too big inflated
    with pytest.raises(CommitFormatError, match="inflates past"):
        decode_commit(bomb, chain, 5)


def test_a_chain_has_one_batch_per_slot_and_reads_forward_to_the_first_gap(any_store: ObjectStore):
    chain = CommitChain(any_store, "p", ChainId(1, 3))
    batches = [CommitBatch(chain.chain, slot, uuid.uuid4().hex, slot, (_entry(slot),)) for slot in range(40)]
    for batch in batches:
        assert chain.append(batch)
    assert not chain.append(CommitBatch(chain.chain, 7, "a rival", 0, (_entry(99),)))
    assert chain.read(7) == batches[7] and chain.read(40) is None
    assert chain.read_from(3) == batches[3:]  # past one window of parallel reads
    assert chain.read_from(40) == []
    assert chain.slots() == list(range(40))
    assert CommitChain(any_store, "p", ChainId(1, 4)).read_from(0) == []  # chains do not mix
    assert chain.delete_below(30) == 30
    assert chain.slots() == list(range(30, 40)) and chain.read_from(30) == batches[30:]
    with pytest.raises(ValueError):
        chain.append(CommitBatch(ChainId(9, 9), 40, "x", 0, ()))


class _LostAnswers:
    """A store whose conditional creates land but answer with an error (a timeout after the
    write), as a lost HTTP response does."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    def put_if_absent(self, key: str, data: bytes) -> str:
        self._store.put_if_absent(key, data)
        raise TimeoutError("the answer was lost")

    def __getattr__(self, name: str):  # noqa: ANN204 - the rest as the real store
        return getattr(self._store, name)


def test_a_create_whose_answer_was_lost_is_settled_by_reading_the_slot_back(any_store: ObjectStore):
    lossy = CommitChain(_LostAnswers(any_store), "p", ChainId(1, 3))  # type: ignore[arg-type]
    mine = CommitBatch(lossy.chain, 0, "mine", 0, (_entry(0),))
    assert lossy.append(mine)  # it landed: ours
    assert not lossy.append(CommitBatch(lossy.chain, 0, "theirs", 0, (_entry(1),)))  # the slot is taken

    class _Down(_LostAnswers):
        def put_if_absent(self, key: str, data: bytes) -> str:
            raise TimeoutError("the bucket did not answer")

    down = CommitChain(_Down(any_store), "p", ChainId(1, 3))  # type: ignore[arg-type]
    with pytest.raises(TimeoutError):
        down.append(CommitBatch(down.chain, 1, "lost", 0, (_entry(2),)))
    assert down.read(1) is None


def test_entries_with_wrong_types_or_impossible_values_are_refused_not_crashed_on():
    chain = ChainId(2, 17)
    good = orjson.loads(encode_commit(CommitBatch(chain, 5, "x", 1, (_entry(0),))))
    for field, value in ((0, 5), (1, -1), (4, 0), (6, -3), (7, 0), (3, "7")):
        doc = orjson.loads(orjson.dumps(good))
        doc["entries"][0][field] = value
        with pytest.raises(CommitFormatError):
            decode_commit(orjson.dumps(doc), chain, 5)
    with pytest.raises(WalFormatError):  # a digit that is not ASCII
        WalKey.parse("diskless/wal/\u00b2/1795942904489-" + "0" * 32 + ".wal")
    with pytest.raises(CommitFormatError):
        ChainId.parse("\u0661-2")
