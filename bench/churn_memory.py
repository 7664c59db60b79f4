"""A broker's memory through topics and clients that come and go: does what they leave behind stay?

    python bench/churn_memory.py [--rounds 12] [--partitions 1000] [--clients 5] [--json FILE]

One broker with its defaults (it freezes what a slow full garbage collection finds alive,
service/gc_policy.py, so whatever it drops in a reference cycle after a freeze is never
freed). Each round creates a topic of ``--partitions`` partitions, writes one record to
each, deletes it, then opens and closes ``--clients`` clients (a consumer in a group of its
own that reads and leaves, the group deleted; a transactional producer committing one
record). The broker's RSS (VmRSS) after each round shows whether it keeps growing.
Stop 72 found deleted logs held for good this way (issue 34's notes).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from foundation import log, machine_info  # noqa: E402

import tests.conftest  # noqa: E402,F401 - the test helpers' import order
from tests.conftest import BrokerProcess, free_port  # noqa: E402


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))


def _topic_round(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=120)[name].result(125)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(partitions):
        producer.produce(name, b"x" * 100, partition=p)
    if producer.flush(60):
        raise RuntimeError(f"records to {name} not acknowledged in 60 s")
    admin.delete_topics([name])[name].result(60)


def _client_round(bootstrap: str, topic: str, round_no: int, clients: int) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(clients):
        group = f"churn-{round_no}-{i}"
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        deadline = time.monotonic() + 10
        while consumer.poll(0.2) is None and time.monotonic() < deadline:
            pass
        consumer.close()
        admin.delete_consumer_groups([group])[group].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": group})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, b"t")
        producer.commit_transaction(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory(prefix="strata-churn-") as tmp:
        work = Path(tmp)
        log(f"machine: {machine_info(work)}")
        sets = {"log.segment.delete.delay.ms": "100", "group.initial.rebalance.delay.ms": "0"}
        broker = BrokerProcess(work / "data", free_port(), sets=sets, log_path=work / "broker.log")
        broker.start()
        rows: list[dict[str, Any]] = []
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("churn-clients", 1, 1)])["churn-clients"].result(30)
            start = _rss_mib(broker.pid)
            log(f"started: RSS {start:.0f} MiB")
            for r in range(args.rounds):
                t0 = time.monotonic()
                _topic_round(broker.bootstrap, f"churn-{r}", args.partitions)
                _client_round(broker.bootstrap, "churn-clients", r, args.clients)
                time.sleep(2)  # the deleted logs' retirement, a slice per turn, is over
                rows.append({"round": r, "rss_mib": round(_rss_mib(broker.pid), 1),
                             "seconds": round(time.monotonic() - t0, 1)})
                log(f"round {r + 1}/{args.rounds}: RSS {rows[-1]['rss_mib']:.0f} MiB ({rows[-1]['seconds']} s)")
        finally:
            broker.stop()
    half = len(rows) // 2
    if half:
        per_round = (rows[-1]["rss_mib"] - rows[half - 1]["rss_mib"]) / (len(rows) - half)
        log(f"RSS {start:.0f} MiB at the start, {rows[-1]['rss_mib']:.0f} after {len(rows)} rounds; "
            f"{per_round:+.1f} MiB a round over the second half")
    if args.json:
        args.json.write_text(json.dumps({"start_rss_mib": start, "rounds": rows}, indent=1))


if __name__ == "__main__":
    main()
