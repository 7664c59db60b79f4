"""Transactions of 1,000 records of 100 B committed back to back vs the same records without
transactions, one partition, one run (issue #15: target ratio >= 70%).

Starts its own single-node broker (bench/foundation.py's BrokerProcess) and
drives it with confluent-kafka on its defaults (idempotent), plus a
``transactional.id`` for the transactional pass. Each pass produces the same
number of records; throughput is records acknowledged (committed) per second.

    python bench/transactions.py [--transactions 30]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.foundation import BrokerProcess  # noqa: E402

RECORDS_PER_TXN = 1000
VALUE = b"x" * 100


def _produce_plain(bootstrap: str, topic: str, total: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap})
    start = time.perf_counter()
    for _ in range(total):
        while True:
            try:
                p.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0
    return time.perf_counter() - start


def _produce_txn(bootstrap: str, topic: str, transactions: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-txn"})
    p.init_transactions(30)
    start = time.perf_counter()
    for _ in range(transactions):
        p.begin_transaction()
        for _ in range(RECORDS_PER_TXN):
            p.produce(topic, VALUE, partition=0)
        p.commit_transaction(60)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transactions", type=int, default=30)
    args = parser.parse_args()
    total = args.transactions * RECORDS_PER_TXN
    with tempfile.TemporaryDirectory(prefix="strata-bench-txn-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", Path(tmp) / "broker.log")
        broker.start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for name in ("bench-plain", "bench-txn"):
                admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
            _produce_plain(broker.bootstrap, "bench-plain", 2000)  # warm-up
            plain_s = _produce_plain(broker.bootstrap, "bench-plain", total)
            txn_s = _produce_txn(broker.bootstrap, "bench-txn", args.transactions)
        finally:
            broker.stop()
    plain, txn = total / plain_s, total / txn_s
    print(f"records: {total} of {len(VALUE)} B, one partition; transactions of {RECORDS_PER_TXN}")
    print(f"without transactions: {plain:,.0f} records/s ({plain_s:.2f} s)")
    print(f"transactions:         {txn:,.0f} records/s ({txn_s:.2f} s), "
          f"{total / RECORDS_PER_TXN / txn_s:.1f} commits/s")
    print(f"ratio: {txn / plain:.0%} (target >= 70%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
