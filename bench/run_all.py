"""Run the whole benchmark suite on this machine and write one report.

    python bench/run_all.py                 # full run: writes docs/benchmarks.md and its JSON files
    python bench/run_all.py --quick --out /tmp/bench/benchmarks.md    # smoke test, docs/ untouched
    python bench/run_all.py --skip-groups   # or --skip NAME (repeatable)

Runs, one after another as child processes (each starts and stops its own broker,
moto server or NATS server, and measures its baselines in the same run), with their
progress on this terminal:

  1. foundation     bench/foundation.py      produce / consume / latency vs dd and sendfile
  2. tiering        bench/tiering.py         catch-up from the bucket, isolation, upload vs direct GET/PUT
  3. spark          bench/spark_backfill.py  Spark backfill from the bucket vs broker and raw GETs
  4. groups         bench/groups.py          rebalance time, commits/s (skip with --skip-groups)
  5. peers          bench/peers.py           the same produce/consume against NATS JetStream
  6. latency-sweep  bench/latency_sweep.py   latency percentiles against offered load
  7. kafka-peer     bench/kafka_peer.py      the same workloads against Apache Kafka 4.1.2, its
                                             build named by KAFKA_HOME (checked before anything runs)

``--quick`` is passed to each. Each part writes its own section of the report and its
own JSON next to it; at the end this script puts a summary at the top of the report
(every target: required, measured, the baseline of the same run, ratio, met; the
peer comparison; the command, date and duration of each part; the machine), draws
the charts (bench/plots.py, PNG under ``img/`` next to the report) and writes
``benchmarks-summary.json`` holding every part's JSON. A part that fails does not
stop the others (unless ``--fail-fast``); the exit status is then 1.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import foundation  # noqa: E402
from foundation import log  # noqa: E402

MARK = foundation.SUMMARY

# name, script, JSON it writes next to the report, what it measures,
# expected minutes on the 2-core machine (full, --quick), for the progress lines
PARTS = [
    ("foundation", "bench/foundation.py", "benchmarks.json",
     "produce, consume, end-to-end latency vs dd and sendfile", (3, 0.5)),
    ("tiering", "bench/tiering.py", "benchmarks-tiering.json",
     "remote catch-up, isolation, upload vs direct ranged GETs / PUTs (moto S3)", (2.5, 0.6)),
    ("spark", "bench/spark_backfill.py", "benchmarks-spark.json",
     "Spark backfill from the bucket vs a consumer through the broker and raw ranged GETs", (5, 0.6)),
    ("groups", "bench/groups.py", "benchmarks-groups.json",
     "consumer group rebalance time, commits/s, produce under commit load", (1.5, 0.8)),
    ("peers", "bench/peers.py", "benchmarks-peers.json",
     "produce and consume against NATS JetStream", (3, 0.3)),
    ("latency-sweep", "bench/latency_sweep.py", "benchmarks-latency-sweep.json",
     "latency percentiles against offered load", (1, 0.4)),
    ("kafka-peer", "bench/kafka_peer.py", "benchmarks-kafka-peer.json",
     "the same workloads against Apache Kafka 4.1.2 (KAFKA_HOME), alternating", (20, 4)),
]
NAMES = [p[0] for p in PARTS]


# --------------------------------------------------------------------------- running


def run_part(name: str, script: str, args: argparse.Namespace, extra: list[str]) -> dict:
    cmd = [sys.executable, script] + (["--quick"] if args.quick else []) + \
        ["--out", str(args.out_path), "--work-dir", args.work_dir] + extra
    shown = "python " + shlex.join(cmd[1:])
    t0, started = time.monotonic(), _dt.datetime.now(_dt.UTC)
    proc = subprocess.run(cmd, cwd=REPO)
    return {"name": name, "command": shown, "started": started.isoformat(timespec="seconds"),
            "started_ts": started.timestamp(), "seconds": time.monotonic() - t0, "exit_code": proc.returncode}


def fresh_json(path: Path, since: float) -> dict | None:
    """The part's JSON if it was written by this run (after ``since``), else None."""
    try:
        if path.stat().st_mtime < since - 1:
            return None
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- summary rows


def _rate(x: float) -> str:
    return f"{x:,.0f} records/s"


def _mbs(x: float) -> str:
    return f"{x:,.1f} MB/s"


def _target_row(part: str, t: dict, measured: str, baseline: str, ratio: float | None, ratio_text: str = "",
                required: str = "") -> dict:
    unit = t.get("unit", "")
    if not required:
        if unit.startswith("ms"):
            required = f"≤ {t['required']:g} ms"
        elif t.get("kind") == "max" or "at most" in unit:
            required = f"≤ {t['required']:g}"
        elif unit == "ratio":
            required = f"≥ {t['required']:.0%}"
        elif unit == "×":
            required = f"≥ {t['required']:g}×"
        else:
            required = f"≥ {_rate(t['required'])}"
    if ratio is not None and not ratio_text:
        ratio_text = f"{ratio:.0%}"
    return {"part": part, "id": t["id"], "target": t["name"], "required": t["required"],
            "required_text": required, "measured": t["measured"], "measured_text": measured,
            "baseline_text": baseline, "ratio": ratio, "ratio_text": ratio_text or "—", "met": bool(t["met"])}


def _judged(t: dict, goals: dict) -> dict:
    """``t`` judged against the goal its part sets now: a ``--reuse`` summary may show a run made
    when the goal was another (issue 34 raised three)."""
    goal = goals.get(t["id"])
    if goal is None or t.get("measured") is None:
        return t
    name, unit, required = goal[:3]
    at_most = unit.startswith("ms") or "at most" in unit
    met = t["measured"] <= required if at_most else t["measured"] >= required
    return {**t, "name": name, "unit": unit, "required": required, "met": met}


def foundation_rows(d: dict) -> list[dict]:
    prod = {w["record_size"]: w for w in d["produce"]}
    cons = {w["record_size"]: w for w in d["consume"]["runs"]}
    lat = {lt["linger_ms"]: lt for lt in d["latency"]}
    rows = []
    for t in (_judged(t, foundation.TARGETS) for t in d["targets"]):
        tid = t["id"]
        if tid.startswith("produce_"):
            w = prod[100 if tid == "produce_100" else 1024]
            r = w["median"]
            rows.append(_target_row("foundation", t, f"{_rate(r['records_per_s'])}, {_mbs(r['mb_per_s'])}",
                                    f"dd into the page cache: {_mbs(w['dd_median']['mb_per_s'])}",
                                    w["ratio_to_dd"]))
        elif tid.startswith("consume_"):
            w = cons[100 if tid == "consume_100" else 16384]
            r = w["median"]
            base = w.get("sendfile_median")
            rows.append(_target_row("foundation", t, f"{_rate(r['records_per_s'])}, {_mbs(r['mb_per_s'])}",
                                    f"plain sendfile over loopback: {_mbs(base['mb_per_s'])}" if base else "—",
                                    w.get("ratio_to_sendfile")))
        elif tid.startswith("latency_"):
            lt = lat[0 if tid.endswith("linger0") else 1]
            rows.append(_target_row("foundation", t, f"p99 {lt['p99_ms']:.2f} ms (p50 {lt['p50_ms']:.2f}, "
                                    f"p99.9 {lt['p999_ms']:.2f})", "— (absolute target)", None))
    return rows


def tiering_rows(d: dict) -> list[dict]:
    import tiering

    rows = []
    for t in (_judged(t, tiering.TARGETS) for t in d["targets"]):
        if t["id"] == "catchup_vs_direct":
            cu = d["catchup"]
            rows.append(_target_row("tiering", t, f"{_mbs(cu['broker']['object_mb_per_s'])} of segment objects "
                                    f"({_rate(cu['broker']['records_per_s'])})",
                                    f"direct boto3 ranged GETs: {_mbs(cu['direct']['mb_per_s'])}", t["measured"]))
        elif t["id"] == "isolation_p99_ratio":
            iso = d["isolation"]
            layout = d.get("layout", {}).get("name", "shared")
            where = (" (history threads and readers on their own CPU)" if layout == "dedicated"
                     else " (nothing pinned)")
            rows.append(_target_row("tiering", t, f"p99 {iso['loaded']['p99_ms']:.2f} ms with 2 history readers"
                                    + where,
                                    f"the same consumer alone: p99 {iso['alone']['p99_ms']:.2f} ms",
                                    t["measured"], ratio_text=f"{t['measured']:.2f}"))
    return rows


def spark_rows(d: dict) -> list[dict]:
    import spark_backfill

    med, recs = d["median_seconds"], d["history"]["records"]
    rows = []
    for key, (name, unit, need) in spark_backfill.TARGETS.items():
        got = d["ratios"][key]
        t = {"id": key, "name": name, "unit": unit, "required": need, "measured": got, "met": got >= need}
        other = "broker" if key == "spark_vs_broker" else "raw"
        base = (f"confluent-kafka consumer through the broker: {med['broker']:.2f} s" if other == "broker"
                else f"raw boto3 GETs, one per segment object, 2 threads: {med['raw']:.2f} s")
        rows.append(_target_row("spark", t, f"{med['spark']:.2f} s for {recs:,} records with the Strata jar "
                                f"({_rate(recs / med['spark'])})", base, got,
                                ratio_text=f"{got:.2f}×" if unit == "×" else f"{got:.0%}"))
    return rows


def kafka_peer_rows(d: dict) -> list[dict]:
    """Issue 34's three targets against Kafka, each judged by its worst row (bench/kafka_peer_report.py)."""
    import kafka_peer_report

    rows = []
    for t in kafka_peer_report.targets(d):
        rows.append(_target_row("kafka-peer", t, f"worst row: {t['worst']}; {t['rows_met']} of {t['rows']} rows "
                                f"meet it", "Apache Kafka 4.1.2, the same workload in the same run", t["measured"],
                                ratio_text=f"{t['measured']:.2f}×",
                                required=f"{kafka_peer_report.required_text(t)} Kafka's"))
    return rows


ROWS = {"foundation": foundation_rows, "tiering": tiering_rows, "spark": spark_rows, "kafka-peer": kafka_peer_rows}


def comparisons(results: dict) -> list[dict]:
    """Figures compared with a baseline or a peer that carry no target."""
    out = []
    if "tiering" in results:
        up = results["tiering"]["upload"]
        out.append({"part": "tiering", "what": "Upload of sealed segments to the bucket",
                    "strata": _mbs(up["broker"]["steady_mb_per_s"]),
                    "other": f"direct boto3 put_object: {_mbs(up['direct']['steady_mb_per_s'])}",
                    "ratio": up["ratio_steady"], "ratio_text": f"{up['ratio_steady']:.0%}"})
    if "groups" in results:
        c = results["groups"]["commits"]
        out.append({"part": "groups", "what": f"Produce 100 B while {c['members']} consumers commit after every poll",
                    "strata": _rate(c["produce_under_commit_load"]["records_per_s"]),
                    "other": f"the same produce with no consumers: {_rate(c['produce_alone']['records_per_s'])}",
                    "ratio": c["produce_ratio"], "ratio_text": f"{c['produce_ratio']:.0%}"})
    if "peers" in results:
        for w in results["peers"]["workloads"]:
            s, j = w["median"]["strata_python"], w["median"]["jetstream_python"]
            k = w["median"]["strata_kcat"]
            size = foundation.human_size(w["record_size"])
            op = w["op"].capitalize()
            out.append({"part": "peers", "what": f"{op} {size} records, from Python, vs NATS JetStream",
                        "strata": f"{_rate(s['records_per_s'])}, {_mbs(s['mb_per_s'])} (confluent-kafka)",
                        "other": f"JetStream (nats-py): {_rate(j['records_per_s'])}, {_mbs(j['mb_per_s'])}",
                        "ratio": w["ratio"], "ratio_text": f"{w['ratio']:.2f}×"})
            out.append({"part": "peers", "what": f"{op} {size} records, Strata with kcat",
                        "strata": f"{_rate(k['records_per_s'])}, {_mbs(k['mb_per_s'])} (kcat)",
                        "other": f"JetStream (nats-py): {_rate(j['records_per_s'])}",
                        "ratio": w["ratio_kcat"], "ratio_text": f"{w['ratio_kcat']:.2f}×"})
    if "latency-sweep" in results:
        runs = results["latency-sweep"]["runs"]
        out.append({"part": "latency-sweep", "what": "Produce-to-consume p50 / p99 / p99.9 against offered load",
                    "strata": "; ".join(f"{r['rate_target']:,}/s: {r['p50_ms']:.1f} / {r['p99_ms']:.1f} / "
                                        f"{r['p999_ms']:.1f} ms" for r in runs),
                    "other": "— (absolute)", "ratio": None, "ratio_text": "—"})
    return out


# --------------------------------------------------------------------------- report


def write_summary_section(md_path: Path, section: str) -> None:
    """Put the summary block right under the report's title (replacing an old one)."""
    start, end = f"<!-- {MARK}:start -->", f"<!-- {MARK}:end -->"
    old = md_path.read_text() if md_path.exists() else ""
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(old):
        new = pattern.sub(lambda _m: section, old)
    elif old.startswith("# "):
        title, _, rest = old.partition("\n")
        new = title + "\n\n" + section + "\n\n" + rest.lstrip("\n")
    else:
        new = foundation.REPORT_TITLE + "\n\n" + section + "\n\n" + old.lstrip("\n")
    md_path.write_text(new)


def summary_markdown(s: dict) -> str:
    m = s["machine"]
    ck = m["confluent_kafka"]
    fs = m.get("data_dir_filesystem") or {}
    L = [f"<!-- {MARK}:start -->", "## Summary (`bench/run_all.py`)", "",
         ("Generated by `bench/run_all.py`, one command that runs every benchmark below on this machine "
          "(each measures its baseline in the same run) and then writes this summary, the charts and "
          "[`benchmarks-summary.json`](benchmarks-summary.json) (every part's JSON in one file). Each part "
          "below keeps its own section with the exact commands, date and machine of its figures; a part "
          "re-run on its own later updates only its section, so compare its date with this one's."), "",
         f"- **Command:** `{s['command']}` (mode: {s['mode']})",
         f"- **Date:** {s['date']} to {s['finished']} ({s['total_seconds'] / 60:.1f} minutes)",
         (f"- **Machine:** {m['nproc']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB RAM, Linux {m['kernel']}, "
          f"Python {m['python']}, kcat {m['kcat']} (librdkafka {m['kcat_librdkafka']}), confluent-kafka "
          f"{ck.get('confluent_kafka')} (librdkafka {ck.get('librdkafka')}); data on {fs.get('device')} "
          f"({fs.get('type')}). Brokers, object store, peers and load generators all share these cores."),
         "", "| part | measures | command | started (UTC) | minutes | result |",
         "| --- | --- | --- | --- | ---: | --- |"]
    for p in s["parts"]:
        if not p["command"]:
            L.append(f"| {p['name']} | {p['what']} | — | — | — | {p['result']} |")
            continue
        L.append(f"| {p['name']} | {p['what']} | `{p['command']}` | {p['started'][:19].replace('T', ' ')} | "
                 f"{p['seconds'] / 60:.1f} | {p['result']} |")
    L += ["", "### Targets", ""]
    if s["targets"]:
        L += [("Ratio: Strata's figure over the baseline's, both from the same run (for the isolation target, "
               "p99 with readers over p99 alone; for Spark, the baseline's time over Spark's; against Kafka, the "
               "ratio of the workload that meets the target worst)."), "",
              "| part | target | required | measured | baseline, same run | ratio | met |",
              "| --- | --- | --- | --- | --- | ---: | --- |"]
        for r in s["targets"]:
            L.append(f"| {r['part']} | {r['target']} | {r['required_text']} | {r['measured_text']} | "
                     f"{r['baseline_text']} | {r['ratio_text']} | {'**yes**' if r['met'] else '**NO**'} |")
        met = sum(r["met"] for r in s["targets"])
        L += ["", f"{met} of {len(s['targets'])} targets met in this run."]
    else:
        L.append("No part with a target ran in this run.")
    missing = [p["name"] for p in s["parts"] if not p["result"].startswith("ok")]
    L.append("")
    if missing:
        L.append(f"Not measured in this run: {', '.join(missing)} (their targets are not in this table; "
                 "any section of theirs below is from an earlier run, with its own date).")
    if s["comparisons"]:
        L += ["", "### Other comparisons in this run (no target)", "",
              "| part | workload | Strata | compared with | ratio |", "| --- | --- | --- | --- | ---: |"]
        for c in s["comparisons"]:
            L.append(f"| {c['part']} | {c['what']} | {c['strata']} | {c['other']} | {c['ratio_text']} |")
    if s["charts"]:
        L += ["", "### Charts", ""]
        titles = {"throughput": "Throughput against record size (foundation and peers)",
                  "latency": "Latency percentiles against offered load (latency sweep)"}
        for name, path in s["charts"].items():
            L += [f"![{titles.get(name, name)}]({path})", ""]
    L.append(f"<!-- {MARK}:end -->")
    return "\n".join(L)


def peers_missing(parts: set[str]) -> str | None:
    """What a peer part of ``parts`` needs and this machine lacks, said before a run of half an
    hour fails at its end: the JetStream server and client (``peers``), a Kafka 4.1.2 build
    (``kafka-peer``)."""
    checks = []
    if "peers" in parts:
        from peers import nats_missing

        checks.append(("peers", nats_missing))
    if "kafka-peer" in parts:
        from kafka_peer_systems import kafka_missing

        checks.append(("kafka-peer", kafka_missing))
    for name, check in checks:
        if (why := check()) is not None:
            return f"{why}; or leave that part out with --skip {name}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="pass --quick to every part: a smoke test")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"),
                    help="the report; every JSON, benchmarks-summary.json and img/ go next to it")
    ap.add_argument("--work-dir", default="/tmp", help="temporary data dirs of every part (a real disk)")
    ap.add_argument("--skip", action="append", default=[], choices=NAMES, metavar="NAME",
                    help=f"leave a part out (repeatable): {', '.join(NAMES)}")
    ap.add_argument("--skip-groups", action="store_true", help="same as --skip groups")
    ap.add_argument("--reuse", action="store_true",
                    help="put the skipped parts' last figures (their JSON beside the report) in the summary, "
                         "marked as from an earlier run: re-run one part and refresh the summary")
    ap.add_argument("--fail-fast", action="store_true", help="stop at the first part that fails")
    args = ap.parse_args()
    args.out_path = Path(args.out).resolve()
    args.out_path.parent.mkdir(parents=True, exist_ok=True)
    skip = set(args.skip) | ({"groups"} if args.skip_groups else set())
    command = "python bench/run_all.py" + (" --quick" if args.quick else "")
    if args.out_path != (REPO / "docs" / "benchmarks.md"):
        command += f" --out {args.out}"
    for name in sorted(skip, key=NAMES.index):
        command += f" --skip {name}"
    if args.reuse:
        command += " --reuse"

    todo = [p for p in PARTS if p[0] not in skip]
    if (missing := peers_missing({p[0] for p in todo})) is not None:
        log(f"ERROR: {missing}")
        return 2
    expected = sum(p[4][1 if args.quick else 0] for p in todo)
    start = _dt.datetime.now(_dt.UTC)
    t0 = time.monotonic()
    log(f"running {len(todo)} benchmarks ({'quick' if args.quick else 'full'}), expected ~{expected:g} minutes "
        f"on a 2-core machine; report {args.out_path}")
    parts, results = [], {}
    warmed = False
    for i, (name, script, json_name, what, minutes) in enumerate(todo):
        extra = []
        if warmed and name in ("peers", "latency-sweep"):
            extra = ["--prewarm-gib", "0"]  # foundation already pre-warmed this machine's memory
        log(f"===== [{i + 1}/{len(todo)}] {name}: {what} (expected ~{minutes[1 if args.quick else 0]:g} min; "
            f"{(time.monotonic() - t0) / 60:.1f} min elapsed)")
        part = run_part(name, script, args, extra)
        # foundation's JSON is the report's name with .json; the others' names are fixed
        json_path = (args.out_path.with_suffix(".json") if name == "foundation"
                     else args.out_path.parent / json_name)
        data = fresh_json(json_path, part["started_ts"])
        part["what"] = what
        part["json"] = json_path.name
        if part["exit_code"] == 0 and data is not None:
            part["result"] = "ok"
            results[name] = data
            warmed = warmed or name == "foundation"
        else:
            part["result"] = f"FAILED (exit {part['exit_code']})" if part["exit_code"] else "FAILED (no JSON)"
        parts.append(part)
        log(f"===== {name}: {part['result']} after {part['seconds'] / 60:.1f} min")
        if part["result"] != "ok" and args.fail_fast:
            break
    ran = {p["name"] for p in parts}
    if args.reuse:  # a skipped part's figures from its last run, said so with their own date
        for name, _, json_name, what, _ in PARTS:
            if name in ran or name not in skip:
                continue
            json_path = (args.out_path.with_suffix(".json") if name == "foundation"
                         else args.out_path.parent / json_name)
            try:
                data = json.loads(json_path.read_text())
            except (OSError, ValueError):
                continue
            results[name] = data
            parts.append({"name": name, "command": data.get("command", ""), "started": data.get("date", ""),
                          "seconds": float(data.get("total_seconds") or 0.0), "exit_code": 0, "what": what,
                          "json": json_path.name, "result": f"ok (earlier run, {str(data.get('date', '?'))[:10]})"})
            ran.add(name)
    parts += [{"name": name, "command": "", "started": "", "seconds": 0.0, "exit_code": None, "what": what,
               "result": "skipped" if name in skip else "not run (--fail-fast)"}
              for name, _, _, what, _ in PARTS if name not in ran]
    parts.sort(key=lambda p: NAMES.index(p["name"]))

    import plots

    charts = {}
    try:
        charts = plots.make_plots(args.out_path)
    except Exception as exc:  # a chart must not cost the summary
        log(f"WARNING: charts failed: {exc!r}")
    targets = []
    for name, fn in ROWS.items():
        if name in results:
            targets += fn(results[name])
    work = Path(tempfile.mkdtemp(prefix="strata-bench-all-", dir=args.work_dir))
    machine = foundation.machine_info(work)
    work.rmdir()
    finished = _dt.datetime.now(_dt.UTC)
    summary = {"command": command, "mode": "quick" if args.quick else "full",
               "date": start.isoformat(timespec="seconds"), "finished": finished.isoformat(timespec="seconds"),
               "total_seconds": time.monotonic() - t0, "machine": machine,
               "parts": [{k: v for k, v in p.items() if k != "started_ts"} for p in parts],
               "targets": targets, "comparisons": comparisons(results), "charts": charts, "results": results}
    summary_path = args.out_path.with_name("benchmarks-summary.json")
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    write_summary_section(args.out_path, summary_markdown(summary))
    log(f"wrote the summary at the top of {args.out_path}, {summary_path}"
        + (f" and {', '.join(charts.values())}" if charts else ""))
    for r in targets:
        log(f"  {r['part']}: {r['target']}: {r['measured_text']} (need {r['required_text']}; ratio "
            f"{r['ratio_text']}) {'met' if r['met'] else 'MISSED'}")
    failed = [p["name"] for p in parts if p["result"].startswith("FAILED")]
    log(f"done in {summary['total_seconds'] / 60:.1f} min" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
