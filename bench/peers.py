"""Strata against a peer: the same produce and consume workloads on NATS JetStream.

    python bench/peers.py [--quick] [--out docs/benchmarks.md] [--work-dir /tmp]

Starts, on loopback and under a temporary directory of ``--work-dir`` (a real disk),
a Strata broker (bench/foundation.py's BrokerProcess) and ``nats-server -js -sd DIR
-a 127.0.0.1 -p PORT`` (JetStream, file storage), and runs, for 100-byte and 1 KiB
records (1,000,000 and 300,000 of them; 10x fewer with ``--quick``), one partition or
one stream, interleaved, ``repeats`` times (3; 1 with ``--quick``):

* Strata through confluent-kafka from Python and JetStream through nats-py, each a
  client process under the same conditions (bench/peer_clients.py): produce every
  record and wait for the last acknowledgement, then consume the topic/stream from
  the start;
* Strata through kcat (foundation.py's produce and consume), its fastest client.

Both servers are stopped at the end. Writes its section of docs/benchmarks.md between
``<!-- peers:start -->`` and ``<!-- peers:end -->`` and docs/benchmarks-peers.json.
Every figure comes from this run. Needs ``nats-server`` (Debian's package), nats-py,
confluent-kafka and kcat.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import foundation  # noqa: E402
from foundation import BrokerProcess, free_port, human_size, log, machine_info  # noqa: E402

MARK = "peers"
CLIENTS = str(BENCH / "peer_clients.py")
NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
NATS_WINDOW = 20000  # most unacknowledged JetStream publishes
NATS_BATCH = 100000  # messages per JetStream pull request

FULL = {"workloads": [(100, 1_000_000), (1024, 300_000)], "repeats": 3, "prewarm_gib": 2}
QUICK = {"workloads": [(100, 100_000), (1024, 30_000)], "repeats": 1, "prewarm_gib": 0.5}


def proc_cpu(pid: int) -> float:
    return sum(proc_cpu_split(pid))


def proc_cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of every thread of ``pid``, from /proc: what the process ran
    itself, and what the kernel ran for it (socket and page-cache copies, page faults)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


class NatsServer:
    """``nats-server -js`` with file storage under ``store``, on a free loopback port."""

    def __init__(self, store: Path, log_path: Path) -> None:
        self.port = free_port()
        self.cmd = [NATS_SERVER, "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(self.port)]
        self.url = f"nats://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log(f"starting NATS JetStream: {shlex.join(self.cmd)}")
        self._log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = self.log_path.read_text()
            if "Server is ready" in text:
                log(f"nats-server pid {self.proc.pid} ready on {self.url}")
                return
            if self.proc.poll() is not None:
                raise SystemExit(f"nats-server exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.1)
        raise SystemExit(f"nats-server not ready within 30 s:\n{self.log_path.read_text()}")

    def cpu_seconds(self) -> float:
        return proc_cpu(self.proc.pid)

    def stop(self) -> int | None:
        """SIGTERM; 0 after a clean shutdown."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        log("stopping nats-server (SIGTERM)")
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._log.close()
        # nats-server exits with 1 after a clean shutdown on SIGTERM; report 0 when it logged one
        if rc == 1 and "Server Exiting.." in self.log_path.read_text():
            rc = 0
        return rc


def nats_missing() -> str | None:
    """Why the JetStream peer cannot run here (what to install), or None when it can."""
    if not Path(NATS_SERVER).exists():
        return "nats-server not found: apt-get install nats-server"
    if importlib.util.find_spec("nats") is None:
        return "nats-py (JetStream's Python client) is not installed: python3 -m pip install -e '.[bench]'"
    return None


def nats_versions() -> dict:
    out = subprocess.run([NATS_SERVER, "--version"], capture_output=True, text=True).stdout.strip()
    policy = subprocess.run(["apt-cache", "policy", "natscli"], capture_output=True, text=True)
    shown = (policy.stdout + policy.stderr).strip()
    if not shown:
        note = "`apt-cache policy natscli` knows no such package"
    elif "Candidate: (none)" in shown:
        note = "`apt-cache policy natscli` shows no candidate"
    else:
        note = f"`apt-cache policy natscli` says: {' '.join(shown.split())}"
    if shutil.which("nats"):
        note += f" (a `nats` program is on PATH at {shutil.which('nats')}, but this benchmark does not drive it)"
    return {"nats_server": out.split()[-1] if out else None,
            "nats_py": importlib.metadata.version("nats-py"),
            "nats_cli_on_path": shutil.which("nats"),
            "apt_cache_policy_natscli": shown, "nats_cli_note": note}


def run_client(role: str, args: list[str], server_cpu) -> dict:
    """Run a bench/peer_clients.py role; add the server's CPU seconds over the run."""
    cmd = [sys.executable, CLIENTS, role, *args]
    log(f"    python {shlex.join([os.path.relpath(CLIENTS, REPO), *cmd[3:]])}")
    c0 = server_cpu()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    res = foundation.drain_json(proc)
    if proc.returncode != 0 or res is None:
        raise SystemExit(f"FAIL: {role} exited with {proc.returncode}")
    res["server_cpu_seconds"] = server_cpu() - c0
    res["client_cpu_seconds"] = res.pop("cpu_seconds")
    res["command"] = "python " + shlex.join([os.path.relpath(CLIENTS, REPO), *cmd[3:]])
    log(f"      {res['records']:,} records in {res['seconds']:.3f} s = {res['records_per_s']:,.0f} records/s, "
        f"{res['mb_per_s']:,.1f} MB/s (server CPU {res['server_cpu_seconds']:.2f} s, client CPU "
        f"{res['client_cpu_seconds']:.2f} s)")
    return res


def strata_python(b: BrokerProcess, topic: str, records: Path, size: int, count: int) -> tuple[dict, dict]:
    foundation.create_topic(b.bootstrap, topic)
    prod = run_client("kafka-produce", ["--bootstrap", b.bootstrap, "--topic", topic, "--file", str(records),
                                        "--count", str(count)], b.cpu_seconds)
    low, high = foundation.high_watermark(b.bootstrap, topic)
    if (low, high) != (0, count):
        raise SystemExit(f"FAIL: {topic} holds offsets [{low}, {high}) after producing {count:,} records")
    cons = run_client("kafka-consume", ["--bootstrap", b.bootstrap, "--topic", topic, "--count", str(count),
                                        "--size", str(size)], b.cpu_seconds)
    foundation.delete_topic(b.bootstrap, topic)
    return prod, cons


def strata_kcat(b: BrokerProcess, topic: str, records: Path, size: int, count: int) -> tuple[dict, dict]:
    prod = foundation.run_produce(b, topic, records, size, count, None, "")
    cons = foundation.run_consume_kcat(b, topic, size, count)
    foundation.delete_topic(b.bootstrap, topic)
    for r in (prod, cons):
        r["server_cpu_seconds"] = r["broker_cpu_seconds"]
    return prod, cons


def jetstream(n: NatsServer, stream: str, records: Path, size: int, count: int) -> tuple[dict, dict]:
    prod = run_client("nats-produce", ["--server", n.url, "--stream", stream, "--file", str(records),
                                       "--count", str(count), "--window", str(NATS_WINDOW)], n.cpu_seconds)
    cons = run_client("nats-consume", ["--server", n.url, "--stream", stream, "--count", str(count),
                                       "--size", str(size), "--batch", str(NATS_BATCH), "--delete"],
                      n.cpu_seconds)
    return prod, cons


SYSTEMS = {
    "strata_python": "Strata, confluent-kafka from Python",
    "jetstream_python": "NATS JetStream, nats-py",
    "strata_kcat": "Strata, kcat",
}


def fmt(x: float) -> str:
    return f"{x:,.0f}"


def busy(r: dict, who: str) -> str:
    return f"{r[who + '_cpu_seconds'] / r['seconds']:.0%}"


def write_report(data: dict, md_path: Path) -> None:
    json_path = md_path.with_name("benchmarks-peers.json")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    m, v = data["machine"], data["versions"]
    ck = m["confluent_kafka"]
    L = [
        f"<!-- {MARK}:start -->",
        "## Peers: Strata vs NATS JetStream (`bench/peers.py`)",
        "",
        (f"Command: `{data['command']}` — {data['date']}; {m['nproc']} CPUs {m['cpu_model']}, "
         f"{m['memory_gib']} GiB, Linux {m['kernel']}, Python {m['python']}; nats-server {v['nats_server']} "
         f"(Debian's package), nats-py {v['nats_py']}, confluent-kafka {ck.get('confluent_kafka')} (librdkafka "
         f"{ck.get('librdkafka')}), kcat {m['kcat']} (librdkafka {m['kcat_librdkafka']}). Raw figures: "
         "`docs/benchmarks-peers.json`; plotted with the foundation figures in "
         "[`img/throughput-vs-record-size.png`](img/throughput-vs-record-size.png)."),
        "",
        (f"Servers, both started by the benchmark on 127.0.0.1 with their data on the same disk "
         f"({(m['data_dir_filesystem'] or {}).get('type')}) and stopped at the end: Strata "
         f"`{data['servers']['strata']}`; JetStream `{data['servers']['jetstream']}` (file storage; one "
         "stream per workload with one subject, 1 replica, limits retention). Neither fsyncs per record "
         "(Strata's `flush.messages` default; JetStream's 2-minute `sync_interval` default). Everything "
         f"shares the same {m['nproc']} cores. Each workload: one partition or one stream; median of "
         f"{data['config']['repeats']} interleaved run(s) (all runs are in the JSON)."),
        "",
        ("**Clients.** The peer's own benchmark tool (`nats bench`, in the `natscli` program) is not "
         f"available here: {data['versions']['nats_cli_note']}, it is not on PyPI either, and nothing else can "
         "be downloaded on this machine. So JetStream is driven by its Python "
         "client, nats-py (pure Python on asyncio), and the like-for-like comparison drives Strata from "
         "Python too, with confluent-kafka; both in `bench/peer_clients.py`, under the same conditions: one "
         "process and one connection; the records (lines of the same pre-generated file) loaded into memory "
         "first; produce hands every record to the client in a Python loop and stops the clock at the last "
         "acknowledgement (Kafka `acks=1`, `linger.ms=5`, `batch.size=1 MiB`; a JetStream PubAck per message, "
         f"at most {NATS_WINDOW:,} unacknowledged, counted by one reply subscription); consume reads from the "
         "first record to the last with no per-record acknowledgement or commit (Kafka: "
         "`consume(num_messages=min(100000, left))` loop, foundation's fetch settings; JetStream: a pull consumer with "
         f"`AckPolicy.NONE`, pull requests of {NATS_BATCH:,} messages or 16 MB, whichever is fewer "
         f"(two outstanding stay under nats-server's 64 MB slow-consumer limit), the next sent when half the previous has "
         "arrived); connection, metadata and stream/consumer creation before the clock starts. Strata's "
         "fastest client, kcat (C, librdkafka; foundation's commands), is measured in the same run as a "
         "second row; JetStream has no counterpart to it here."),
        "",
        "| workload | Strata (confluent-kafka) records/s | MB/s | JetStream (nats-py) records/s | MB/s | "
        "**Strata / JetStream** | server CPU busy, Strata / JetStream | client CPU busy, Strata / JetStream |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for w in data["workloads"]:
        s, j = w["median"]["strata_python"], w["median"]["jetstream_python"]
        L.append(f"| {w['op']} {human_size(w['record_size'])} x {w['records']:,} | {fmt(s['records_per_s'])} | "
                 f"{s['mb_per_s']:,.1f} | {fmt(j['records_per_s'])} | {j['mb_per_s']:,.1f} | "
                 f"**{w['ratio']:.2f}** | {busy(s, 'server')} / {busy(j, 'server')} | "
                 f"{busy(s, 'client')} / {busy(j, 'client')} |")
    L += [
        "",
        ("CPU busy = the process's CPU seconds over the timed wall time (100% = one core). A Python client "
         "near 100% sets the pace more than its server does: with these clients, the comparison is between "
         "what each system lets a single Python process achieve."),
        "",
        "Strata with its fastest client, kcat (time from start to exit, connection included):",
        "",
        ("| workload | Strata (kcat) records/s | MB/s | Strata (kcat) / JetStream (nats-py) | broker CPU s | "
         "kcat CPU s |"),
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for w in data["workloads"]:
        k = w["median"]["strata_kcat"]
        L.append(f"| {w['op']} {human_size(w['record_size'])} x {w['records']:,} | {fmt(k['records_per_s'])} | "
                 f"{k['mb_per_s']:,.1f} | {w['ratio_kcat']:.2f} | {k['server_cpu_seconds']:.2f} | "
                 f"{k['client_cpu_seconds']:.2f} |")
    L.append("")
    if data.get("notes"):
        L += [f"- {n}" for n in data["notes"]] + [""]
    L += ["Commands (first run of each workload; topic and stream names change per run):", "", "```",
          data["servers"]["strata"], data["servers"]["jetstream"]]
    for w in data["workloads"]:
        for key in ("strata_python", "jetstream_python", "strata_kcat"):
            L.append(w["runs"][key][0]["command"])
    L += ["```", f"<!-- {MARK}:end -->"]
    foundation.write_section(md_path, MARK, "\n".join(L))
    log(f"wrote {md_path} ({MARK} section) and {json_path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10x fewer records, one run each")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"))
    ap.add_argument("--work-dir", default="/tmp", help="temporary data dirs and record files (a real disk)")
    ap.add_argument("--prewarm-gib", type=float, default=None,
                    help="GiB written and deleted through the page cache first (default 2, --quick 0.5)")
    args = ap.parse_args()
    cfg = QUICK if args.quick else FULL
    if (missing := nats_missing()) is not None:
        raise SystemExit(missing)
    command = "python bench/peers.py" + (" --quick" if args.quick else "")
    if Path(args.out).resolve() != (REPO / "docs" / "benchmarks.md"):
        command += f" --out {args.out}"
    work = Path(tempfile.mkdtemp(prefix="strata-bench-peers-", dir=args.work_dir))
    data: dict = {"command": command, "mode": "quick" if args.quick else "full",
                  "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                  "machine": machine_info(work), "versions": nats_versions(),
                  "config": {**cfg, "nats_window": NATS_WINDOW, "nats_batch": NATS_BATCH}, "notes": []}
    log(f"work dir {work}; nats-server {data['versions']['nats_server']}, nats-py {data['versions']['nats_py']}")
    files = {}
    for size, count in cfg["workloads"]:
        files[size] = work / f"records-{size}.txt"
        foundation.generate_records(files[size], size, count)
    data["prewarm"] = foundation.prewarm_memory(
        work, args.prewarm_gib if args.prewarm_gib is not None else cfg["prewarm_gib"])

    broker = BrokerProcess(work / "strata", work / "broker.log")
    nats = NatsServer(work / "jetstream", work / "nats-server.log")
    data["servers"] = {"strata": shlex.join(broker.cmd), "jetstream": shlex.join(nats.cmd)}
    started = time.monotonic()
    rcs = {}
    try:
        broker.start()
        data["servers"]["strata"] = shlex.join(broker.cmd)
        nats.start()
        foundation.create_topic(broker.bootstrap, "bench-empty")
        data["workloads"] = []
        for size, count in cfg["workloads"]:
            runs: dict[str, dict[str, list]] = {op: {k: [] for k in SYSTEMS} for op in ("produce", "consume")}
            for rep in range(cfg["repeats"]):
                log(f"== {human_size(size)} x {count:,}: run {rep + 1}/{cfg['repeats']}")
                order = ["strata_python", "jetstream_python", "strata_kcat"]
                if rep % 2:  # alternate who goes first
                    order[0], order[1] = order[1], order[0]
                for key in order:
                    log(f"  {SYSTEMS[key]}")
                    if key == "strata_python":
                        p, c = strata_python(broker, f"peers-py-{size}-r{rep}", files[size], size, count)
                    elif key == "jetstream_python":
                        p, c = jetstream(nats, f"PEERS_{size}_R{rep}", files[size], size, count)
                    else:
                        p, c = strata_kcat(broker, f"peers-kcat-{size}-r{rep}", files[size], size, count)
                    runs["produce"][key].append(p)
                    runs["consume"][key].append(c)
            for op in ("produce", "consume"):
                med = {k: foundation.median_run(v, "records_per_s") for k, v in runs[op].items()}
                w = {"op": op, "record_size": size, "records": count, "runs": runs[op], "median": med,
                     "ratio": med["strata_python"]["records_per_s"] / med["jetstream_python"]["records_per_s"],
                     "ratio_kcat": med["strata_kcat"]["records_per_s"] / med["jetstream_python"]["records_per_s"]}
                data["workloads"].append(w)
                log(f"  {op} {human_size(size)}: Strata (confluent-kafka) "
                    f"{fmt(med['strata_python']['records_per_s'])}/s, JetStream (nats-py) "
                    f"{fmt(med['jetstream_python']['records_per_s'])}/s: ratio {w['ratio']:.2f}; Strata (kcat) "
                    f"{fmt(med['strata_kcat']['records_per_s'])}/s")
    finally:
        rcs["strata"] = broker.stop()
        rcs["jetstream"] = nats.stop()
        data["exit_codes"] = rcs
        if all(rc == 0 for rc in rcs.values()):
            subprocess.run(["rm", "-rf", str(work)], check=False)
        else:
            log(f"WARNING: a server exited with {rcs}; kept {work}")
    data["workloads"].sort(key=lambda w: (w["record_size"], w["op"] != "produce"))
    data["total_seconds"] = time.monotonic() - started
    if args.quick:
        data["notes"].append("`--quick` run: 10x fewer records and one run each; use the full run for figures.")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_report(data, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
