"""__consumer_offsets is compacted: 20,000 offset commits on the same 1,000 keys keep it
small on disk, and a restart replays about one record per key (bench/compaction.py runs
the 1,000,000-commit version and times the restart)."""

from __future__ import annotations

import re

from tests.conftest import BrokerFactory
from tests.e2e.helpers import create_topic, wait_until
from tests.e2e.rawgroups import offset_commit, offset_fetch
from tests.e2e.rawkafka import Connection

GROUPS = 10
PARTITIONS = 100  # 10 groups x 100 partitions = 1,000 keys
ROUNDS = 20  # x 1,000 keys = 20,000 commits


def _offsets_bytes(data_dir: object) -> int:
    from pathlib import Path

    directory = Path(str(data_dir)) / "logs" / "__consumer_offsets-0"
    return sum(p.stat().st_size for p in directory.iterdir() if p.suffix == ".log")


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
