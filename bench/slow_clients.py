"""A normal producer's latency while slow and lying clients attack one broker (issue #36).

    python bench/slow_clients.py [--seconds 20] [--rate 200] [--json PATH]

One broker process on its defaults (request memory 256 MiB, requests up to 100 MiB,
``request.receive.min.rate.bytes`` 16 KiB/s after ``request.receive.grace.ms`` 5 s).
Phases of ``--seconds`` each, in one run: no attack (the baseline), then each attack of
tests/e2e/slow_clients.py alone (three connections that declare 100 MiB and stall;
three that send one byte every 4 s; a frame fuzzer), then all three together. In each,
a confluent-kafka producer on its defaults sends ``--rate`` records a second, and a new
connection's ApiVersions is timed at the start and the end. Reported: delivery p50,
p99 and max, records lost, the ApiVersions waits, connections the broker closed.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.conftest import BrokerProcess, free_port  # noqa: E402
from tests.e2e.slow_clients import api_versions_seconds, drip, fuzz, measure_produce, stall  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="strata-slow-clients-"))
    broker = BrokerProcess(work / "data", free_port(), sets={"auto.create.topics.enable": "false"},
                           log_path=work / "broker.log").start()
    phases = {"none": [], "stall": ["stall"], "drip": ["drip"], "fuzz": ["fuzz"],
              "all three": ["stall", "drip", "fuzz"]}
    rows = []
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = [f"normal-{i}" for i in range(len(phases))] + ["fuzzed"]
        for fut in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
            fut.result(30)
        for i, (name, kinds) in enumerate(phases.items()):
            print(f"phase {name}: {args.seconds:g} s at {args.rate}/s", flush=True)
            make = {"stall": lambda: stall(broker.bootstrap), "drip": lambda: drip(broker.bootstrap),
                    "fuzz": lambda: fuzz(broker.bootstrap, "fuzzed")}
            attacks = [make[k]() for k in kinds]
            try:
                probe_start = api_versions_seconds(broker.bootstrap)
                res = measure_produce(broker.bootstrap, f"normal-{i}", args.seconds, args.rate)
                probe_end = api_versions_seconds(broker.bootstrap)
            finally:
                for attack in attacks:
                    attack.stop()
            row = {"attack": name, "sent": res.sent, "delivered": res.delivered, "failed": res.failed,
                   "p50_ms": round(res.percentile(50), 1), "p99_ms": round(res.percentile(99), 1),
                   "max_ms": round(max(res.latencies_ms, default=float("inf")), 1),
                   "api_versions_s": [round(probe_start, 3), round(probe_end, 3)],
                   "closed_by_broker": {a.name: a.closed_by_broker for a in attacks}}
            print(f"  {row}", flush=True)
            rows.append(row)
        alive = broker.running
    finally:
        broker.stop()
    print("\n| attack | records sent / delivered | p50 ms | p99 ms | max ms | ApiVersions wait s | closed by the broker |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    for r in rows:
        print(f"| {r['attack']} | {r['sent']} / {r['delivered']} | {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} | "
              f"{r['api_versions_s'][0]:.3f}, {r['api_versions_s'][1]:.3f} | {r['closed_by_broker'] or '-'} |")
    result = {"command": " ".join([sys.executable, *sys.argv]), "machine": platform.platform(),
              "broker_alive": alive, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if alive and all(r["failed"] == 0 and r["delivered"] == r["sent"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
