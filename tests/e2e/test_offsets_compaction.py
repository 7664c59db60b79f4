"""The coordinators' topics are compacted. __consumer_offsets: 20,000 offset commits on the
same 1,000 keys keep it small on disk, and a restart replays about one record per key
(bench/compaction.py runs the 1,000,000-commit version and times the restart).
__transaction_state: cleaned down to about a record per transactional id, with the
coordinator's state intact across a restart."""

from __future__ import annotations

import re

from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource
from kafka.admin import KafkaAdminClient

from tests.conftest import BrokerFactory
from tests.e2e.helpers import admin, create_topic, produce_values, wait_until, watermarks
from tests.e2e.rawgroups import offset_commit, offset_fetch
from tests.e2e.rawkafka import Connection

GROUPS = 10
PARTITIONS = 100  # 10 groups x 100 partitions = 1,000 keys
ROUNDS = 20  # x 1,000 keys = 20,000 commits


def _offsets_bytes(data_dir: object) -> int:
    from pathlib import Path

    return _log_bytes(Path(str(data_dir)) / "logs" / "__consumer_offsets-0")


def _log_bytes(directory: object) -> int:
    """The ``.log`` files' bytes in a partition directory the cleaner may be swapping files
    in meanwhile (a segment listed may be gone by the time it is measured: it counts 0)."""
    from pathlib import Path

    total = 0
    for p in Path(str(directory)).glob("*.log"):
        try:
            total += p.stat().st_size
        except FileNotFoundError:
            pass
    return total


def test_offset_commits_on_the_same_keys_keep_the_offsets_topic_bounded(start_broker: BrokerFactory) -> None:
    broker = start_broker(sets={
        "offsets.topic.num.partitions": "1",
        "offsets.topic.segment.bytes": "65536",
        "log.cleaner.backoff.ms": "100",
    })
    create_topic(broker.bootstrap, "t", partitions=PARTITIONS, config={"remote.storage.enable": "false"})
    written = 0
    with Connection.to(broker.bootstrap) as conn:
        for round_ in range(ROUNDS):
            for g in range(GROUPS):
                offsets = {("t", p): round_ * 1000 + p for p in range(PARTITIONS)}
                codes = offset_commit(conn, f"group-{g}", -1, "", offsets)
                assert set(codes.values()) == {0}
                written += len(offsets)
    assert written == 20_000
    # about 50 bytes a commit were appended: 1 MB; the cleaner keeps a few 64 KiB segments of it
    bounded = wait_until(lambda: (size := _offsets_bytes(broker.data_dir)) < 400_000 and size,
                         "__consumer_offsets to be compacted", timeout=60, interval=0.5)
    broker.restart()

    def replayed() -> list[str]:
        restart = broker.log_text().rsplit("strata test harness: start #2", 1)[-1]
        return re.findall(r"from (\d+) __consumer_offsets record", restart)

    loaded = int(wait_until(replayed, "the coordinator to load the groups", timeout=30)[0])
    assert loaded < 10_000, f"the restart replayed {loaded} records ({bounded} bytes on disk)"
    with Connection.to(broker.bootstrap) as conn:
        for g in range(GROUPS):
            error, fetched = offset_fetch(conn, f"group-{g}", {"t": list(range(PARTITIONS))})
            assert error == 0
            assert fetched == {("t", p): (ROUNDS - 1) * 1000 + p for p in range(PARTITIONS)}


def _describe(bootstrap: str, tids: list[str]) -> dict[str, tuple[str, int, int, list[str]]]:
    """transactional id -> (state, producer id, epoch, partitions in its transaction)."""
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {tid: (str(d.state.value), d.producer_id, d.producer_epoch,
                      sorted(f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions))
                for tid, d in client.describe_transactions(tids).items()}
    finally:
        client.close()


def test_transaction_state_is_compacted_and_its_cleaning_keeps_the_coordinators_state(
    start_broker: BrokerFactory,
) -> None:
    """__transaction_state is created compacted; 90 transactions on three ids clean down to
    about a record per id, and after a restart the coordinator describes every id as before
    (committed, aborted, open) and fences on from the same producer ids."""
    broker = start_broker(sets={
        "transaction.state.log.num.partitions": "1",
        "transaction.state.log.segment.bytes": "1024",
        "log.cleaner.min.cleanable.ratio": "0.01",
        "log.cleaner.backoff.ms": "100",
    })
    b = broker.bootstrap
    create_topic(b, "txn-data", config={"remote.storage.enable": "false"})
    tids = ["committed", "aborted", "open"]
    producers = {tid: Producer({"bootstrap.servers": b, "transactional.id": tid}) for tid in tids}
    for tid, p in producers.items():
        p.init_transactions(30)
        for i in range(30):
            p.begin_transaction()
            p.produce("txn-data", b"%s-%d" % (tid.encode(), i), partition=0)
            if i < 29:
                p.commit_transaction(30)
                continue
            p.flush(30)  # in the log, so the coordinator has a transaction to end
            if tid == "aborted":
                p.abort_transaction(30)
            elif tid == "committed":
                p.commit_transaction(30)  # and "open" is left open
    client = admin(b)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "__transaction_state")
    configs = client.describe_configs([resource])[resource].result(timeout=30)
    assert configs["cleanup.policy"].value == "compact"
    before = wait_until(lambda: (d := _describe(b, tids)) and [d[t][0] for t in tids] == [
        "CompleteCommit", "CompleteAbort", "Ongoing"] and d, "the abort to complete")
    assert before["open"][3] == ["txn-data-0"]

    state_dir = broker.data_dir / "logs" / "__transaction_state-0"
    written = watermarks(b, "__transaction_state")[1]  # records: 3 or so per transaction

    def on_disk() -> int:
        return _log_bytes(state_dir)

    # cleaned: a few hundred bytes, the active segment (< segment.bytes) and at most one dirty one
    wait_until(lambda: on_disk() < 3000, "__transaction_state to be compacted", timeout=60, interval=0.5)
    assert written > 270
    broker.restart(clean=False)  # kill -9: the state comes back from the cleaned log alone

    def replayed() -> list[tuple[str, str]]:
        restart = broker.log_text().rsplit("strata test harness: start #2", 1)[-1]
        return re.findall(r"loaded (\d+) transactional id\(s\) from (\d+) record", restart)

    ids, records = map(int, wait_until(replayed, "the coordinator to load __transaction_state", timeout=30)[0])
    assert ids == 3 and records < 40, f"{records} of {written} records replayed"
    assert _describe(b, tids) == before
    again = Producer({"bootstrap.servers": b, "transactional.id": "committed"})
    again.init_transactions(30)  # the same producer id, one epoch on
    assert _describe(b, ["committed"])["committed"][1:3] == (before["committed"][1], before["committed"][2] + 1)
    produce_values(b, "txn-data", [b"after"])  # the partition is writable; the open one is still open
    assert _describe(b, ["open"])["open"][0] == "Ongoing"
