"""Transactions of 1,000 records of 100 B committed back to back vs the same records without
transactions, one partition, in the same run (issue #15: target ratio >= 70%).

    python bench/transactions.py [--transactions 100] [--rounds 7] [--profile DIR] [--out FILE.json]
                                 [--java-client DIR [--java-records 1000000]]

Starts its own single-node broker (bench/foundation.py's BrokerProcess) and
drives it with confluent-kafka from this process: one producer without and one
with a ``transactional.id``, both created and warmed up before timing. The plain
producer is on librdkafka's defaults: acks=all but *not* idempotent
(``enable.idempotence=false``) and up to 1,000,000 requests in flight per
connection; the transactional one is idempotent, as a ``transactional.id``
forces, with at most 5 in flight. So the baseline differs in idempotence as well
as in transactions (idempotence alone costs ~1%, ``bench/idempotence.py``). Each round times the same number of records through
each (alternating which goes first, so a busy machine weighs on both alike);
the figure is the median records/s of each and their ratio. Also reported, from
the broker: its CPU per 1,000 records in each mode, how often it answered
CONCURRENT_TRANSACTIONS, and the mean time it took to answer AddPartitionsToTxn,
Produce and EndTxn (its ``/metrics``). ``--profile DIR`` records the broker
with py-spy during the transactional passes. Every figure comes from this run.

``--java-client DIR`` (a directory holding ``kafka-clients-*.jar`` and its ``lib/``, as
``shared/tools/java-client/build.sh`` builds it) also runs the same comparison with the
Apache Kafka Java client (``bench/java/TxnBench.java``, compiled with ``javac`` at the
start): a default producer (idempotent, acks=all) sending ``--java-records`` records and
flushing, against transactions of 1,000 records committed back to back, alternating, one
JVM per round, each on a fresh topic; records/s and the broker's CPU of each.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from confluent_kafka import Producer
from foundation import BrokerProcess, Profiler, java_classpath, log, machine_info
from idempotence import create_topic, report

RECORDS_PER_TXN = 1000
VALUE = b"x" * 100
_TIMED_APIS = ("AddPartitionsToTxn", "Produce", "EndTxn")


def _produce_plain(p: Producer, topic: str, total: int) -> None:
    for _ in range(total):
        while True:
            try:
                p.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0


def _produce_txn(p: Producer, topic: str, transactions: int) -> None:
    for _ in range(transactions):
        p.begin_transaction()
        for _ in range(RECORDS_PER_TXN):
            p.produce(topic, VALUE, partition=0)
        p.commit_transaction(60)


def _metrics(b: BrokerProcess) -> str:
    http = b.cmd[b.cmd.index("--http") + 1]
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as resp:
        return resp.read().decode()


def _broker_counters(b: BrokerProcess) -> dict[str, float]:
    """CONCURRENT_TRANSACTIONS answers, and per timed API its request count and seconds."""
    out: dict[str, float] = {"concurrent_transactions": 0.0}
    for line in _metrics(b).splitlines():
        if line.startswith(("strata_kafka_request_errors", "strata_kafka_request_expected_errors")) \
                and 'error="CONCURRENT_TRANSACTIONS"' in line:
            out["concurrent_transactions"] += float(line.rsplit(" ", 1)[1])
        m = re.match(r'strata_kafka_request_duration_seconds_(sum|count)\{api="(\w+)"\} (\S+)', line)
        if m and m.group(2) in _TIMED_APIS:
            out[f"{m.group(2)}_{m.group(1)}"] = float(m.group(3))
    return out


def _timed(b: BrokerProcess, run) -> tuple[float, float]:
    """(wall seconds, broker CPU seconds) of ``run()``."""
    cpu, start = b.cpu_seconds(), time.perf_counter()
    run()
    return time.perf_counter() - start, b.cpu_seconds() - cpu


def java_rounds(b: BrokerProcess, client: Path, work: Path, records: int, rounds: int) -> dict:
    """The Java client's plain and transactional rounds (see the module docstring)."""
    classpath = java_classpath(client, work / "java-classes", "TxnBench.java")
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "transactions": []}
    for i in range(rounds):
        order = ("plain", "transactions") if i % 2 == 0 else ("transactions", "plain")
        for mode in order:
            topic = f"bench-java-{mode}-{i}"
            create_topic(b.bootstrap, topic)
            cpu = b.cpu_seconds()
            out = subprocess.run(
                ["java", "-cp", classpath, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "TxnBench",
                 b.bootstrap, "txn" if mode == "transactions" else "plain", topic, str(records),
                 str(RECORDS_PER_TXN)],
                capture_output=True, text=True, check=True,
            ).stdout
            cpu = b.cpu_seconds() - cpu
            _, sent, seconds, errors = next(line for line in out.splitlines() if line.startswith("RESULT")).split()
            assert int(errors) == 0, out
            rate = int(sent) / float(seconds)
            runs[mode].append({"records_per_s": rate, "broker_cpu_ms_per_1000": cpu * 1e6 / int(sent)})
            log(f"java round {i} {mode}: {rate:,.0f} records/s")
    plain = statistics.median(r["records_per_s"] for r in runs["plain"])
    txn = statistics.median(r["records_per_s"] for r in runs["transactions"])
    return {"client": "Apache Kafka Java client (" + sorted(client.glob("kafka-clients-*.jar"))[-1].name + ")",
            "records_per_round": records, "plain_records_per_s": plain, "transactions_records_per_s": txn,
            "ratio": txn / plain,
            "broker_cpu_ms_per_1000_records": {
                mode: statistics.median(r["broker_cpu_ms_per_1000"] for r in rs) for mode, rs in runs.items()
            },
            "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transactions", type=int, default=100, help="per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", type=Path, default=None, help="py-spy the transactional passes here")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    parser.add_argument("--java-client", type=Path, default=None,
                        help="also run the Java client's rounds (a directory with kafka-clients-*.jar, lib/)")
    parser.add_argument("--java-records", type=int, default=1_000_000, help="per Java round")
    args = parser.parse_args()
    java: dict | None = None
    total = args.transactions * RECORDS_PER_TXN
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "transactions": []}
    with tempfile.TemporaryDirectory(prefix="strata-bench-txn-") as tmp:
        work = Path(tmp)
        b = BrokerProcess(work / "data", work / "broker.log")
        b.start()
        try:
            for name in ("bench-plain", "bench-txn"):
                create_topic(b.bootstrap, name)
            plain = Producer({"bootstrap.servers": b.bootstrap})
            txn = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "bench-txn"})
            txn.init_transactions(30)
            _produce_plain(plain, "bench-plain", 2 * RECORDS_PER_TXN)  # warm-up: connections, ids
            _produce_txn(txn, "bench-txn", 2)
            before = _broker_counters(b)
            for i in range(args.rounds):
                order = ("plain", "transactions") if i % 2 == 0 else ("transactions", "plain")
                for mode in order:
                    if mode == "plain":
                        wall, cpu = _timed(b, lambda: _produce_plain(plain, "bench-plain", total))
                    else:
                        with Profiler(b.proc.pid, args.profile, f"transactions-{i}"):
                            wall, cpu = _timed(b, lambda: _produce_txn(txn, "bench-txn", args.transactions))
                    runs[mode].append({"records_per_s": total / wall,
                                       "broker_cpu_ms_per_1000": cpu * 1000 * RECORDS_PER_TXN / total})
                    log(f"round {i} {mode}: {total / wall:,.0f} records/s")
            after = _broker_counters(b)
            if args.java_client is not None:
                java = java_rounds(b, args.java_client, work, args.java_records, min(args.rounds, 5))
                log(f"java: transactions / plain = {java['ratio']:.2f}")
        finally:
            b.stop()
        plain_rate = statistics.median(r["records_per_s"] for r in runs["plain"])
        txn_rate = statistics.median(r["records_per_s"] for r in runs["transactions"])
        answered = {
            api: (after.get(f"{api}_sum", 0) - before.get(f"{api}_sum", 0))
            / max(1.0, after.get(f"{api}_count", 0) - before.get(f"{api}_count", 0)) * 1e6
            for api in _TIMED_APIS
        }
        summary = {
            "records_per_round": total,
            "records_per_transaction": RECORDS_PER_TXN,
            "rounds": args.rounds,
            "plain_records_per_s": plain_rate,
            "transactions_records_per_s": txn_rate,
            "commits_per_s": txn_rate / RECORDS_PER_TXN,
            "ratio": txn_rate / plain_rate,
            "round_ratios": [t["records_per_s"] / p["records_per_s"]
                             for p, t in zip(runs["plain"], runs["transactions"], strict=True)],
            "broker_cpu_ms_per_1000_records": {
                mode: statistics.median(r["broker_cpu_ms_per_1000"] for r in rs) for mode, rs in runs.items()
            },
            "concurrent_transactions_answers": after["concurrent_transactions"] - before["concurrent_transactions"],
            "broker_mean_answer_us": answered,
            "runs": runs,
            "java_client": java,
            "machine": machine_info(work),
        }
    report(summary, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
