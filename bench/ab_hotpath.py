"""A/B of the single-broker hot path between two checkouts, alternating in one run.

bench/foundation.py measures one checkout against fixed baselines (dd, plain
sendfile); on a 2-core machine shared with other work its latency and consume rows
swing from run to run by more than a change to the produce and fetch paths costs.
This bench answers "did this change make the hot path slower?" by running both
checkouts on the same machine in the same minutes, alternating, and reporting for
each:

- broker CPU per record at a fixed offered load (the figure that does not swing:
  it says whether a request costs more), and p50/p99 produce-to-consume latency,
  for ``--rates`` at producer linger.ms=0 (bench/latency.py, as foundation runs it;
  ``--linger-ms`` for another);
- 16 KiB records consumed with kcat from the page cache (MB/s), with plain sendfile
  of the same segment as a baseline measured between the rounds.

Make the second checkout with ``git worktree add /tmp/base <commit>`` and build its
extension there (``python setup.py build_ext --inplace``)::

    python bench/ab_hotpath.py /tmp/base . --rounds 3 [--linger-ms 5] [--latency-only]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import foundation as fb  # noqa: E402


def start(repo: Path, work: Path, name: str) -> fb.BrokerProcess:
    fb.REPO = repo  # BrokerProcess runs ``python -m service`` from this checkout
    broker = fb.BrokerProcess(work / f"data-{name}", work / f"broker-{name}.log")
    broker.start()
    fb.create_topic(broker.bootstrap, "warm")
    return broker


def latency_round(repo: Path, work: Path, name: str, rate: int, seconds: float, linger_ms: int = 0) -> dict:
    broker = start(repo, work, name)
    try:
        time.sleep(2)
        res = fb.run_latency(broker, work, {"latency_seconds": seconds, "latency_warmup_seconds": 1.0},
                             None, linger_ms, rate=rate, topic=f"ab-{rate}")
    finally:
        broker.stop()
    return {"p50_ms": res["p50_ms"], "p99_ms": res["p99_ms"],
            "cpu_us_per_record": res["broker_cpu_seconds"] / res["records"] * 1e6}


def consume_rounds(repos: dict[str, Path], work: Path, rounds: int, out: dict) -> None:
    """16 KiB records consumed with kcat from each checkout's page cache, plain sendfile between."""
    records = work / "records-16k.txt"
    fb.generate_records(records, 16384, 65536)
    brokers = {}
    try:
        for name in ("A", "B"):
            brokers[name] = start(repos[name], work, f"{name}-consume")
            fb.run_produce(brokers[name], "ab-16k", records, 16384, 65536, None, "ab")
        rows = out["consume"] = {"A": [], "B": [], "sendfile": []}
        for rnd in range(rounds + 1):
            for name in ("A", "B") if rnd % 2 == 0 else ("B", "A"):
                rows[name].append(fb.run_consume_kcat(brokers[name], "ab-16k", 16384, 65536)["mb_per_s"])
            seg = brokers["A"].data_dir / "logs" / "ab-16k-0" / f"{0:020d}.log"
            rows["sendfile"].append(fb.run_sendfile(seg)["mb_per_s"])
    finally:
        for broker in brokers.values():
            broker.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="checkout A (the baseline)")
    ap.add_argument("b", help="checkout B (the change)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rates", default="2000,5000", help="offered loads, records/s")
    ap.add_argument("--linger-ms", type=int, default=0, help="the latency producer's linger.ms")
    ap.add_argument("--latency-only", action="store_true", help="skip the 16 KiB consume rounds")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per latency run")
    ap.add_argument("--work-dir", default="/tmp")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    repos = {"A": Path(args.a).resolve(), "B": Path(args.b).resolve()}
    rates = [int(r) for r in args.rates.split(",") if r]
    work = Path(tempfile.mkdtemp(prefix="strata-ab-", dir=args.work_dir))
    out: dict = {"a": str(repos["A"]), "b": str(repos["B"]), "rounds": args.rounds, "latency": {}, "consume": {}}
    try:
        for rate in rates:
            rows = out["latency"][rate] = {"A": [], "B": []}
            for rnd in range(args.rounds):
                for name in ("A", "B") if rnd % 2 == 0 else ("B", "A"):
                    fb.log(f"latency {rate}/s, round {rnd + 1}, {name}")
                    rows[name].append(latency_round(repos[name], work, f"{name}{rate}{rnd}", rate, args.seconds,
                                                    args.linger_ms))
        if not args.latency_only:
            consume_rounds(repos, work, args.rounds, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = statistics.median

    def p99s(runs: list[dict]) -> str:
        return ", ".join(f"{r['p99_ms']:.1f}" for r in runs)

    print(f"\nA = {repos['A']}\nB = {repos['B']}\n")
    print(f"| load (linger.ms={args.linger_ms}) | broker CPU µs/record A / B | p50 ms A / B | p99 ms A (each run) | p99 ms B (each run) |")
    print("| ---: | ---: | ---: | --- | --- |")
    for rate, rows in out["latency"].items():
        a, b = rows["A"], rows["B"]
        cpu_a = med(r["cpu_us_per_record"] for r in a)
        cpu_b = med(r["cpu_us_per_record"] for r in b)
        p50_a, p50_b = med(r["p50_ms"] for r in a), med(r["p50_ms"] for r in b)
        print(f"| {rate:,}/s | {cpu_a:.0f} / {cpu_b:.0f} | {p50_a:.2f} / {p50_b:.2f} | {p99s(a)} | {p99s(b)} |")
    c = out["consume"]
    if not c:
        return _write(args.json, out)

    def mbs(xs: list[float]) -> str:
        return ", ".join(f"{x:,.0f}" for x in xs) + f" (median {med(xs):,.0f})"

    print(f"\n16 KiB consume (kcat, page cache), MB/s: A {mbs(c['A'])}; B {mbs(c['B'])}; "
          f"plain sendfile {mbs(c['sendfile'])}")
    return _write(args.json, out)


def _write(path: str | None, out: dict) -> int:
    if path:
        Path(path).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
