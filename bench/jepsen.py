"""A Jepsen-style fault suite for a three-broker Strata cluster (issue 31).

    python bench/jepsen.py                                  # every nemesis, one round each
    python bench/jepsen.py --nemeses kill-controller,isolate --duration 60 --rounds 3
    python bench/jepsen.py --fast --duration 20 --out /tmp/jepsen.json   # FAST timings (3 s lease)

Each round of each nemesis starts three brokers (``python -m service up`` of this tree),
each in its own network namespace with nftables cuts (as root; otherwise on loopback with
per-broker proxies), sharing a moto S3 server that is reached over the same network so
it can be cut off; runs idempotent acks=all producers, a consumer group and transactional
producers against a replication factor 3, ``min.insync.replicas=2`` topic; makes the
nemesis's fault again and again for ``--duration`` seconds; heals; reads everything back
and checks it (bench/jepsen_suite/checker.py has the definitions). Writes the JSON of every
round to ``--out`` and the markdown table next to it (``.md``), and prints the table.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from bench.jepsen_suite.nemesis import NEMESES  # noqa: E402
from bench.jepsen_suite.runner import RoundConfig, run_round  # noqa: E402

COLUMNS = ("nemesis", "rounds", "faults", "acked", "lost", "duplicated", "rewritten by new epoch", "conflicts",
           "aborted-read", "partial-txn", "offset-regressions", "max unavailability s", "recovery median / max s")


def summarize(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per nemesis over its rounds: counts summed, the worst unavailability, the
    median and max of every fault's recovery."""
    rows = []
    for name in dict.fromkeys(r["nemesis"] for r in rounds):
        mine = [r for r in rounds if r["nemesis"] == name]
        recov = [f["recovery_s"] for r in mine for f in r.get("faults", []) if "recovery_s" in f]
        row: dict[str, Any] = {"nemesis": name, "rounds": len(mine),
                               "faults": sum(len(r.get("faults", [])) for r in mine)}
        for key in ("acked", "lost", "duplicated", "rewritten_by_new_epoch", "conflicts", "aborted_read",
                    "partial_txn", "offset_regressions"):
            row[key] = sum(r.get(key, 0) for r in mine)
        row["failed"] = [r["error"] for r in mine if "error" in r]
        row["max_unavailability_s"] = max((r.get("max_unavailability_s", 0) for r in mine), default=0)
        row["recovery_median_s"] = round(statistics.median(recov), 2) if recov else None
        row["recovery_max_s"] = round(max(recov), 2) if recov else None
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "| --- |" + " ---: |" * (len(COLUMNS) - 1)]
    for r in rows:
        recovery = ("-" if r["recovery_median_s"] is None
                    else f"{r['recovery_median_s']:.1f} / {r['recovery_max_s']:.1f}")
        name = r["nemesis"] + (f" (failed: {r['failed'][0][:60]})" if r["failed"] else "")
        cells = [name, r["rounds"], r["faults"], r["acked"], r["lost"], r["duplicated"],
                 r["rewritten_by_new_epoch"], r["conflicts"],
                 r["aborted_read"], r["partial_txn"], r["offset_regressions"],
                 f"{r['max_unavailability_s']:.1f}", recovery]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nemeses", default=",".join(NEMESES),
                    help=f"comma-separated, each its own round (default: all): {', '.join(NEMESES)}; "
                         "join names with '+' to alternate them within one round")
    ap.add_argument("--duration", type=float, default=40.0, help="seconds of faults per round (default 40)")
    ap.add_argument("--fault-s", type=float, default=10.0, help="how long each fault is held (default 10)")
    ap.add_argument("--rest-s", type=float, default=8.0, help="calm between faults (default 8)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of each nemesis (default 1)")
    ap.add_argument("--partitions", type=int, default=6, help="partitions of the main topic (default 6)")
    ap.add_argument("--rate", type=float, default=100.0, help="records/s of all idempotent producers (default 100)")
    ap.add_argument("--fast", action="store_true",
                    help="the test suite's FAST timings (3 s lease and sessions) instead of the defaults")
    ap.add_argument("--network", choices=("auto", "netns", "proxy"), default="auto",
                    help="namespaces + nftables (needs root, ip, nft), loopback proxies, or whichever works")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a broker config, repeatable")
    ap.add_argument("--out", type=Path, default=Path("jepsen-results.json"),
                    help="JSON of every round; the markdown table goes next to it as .md")
    ap.add_argument("--work-dir", type=Path, default=None, help="brokers' data and logs (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=1, help="seed of target choice and transaction outcomes")
    args = ap.parse_args(argv)
    nemeses = [n for n in args.nemeses.split(",") if n]
    for n in nemeses:
        unknown = [part for part in n.split("+") if part not in NEMESES]
        if unknown:
            ap.error(f"unknown nemesis {unknown[0]!r}; known: {', '.join(NEMESES)}")
    sets = dict(s.split("=", 1) for s in args.set)
    started, t0 = _dt.datetime.now().isoformat(timespec="seconds"), time.monotonic()
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for i, name in enumerate(nemeses):
            print(f"round {r + 1}/{args.rounds}, nemesis {name} ({i + 1}/{len(nemeses)})", flush=True)
            cfg = RoundConfig(nemeses=name.split("+"), name=name, duration_s=args.duration, fault_s=args.fault_s,
                              rest_s=args.rest_s, partitions=args.partitions, rate=args.rate, fast=args.fast,
                              network=args.network, work_dir=args.work_dir, seed=args.seed + r * 100 + i,
                              sets=sets, log=lambda s: print(s, flush=True))
            try:
                result = run_round(cfg)
            except Exception as exc:  # noqa: BLE001 - one failed round must not lose the others
                result = {"nemesis": name, "error": f"{type(exc).__name__}: {exc}"}
            rounds.append(result)
            print(f"  -> acked {result.get('acked')}, lost {result.get('lost')}, duplicated "
                  f"{result.get('duplicated')} (+{result.get('rewritten_by_new_epoch')} rewritten by a new epoch), "
                  f"conflicts {result.get('conflicts')}, max unavailability "
                  f"{result.get('max_unavailability_s')} s{'; ' + result['error'] if 'error' in result else ''}",
                  flush=True)
    rows = summarize(rounds)
    table = markdown(rows)
    report = {"command": "python bench/jepsen.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "started": started, "duration_s": round(time.monotonic() - t0, 1),
              "machine": {"cores": os.cpu_count(), "platform": platform.platform()},
              "summary": rows, "rounds": rounds}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    args.out.with_suffix(".md").write_text(table)
    print("\n" + table + f"\nJSON: {args.out}; table: {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
