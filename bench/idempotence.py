"""Idempotent vs plain produce: 100-byte records to one partition, in the same run.

    python bench/idempotence.py [--records 1000000] [--rounds 3] [--out docs/benchmarks-idempotence.json]

Starts its own single-node broker (bench/foundation.py's BrokerProcess, a
temporary data dir) and runs ``strata perf produce`` (librdkafka, acks=all,
linger.ms=5) alternately without and with ``enable.idempotence=true``, each
round on a fresh one-partition topic. The figure is the median records/s of
each variant and their ratio (issue 15 asks for at least 90%), with the
broker's CPU seconds per million records. Every figure comes from this run.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

from foundation import BrokerProcess, log, machine_info  # noqa: E402

_RATE = re.compile(r"(\d+) records sent, ([0-9.]+) records/sec")


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)]).values():
        future.result(30)
    time.sleep(0.5)


def produce(b: BrokerProcess, topic: str, records: int, idempotent: bool) -> dict:
    props = ["acks=all", "linger.ms=5"]
    if idempotent:
        props.append("enable.idempotence=true")
    cmd = [sys.executable, "-m", "service", "perf", "produce", "--bootstrap-server", b.bootstrap,
           "--topic", topic, "--num-records", str(records), "--record-size", "100",
           "--producer-props", *props]
    cpu_before = b.cpu_seconds()
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True).stdout
    cpu = b.cpu_seconds() - cpu_before
    sent, rate = _RATE.findall(out)[-1]
    assert int(sent) == records, out
    return {"records_per_s": float(rate), "broker_cpu_s_per_million": cpu * 1e6 / records}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="strata-bench-idem-") as tmp:
        work = Path(tmp)
        b = BrokerProcess(work / "data", work / "broker.log")
        b.start()
        runs: dict[str, list[dict]] = {"plain": [], "idempotent": []}
        try:
            for i in range(args.rounds):
                for variant in ("plain", "idempotent"):
                    topic = f"bench-{variant}-{i}"
                    create_topic(b.bootstrap, topic)
                    result = produce(b, topic, args.records, variant == "idempotent")
                    log(f"round {i} {variant}: {result['records_per_s']:.0f} records/s, "
                        f"broker {result['broker_cpu_s_per_million']:.2f} CPU s per million")
                    runs[variant].append(result)
        finally:
            b.stop()
        plain = statistics.median(r["records_per_s"] for r in runs["plain"])
        idem = statistics.median(r["records_per_s"] for r in runs["idempotent"])
        summary = {
            "records": args.records,
            "rounds": args.rounds,
            "plain_records_per_s": plain,
            "idempotent_records_per_s": idem,
            "ratio": idem / plain,
            "runs": runs,
            "machine": machine_info(work),
        }
    report(summary, args.out)
    return 0


def report(summary: dict, out: Path | None) -> None:
    """Print the figures (not every run, not the machine); write them all as JSON to ``out``."""
    print(json.dumps({k: v for k, v in summary.items() if k not in ("runs", "machine")}, indent=1))
    if out:
        out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
