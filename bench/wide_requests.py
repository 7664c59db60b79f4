"""What a request naming many partitions costs the rest of the broker: the event loop's lag.

    python bench/wide_requests.py [--partitions 600] [--rounds 2] [--json FILE]

One broker (data on /dev/shm when writable, so fsyncs cost nothing and the figures are the
loop's own work), its loop-lag probe every 5 ms and its stall watch at 20 ms. A topic of
``--partitions`` partitions is created, then each step below sends the clients' usual
request for all of them at once. A step waits for the loop to settle first, then reports
how long it took, the most late any probe was (the loop-lag histogram's bucket), and what
the broker's stall watch logged meanwhile (stalls of the loop, garbage collections):

* **create**: CreateTopics of the topic, until every log is open;
* **produce**: one record to every partition in one Produce (kafka-python, linger 500 ms);
* **list offsets**: ListOffsets (latest) of every partition;
* **fetch**: a consumer's first polls of every partition (kafka-python, assigned; its group's
  coordinator, ``__consumer_offsets``, was made before the step);
* **offset commit**: one OffsetCommit of every partition;
* **metrics scrape**: GET /metrics (per-partition families);
* **delete records**: one DeleteRecords (AdminClient) of every partition;
* **delete topic**: DeleteTopics, until every partition directory is gone.

Rounds start a fresh broker each. Stop 68's defects were found this way (issue 34's notes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from foundation import log, machine_info  # noqa: E402

import tests.conftest  # noqa: E402,F401 - the test helpers' import order
from tests.conftest import BrokerProcess, free_port  # noqa: E402
from tests.e2e.helpers import admin, wait_for_topic  # noqa: E402
from tests.e2e.test_loop_lag import PROBE, _lag, _settled  # noqa: E402

SETS = {**PROBE, "event.loop.stall.log.ms": "20"}
TOPIC = "wide"


def _worst_late_ms(before: dict[float, int], after: dict[float, int]) -> float:
    """The upper bound (ms) of the highest loop-lag bucket a probe landed in between the two
    reads of the cumulative histogram (``inf``: beyond its last bound)."""
    worst, below = 0.0, 0
    for bound in sorted(after):
        count = after[bound] - before.get(bound, 0)
        if count > below:
            worst = bound
        below = count
    return worst * 1000


def _told(broker: BrokerProcess, start: int) -> tuple[list[float], list[float]]:
    """The stalls and the garbage collections the broker logged from byte ``start`` on (ms each)."""
    with broker.log_path.open("rb") as f:
        f.seek(start)
        lines = f.read().decode(errors="replace").splitlines()
    stalls = [float(line.split("at least ")[1].split(" ms")[0]) for line in lines if "event loop stalled" in line]
    gcs = [float(line.split("for ")[1].split(" ms")[0]) for line in lines if "garbage collection of" in line]
    return stalls, gcs


def _round(work: Path, partitions: int) -> list[dict[str, Any]]:
    from confluent_kafka import TopicPartition as CTP
    from confluent_kafka.admin import NewTopic
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    broker = BrokerProcess(work / "data", free_port(), sets=SETS, log_path=work / "broker.log")
    broker.start()
    rows: list[dict[str, Any]] = []
    client = admin(broker.bootstrap)
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    consumer: KafkaConsumer | None = None

    def step(name: str, fn: Callable[[], Any]) -> None:
        before = _settled(broker, 60)
        start = broker.log_path.stat().st_size
        t0 = time.monotonic()
        fn()
        took = time.monotonic() - t0
        time.sleep(0.5)
        after = _lag(broker)
        stalls, gcs = _told(broker, start)
        rows.append({"step": name, "seconds": round(took, 3), "worst_probe_late_ms": _worst_late_ms(before, after),
                     "stalls_ms": stalls, "gc_ms": gcs})
        log(f"{name}: {took:.2f} s; worst probe late <= {rows[-1]['worst_probe_late_ms']:g} ms; "
            f"stalls {stalls or '-'}; collections {gcs or '-'}")

    def create() -> None:
        client.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=1)],
                             request_timeout=120)[TOPIC].result(125)
        wait_for_topic(broker.bootstrap, TOPIC, partitions, timeout=120)
        logs = broker.data_dir / "logs"
        while sum(1 for p in logs.iterdir() if p.name.startswith(f"{TOPIC}-")) < partitions:
            time.sleep(0.05)

    def produce() -> None:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=500, acks=1)
        for p in range(partitions):
            producer.send(TOPIC, value=b"x" * 100, partition=p)
        producer.flush()
        producer.close()

    def fetch() -> None:
        assert consumer is not None
        got = 0
        deadline = time.monotonic() + 30
        while got < partitions and time.monotonic() < deadline:
            got += sum(len(r) for r in consumer.poll(timeout_ms=500).values())

    def scrape() -> None:
        with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=30) as r:
            r.read()

    def delete_topic() -> None:
        client.delete_topics([TOPIC])[TOPIC].result(60)
        logs = broker.data_dir / "logs"
        while any(p.name.startswith(TOPIC) for p in logs.iterdir()):
            time.sleep(0.05)

    try:
        step("create", create)
        step("produce", produce)
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="wide", enable_auto_commit=False,
                                 auto_offset_reset="earliest")
        consumer.assign(tps)
        consumer.committed(tps[0])  # its group's coordinator: __consumer_offsets opens now, not in a step
        step("list offsets", lambda: consumer.end_offsets(tps))
        step("fetch", fetch)
        step("offset commit", lambda: consumer.commit({tp: OffsetAndMetadata(1, None, -1) for tp in tps}))
        consumer.close()
        step("metrics scrape", scrape)
        step("delete records", lambda: [f.result(60) for f in client.delete_records(
            [CTP(TOPIC, p, 1) for p in range(partitions)]).values()])
        step("delete topic", delete_topic)
    finally:
        broker.kill()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", help="write every round's rows here")
    args = parser.parse_args()
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    rounds = []
    with tempfile.TemporaryDirectory(dir=base, prefix="strata-wide-") as tmp:
        for n in range(args.rounds):
            log(f"round {n + 1} of {args.rounds}: {args.partitions} partitions")
            work = Path(tmp) / f"round-{n}"
            work.mkdir()
            rounds.append(_round(work, args.partitions))
            shutil.rmtree(work / "data", ignore_errors=True)
        machine = machine_info(Path(tmp))
    print("\n| step | seconds | worst probe late, ms | stalls logged (>= 20 ms), ms | full collections logged, ms |")
    print("| --- | ---: | ---: | --- | --- |")
    for n, rows in enumerate(rounds):
        for row in rows:
            print(f"| {row['step']} (round {n + 1}) | {row['seconds']:.2f} | {row['worst_probe_late_ms']:g} | "
                  f"{', '.join(f'{s:g}' for s in row['stalls_ms']) or '-'} | "
                  f"{', '.join(f'{s:g}' for s in row['gc_ms']) or '-'} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"partitions": args.partitions, "machine": machine,
                                               "rounds": rounds}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
