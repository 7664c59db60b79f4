"""The report of ``bench/kafka_peer.py``: medians and ratios of its runs, and its section of
docs/benchmarks.md (between ``<!-- kafka-peer:start -->`` and ``<!-- kafka-peer:end -->``)
with the raw figures in docs/benchmarks-kafka-peer.json.

Kept apart from the runner so the formatting can be checked on a made-up result without
starting any broker (tests/test_kafka_peer_bench.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import guest_memory

MARK = "kafka-peer"
SYSTEMS = ("strata", "kafka")


def median_run(runs: list[dict], key: str) -> dict:
    """The run whose ``key`` is the median (upper median for an even count)."""
    ordered = sorted(runs, key=lambda r: r[key])
    return ordered[len(ordered) // 2]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def group_notes(data: dict) -> list[str]:
    """How much of a consumer group's time went to joining: the time to its first record."""
    notes = []
    for name, row in data["rows"].items():
        med = row.get("median", {})
        if all("first_record_seconds" in med.get(s, {}) for s in SYSTEMS):
            s, k = med["strata"], med["kafka"]
            notes.append(f"{name}: first record after {s['first_record_seconds']:.2f} s (Strata) / "
                         f"{k['first_record_seconds']:.2f} s (Kafka) of {s['seconds']:.2f} / {k['seconds']:.2f} s; "
                         f"from then on {s['records_per_s_after_first']:,.0f} / {k['records_per_s_after_first']:,.0f} "
                         "records/s.")
    return notes


def summarise(data: dict) -> None:
    """Each row gains ``median`` (per system: its median run) and the Strata/Kafka ratios."""
    for row in data["rows"].values():
        if set(row["runs"]) != set(SYSTEMS):
            continue
        latency = row["workload"] == "latency"
        key = "p99_ms" if latency else "records_per_s"
        med = {s: median_run(row["runs"][s], key) for s in SYSTEMS}
        row["median"] = med
        if latency:
            row["p99_ratio"] = _ratio(med["strata"]["p99_ms"], med["kafka"]["p99_ms"])
        else:
            row["ratio"] = _ratio(med["strata"]["records_per_s"], med["kafka"]["records_per_s"])
            row["cpu_per_gb_ratio"] = _ratio(med["strata"]["server_cpu_s_per_gb"],
                                             med["kafka"]["server_cpu_s_per_gb"])
            row["user_cpu_per_gb_ratio"] = _ratio(med["strata"].get("server_user_cpu_s_per_gb"),
                                                  med["kafka"].get("server_user_cpu_s_per_gb"))
            row["bound"] = {s: bound_by(med[s], data["machine"]["nproc"]) for s in SYSTEMS}
    data["notes"] = [n for n in data.get("notes", []) if n not in group_notes(data)] + group_notes(data)


#: issue 34's targets, judged on the summarised rows: (name, unit, required, kind); the worst row decides
TARGETS = {
    "throughput": ("Throughput vs Kafka on every workload no client process limits (lowest row)", "×", 1.0, "min"),
    "cpu_per_gb": ("Server CPU per GB of payload vs Kafka's, every workload (highest row)", "ratio (at most)",
                   0.5, "max"),
    "p99": ("Produce-to-consume p99 vs Kafka's at every offered load both sustain (highest row)",
            "ratio (at most)", 1.0, "max"),
}


def targets(data: dict) -> list[dict]:
    """Each of :data:`TARGETS` judged on the rows :func:`summarise` compared: its ``measured`` is
    the worst row's ratio (``worst``), with how many rows meet it. Throughput counts only rows
    where neither system's pace was a single client's (``bound_by``): there, the client says how
    fast both could go. A target no row measures is left out."""
    ratios: dict[str, list[tuple[str, float]]] = {key: [] for key in TARGETS}
    for name, row in data["rows"].items():
        if "median" not in row:
            continue
        if row["workload"] == "latency":
            if row.get("p99_ratio") is not None:
                ratios["p99"].append((name, row["p99_ratio"]))
            continue
        if row.get("cpu_per_gb_ratio") is not None:
            ratios["cpu_per_gb"].append((name, row["cpu_per_gb_ratio"]))
        if row.get("ratio") is not None and "client" not in row["bound"].values():
            ratios["throughput"].append((name, row["ratio"]))
    out = []
    for key, (name, unit, required, kind) in TARGETS.items():
        rows = ratios[key]
        if not rows:
            continue
        worst = (min if kind == "min" else max)(rows, key=lambda r: r[1])
        meets = [r for r in rows if (r[1] >= required if kind == "min" else r[1] <= required)]
        out.append({"id": key, "name": name, "unit": unit, "required": required, "kind": kind,
                    "measured": worst[1], "worst": worst[0], "rows": len(rows), "rows_met": len(meets),
                    "met": len(meets) == len(rows)})
    return out


def required_text(t: dict) -> str:
    """A target of :func:`targets` as its bound: ``≥ 1×``, ``≤ 0.5×``."""
    return f"{'≥' if t['kind'] == 'min' else '≤'} {t['required']:g}×"


def targets_table(data: dict) -> list[str]:
    L = ["| target | required | worst row | rows meeting it | met |", "| --- | --- | --- | ---: | --- |"]
    for t in targets(data):
        L.append(f"| {t['name']} | {required_text(t)} | {t['measured']:.2f}×: {t['worst']} | {t['rows_met']} of {t['rows']} | "
                 f"{'**yes**' if t['met'] else '**NO**'} |")
    return L


def bound_by(r: dict, cores: int) -> str:
    """What most likely set the pace of a run, from CPU time over wall time: a client process
    busy on a whole core, all cores busy, the server, or none of them (waiting)."""
    server = r["server_cpu_seconds"] / r["seconds"]
    client = r["client_cpu_seconds"] / r["seconds"]
    if server + client >= 0.85 * cores:
        return "all cores"
    if client >= 0.85 and r.get("client_processes", 1) == 1:
        return "client"
    if server >= 0.85:
        return "broker"
    return "waiting"


def _f(x: float | None, spec: str = ",.0f", suffix: str = "") -> str:
    return "–" if x is None else f"{x:{spec}}{suffix}"


def _busy(r: dict, who: str) -> str:
    return f"{r[who + '_cpu_seconds'] / r['seconds']:.0%}"


def _compared(data: dict, *, latency: bool):
    """(name, row, Strata's median run, Kafka's) of the rows measured on both, latency rows or the others."""
    for name, row in data["rows"].items():
        if (row["workload"] == "latency") == latency and "median" in row:
            yield name, row, row["median"]["strata"], row["median"]["kafka"]


def throughput_table(data: dict) -> list[str]:
    L = ["| workload | Strata rec/s | Kafka rec/s | **Strata / Kafka** | MB/s Strata / Kafka | "
         "server CPU s per GB, Strata / Kafka (ratio) | of which user space, S / K (ratio) | "
         "RSS MiB after, Strata / Kafka | server CPU busy, S / K | client CPU busy, S / K | limited by, S / K |",
         "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, row, s, k in _compared(data, latency=False):
        L.append(f"| {name} | {_f(s['records_per_s'])} | {_f(k['records_per_s'])} | **{_f(row['ratio'], '.2f')}** | "
                 f"{s['mb_per_s']:,.1f} / {k['mb_per_s']:,.1f} | {_f(s['server_cpu_s_per_gb'], ',.1f')} / "
                 f"{_f(k['server_cpu_s_per_gb'], ',.1f')} ({_f(row['cpu_per_gb_ratio'], '.2f')}) | "
                 f"{_f(s.get('server_user_cpu_s_per_gb'), ',.2f')} / {_f(k.get('server_user_cpu_s_per_gb'), ',.2f')} "
                 f"({_f(row.get('user_cpu_per_gb_ratio'), '.2f')}) | "
                 f"{s['rss_mib']:,.0f} / {k['rss_mib']:,.0f} | {_busy(s, 'server')} / {_busy(k, 'server')} | "
                 f"{_busy(s, 'client')} / {_busy(k, 'client')} | {row['bound']['strata']} / {row['bound']['kafka']} |")
    return L


def latency_table(data: dict) -> list[str]:
    L = ["| offered load | achieved rec/s, S / K | p50 ms, S / K | p99 ms Strata | p99 ms Kafka | **p99 S / K** | "
         "p99.9 ms, S / K | max ms, S / K | server CPU s, S / K |",
         "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, row, s, k in _compared(data, latency=True):
        L.append(f"| {name.removeprefix('latency ')} | {s['rate_achieved']:,.0f} / {k['rate_achieved']:,.0f} | "
                 f"{s['p50_ms']:.2f} / {k['p50_ms']:.2f} | {s['p99_ms']:.2f} | {k['p99_ms']:.2f} | "
                 f"**{_f(row['p99_ratio'], '.2f')}** | {s['p999_ms']:.2f} / {k['p999_ms']:.2f} | "
                 f"{s['max_ms']:.1f} / {k['max_ms']:.1f} | {s['server_cpu_seconds']:.1f} / "
                 f"{k['server_cpu_seconds']:.1f} |")
    return L


def _load(data: dict) -> str:
    """The machine's 1-minute load average over the run: other work on the shared cores weighs on
    both systems alike only on average, so say how busy it was."""
    loads = sorted(r["loadavg_1m_after"] for row in data["rows"].values() for runs in row["runs"].values()
                   for r in runs if "loadavg_1m_after" in r)
    if not loads:
        return ""
    return (f" Other work shared the machine: its 1-minute load average after each run was {loads[0]:.1f} to "
            f"{loads[-1]:.1f} (median {loads[len(loads) // 2]:.1f}) on {data['machine']['nproc']} cores.")


def _header(data: dict) -> list[str]:
    m = data["machine"]
    ck = m.get("confluent_kafka", {})
    fs = (m.get("data_dir_filesystem") or {}).get("type")
    return [
        f"<!-- {MARK}:start -->",
        "## Strata vs Apache Kafka 4.1.2 (`bench/kafka_peer.py`)",
        "",
        (f"Command: `{data['command']}` — {data['date']}, {data['total_seconds'] / 60:.0f} min; "
         f"{m['nproc']} CPUs {m['cpu_model']}, {m['memory_gib']} GiB, Linux {m['kernel']}, Python {m['python']}; "
         f"confluent-kafka {ck.get('confluent_kafka')} (librdkafka {ck.get('librdkafka')}), kcat {m['kcat']} "
         f"(librdkafka {m['kcat_librdkafka']}); Kafka 4.1.2 built from source "
         "(`shared/tools/kafka-broker/`), JVM heap 1 GiB, G1 (run.sh's flags), and its Java client "
         f"4.1.2. Data dirs on the same disk ({fs}); servers and clients share the same {m['nproc']} cores. "
         "Raw figures: `docs/benchmarks-kafka-peer.json`." + _load(data) + guest_memory.describe(data.get("memory"))),
        "",
        ("One benchmark process drives both systems, one after the other, each workload "
         f"{data['config']['repeats']} time(s) with the order alternating; the median run of each is shown. "
         + _passes_text(data) + _cpu_text(data) +
         "per GB of record payload, and of it user time alone (user space: what the server ran itself; the rest "
         "is the kernel's work for it, socket and page-cache copies and page faults, which both pay for the same "
         "bytes). Every measured run starts after a `sync`, so none is charged for writing back what the one "
         "before it wrote; RSS is VmRSS of the server processes after the run (summed over three "
         "brokers for RF 3). Both run with their defaults (no fsync per record) plus 1 GiB segments and, for "
         "Kafka, `group.initial.rebalance.delay.ms=0`, and for Strata too (its default is 3 s). "
         "The history rows use 16 MiB segments on both; Strata's topic has `remote.storage.enable=true`, "
         "`local.retention.bytes=0` (its broker: a `file://` bucket, `remote.log.manager.task.interval.ms=200`), "
         "and is read once only the active segment is left on its disk. 'Limited by' is read from CPU busy (CPU seconds over "
         "wall seconds; 100% = one core): `all cores` = server + client ≥ 85% of the machine, `client` = a "
         "single client process ≥ 85% of a core, `broker` = the server processes ≥ 85% of a core (Strata's broker "
         "does its work on one event loop), `waiting` = none of these (round trips, linger, acknowledgement "
         "waits, a group's join)."),
        "",
    ]


def render(data: dict) -> str:
    L = _header(data)
    if targets(data):
        L += ["### Targets", ""] + targets_table(data) + [""]
    if any(r["workload"] != "latency" for r in data["rows"].values()):
        L += ["### Throughput and cost", ""] + throughput_table(data) + [""]
    if any(r["workload"] == "latency" for r in data["rows"].values()):
        L += ["### End-to-end latency against offered load",
              "",
              ("bench/latency.py: a paced confluent-kafka producer (acks=1, 100 B records, one partition, the send "
               "time in the record) and a confluent-kafka consumer (`poll()`, fetch.wait.max.ms=100) on the same "
               "machine; the first second is warm-up and left out."),
              ""] + latency_table(data) + [""]
    if data.get("notes"):
        L += [f"- {n}" for n in data["notes"]] + [""]
    if data.get("failures"):
        L += ["Runs that failed (left out of the tables):", ""] + [f"- {f}" for f in data["failures"]] + [""]
    one_sided = [f"{name} ({', '.join(row['runs'])} only)" for name, row in data["rows"].items()
                 if "median" not in row]
    if one_sided:
        L += [("Measured on one system only (the other saturated at a lower load, or failed): "
               + "; ".join(one_sided) + "."), ""]
    L += ["Servers (ports are free ones picked per run):", "", "```"]
    for cmds in data["servers"].values():
        L += cmds
    L += ["```", "", "Client commands (first run of each row):", "", "```"]
    for row in data["rows"].values():
        for s in SYSTEMS:
            runs = row["runs"].get(s) or [{}]
            cmd = runs[0].get("command") or runs[0].get("command_producer")
            if cmd:
                L.append(cmd)
                break
    L += ["```", f"<!-- {MARK}:end -->"]
    text = "\n".join(L)
    return text.replace(data["work_dir"], "$WORK") if data.get("work_dir") else text


def write_report(data: dict, md_path: Path) -> None:
    from foundation import log, write_section

    md_path.parent.mkdir(parents=True, exist_ok=True)
    json_path = md_path.with_name("benchmarks-kafka-peer.json")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    write_section(md_path, MARK, render(data))
    log(f"wrote {md_path} ({MARK} section) and {json_path}")


def _cpu_text(data: dict) -> str:
    sources = sorted(set(data.get("cpu_sources", {}).values()))
    if sources and all(src.startswith("cgroup") for src in sources):
        return ("Server CPU is the CPU time of a cgroup (cpuacct) holding each system's server processes (the JVM; "
                "the Python broker; every thread, in nanoseconds, its user/system split sampled at the kernel's "
                "timer tick), ")
    return "Server CPU is utime+stime from /proc/PID/stat of every server process (the JVM; the Python broker), "


def _passes_text(data: dict) -> str:
    passes = data["config"].get("consume_passes", 1)
    if passes <= 1:
        return ""
    return (f"A one-partition consume row (one broker, TLS, RF 3) is {passes} reads of the whole topic, one "
            "after another, as one run: a single read lasts 0.1-0.6 s; so is the catch-up read of history "
            "(under a second a read). ")
