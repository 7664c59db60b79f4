"""Strata latency sweep: produce-to-consume percentiles against offered load.

    python bench/latency_sweep.py [--quick] [--out docs/benchmarks.md] [--rates 1000,5000,20000,50000]

Starts its own single-node broker (bench/foundation.py's BrokerProcess) and runs
bench/latency.py (a paced confluent-kafka producer, acks=1, linger.ms=1, 100-byte
records stamped with ``time.time_ns()``, and a confluent-kafka consumer in another
process, fetch.wait.max.ms=100) at each offered rate in turn on a fresh topic:
10 s per rate plus 1 s of warm-up that is excluded (3 s + 1 s with ``--quick``).

Writes its section of docs/benchmarks.md between ``<!-- latency-sweep:start -->``
and ``<!-- latency-sweep:end -->`` and docs/benchmarks-latency-sweep.json. Every
figure comes from this run; bench/plots.py draws them against the offered load.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import foundation
from foundation import BrokerProcess, log, machine_info

MARK = "latency-sweep"
RATES = [1000, 5000, 20000, 50000]
LINGER_MS = 1
FULL = {"latency_seconds": 10.0, "latency_warmup_seconds": 1.0, "prewarm_gib": 2}
QUICK = {"latency_seconds": 3.0, "latency_warmup_seconds": 1.0, "prewarm_gib": 0.5}


def write_report(data: dict, md_path: Path) -> None:
    json_path = md_path.with_name("benchmarks-latency-sweep.json")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    m = data["machine"]
    ck = m["confluent_kafka"]
    L = [
        f"<!-- {MARK}:start -->",
        "## Latency against offered load (`bench/latency_sweep.py`)",
        "",
        (f"Command: `{data['command']}` — {data['date']}; {m['nproc']} CPUs {m['cpu_model']}, "
         f"{m['memory_gib']} GiB, Linux {m['kernel']}, Python {m['python']}, confluent-kafka "
         f"{ck.get('confluent_kafka')} (librdkafka {ck.get('librdkafka')}). Broker: `{data['broker']['command']}`. "
         "Raw figures: `docs/benchmarks-latency-sweep.json`; plotted in "
         "[`img/latency-vs-load.png`](img/latency-vs-load.png)."),
        "",
        (f"`bench/latency.py` at each offered rate in turn, on a fresh topic each: a confluent-kafka producer "
         f"(acks=1, linger.ms={LINGER_MS}) paced to the rate with 100-byte records carrying `time.time_ns()` "
         "taken at `produce()`, and a confluent-kafka consumer in another process (fetch.wait.max.ms=100, "
         "fetch.min.bytes=1) that stamps `time.time_ns()` when `poll()` returns the record. "
         f"{data['config']['latency_seconds']:g} s per rate after {data['config']['latency_warmup_seconds']:g} s "
         "of warm-up (excluded). The producer sleeps until each record is due and sends records that fell "
         "behind at once, so above a few thousand records/s it sends small bursts (Python's sleep "
         "resolution is tens of microseconds). Broker, producer and consumer share the same "
         f"{m['nproc']} cores; no baseline, the figures are absolute."),
        "",
        "| offered records/s | achieved records/s | records measured | p50 ms | p99 ms | p99.9 ms | max ms | "
        "mean ms | broker CPU busy |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in data["runs"]:
        L.append(f"| {r['rate_target']:,} | {r['rate_achieved']:,.0f} | {r['measured_records']:,} | "
                 f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['p999_ms']:.2f} | {r['max_ms']:.2f} | "
                 f"{r['mean_ms']:.2f} | {r['broker_busy']:.0%} |")
    L += ["", "Commands (the producer's `--rate` and the topic change per row):", "", "```",
          data["broker"]["command"], data["runs"][0]["command_consumer"], data["runs"][0]["command_producer"],
          "```"]
    if data.get("notes"):
        L += [""] + [f"- {n}" for n in data["notes"]]
    L.append(f"<!-- {MARK}:end -->")
    foundation.write_section(md_path, MARK, "\n".join(L))
    log(f"wrote {md_path} ({MARK} section) and {json_path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 s per rate instead of 10 s")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"))
    ap.add_argument("--work-dir", default="/tmp", help="temporary broker data dir (a real disk)")
    ap.add_argument("--rates", default=",".join(map(str, RATES)),
                    help="offered rates in records/s, comma-separated (default %(default)s)")
    ap.add_argument("--prewarm-gib", type=float, default=None,
                    help="GiB written and deleted through the page cache first (default 2, --quick 0.5)")
    args = ap.parse_args()
    cfg = dict(QUICK if args.quick else FULL)
    rates = [int(x) for x in args.rates.split(",") if x]
    command = "python bench/latency_sweep.py" + (" --quick" if args.quick else "")
    if rates != RATES:
        command += f" --rates {args.rates}"
    if Path(args.out).resolve() != (REPO / "docs" / "benchmarks.md"):
        command += f" --out {args.out}"
    work = Path(tempfile.mkdtemp(prefix="strata-bench-sweep-", dir=args.work_dir))
    data: dict = {"command": command, "mode": "quick" if args.quick else "full",
                  "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                  "machine": machine_info(work), "config": {**cfg, "rates": rates, "linger_ms": LINGER_MS},
                  "notes": []}
    data["prewarm"] = foundation.prewarm_memory(
        work, args.prewarm_gib if args.prewarm_gib is not None else cfg["prewarm_gib"])
    broker = BrokerProcess(work / "data", work / "broker.log")
    started = time.monotonic()
    try:
        broker.start()
        data["broker"] = {"command": shlex.join(broker.cmd)}
        foundation.create_topic(broker.bootstrap, "bench-empty")  # warm up the topic-creation path
        data["runs"] = []
        for i, rate in enumerate(rates):
            log(f"== [{i + 1}/{len(rates)}] latency at {rate:,} records/s for {cfg['latency_seconds']:g} s "
                f"(+{cfg['latency_warmup_seconds']:g} s warm-up)")
            res = foundation.run_latency(broker, work, cfg, None, LINGER_MS, rate=rate,
                                         topic=f"bench-sweep-{rate}")
            res["broker_busy"] = res["broker_cpu_seconds"] / (res["records"] / res["rate_achieved"])
            if res["rate_achieved"] < 0.95 * rate:
                data["notes"].append(f"At {rate:,} records/s offered the producer achieved only "
                                     f"{res['rate_achieved']:,.0f} records/s (it shares the cores with the "
                                     "broker and the consumer).")
            data["runs"].append(res)
        data["broker"]["rss_mib_at_end"] = round(broker.rss_mib(), 1)
    finally:
        foundation.stop_and_clean(broker, data, work)
    quick = "`--quick` run: 3 s per rate; use the full run for figures."
    return foundation.finish_report(data, started, quick if args.quick else None, args.out, write_report)


if __name__ == "__main__":
    sys.exit(main())
