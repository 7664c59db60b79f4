"""Strata over TLS vs plaintext: produce and consume 1 KiB records, same broker, same run.

    python bench/tls.py [--quick] [--out docs/benchmarks.md] [--records N] [--repeats N]

Starts one single-node broker (bench/foundation.py's BrokerProcess) with two
listeners, ``PLAINTEXT`` and ``SSL`` (a throwaway CA and server certificate made
with ``cryptography``; TLS 1.3, OpenSSL's default suite, AES-256-GCM), and runs
bench/foundation.py's kcat produce and consume of the same records over each in
turn (plaintext first, then TLS, ``--repeats`` times; the median run of each is
reported): kcat producing with acks=1, linger.ms=5 and 1 MiB batches; kcat
consuming from the beginning to the end. The ratio TLS/plaintext is the figure
(target: at least 70%).

Writes its section of docs/benchmarks.md between ``<!-- tls:start -->`` and
``<!-- tls:end -->`` and docs/benchmarks-tls.json.
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
sys.path.insert(0, str(REPO))

import foundation
from foundation import BrokerProcess, free_port, log, machine_info

MARK = "tls"
SIZE = 1024
FULL = {"records": 1_000_000, "repeats": 3, "prewarm_gib": 4}
QUICK = {"records": 100_000, "repeats": 1, "prewarm_gib": 0.5}
TARGET = 0.70


def _median(runs: list[dict], key: str) -> dict:
    return sorted(runs, key=lambda r: r[key])[len(runs) // 2]


def write_report(data: dict, md_path: Path) -> None:
    json_path = md_path.with_name("benchmarks-tls.json")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    m = data["machine"]
    r = data["results"]
    L = [
        f"<!-- {MARK}:start -->",
        "## TLS vs plaintext (`bench/tls.py`)",
        "",
        (f"Command: `{data['command']}` — {data['date']}; {m['nproc']} CPUs {m['cpu_model']}, "
         f"{m['memory_gib']} GiB, Linux {m['kernel']}, Python {m['python']}, {data['openssl']}. "
         f"Broker: `{data['broker']['command']}` (certificate flags elided). Raw figures: "
         "`docs/benchmarks-tls.json`."),
        "",
        (f"One broker with a `PLAINTEXT` and an `SSL` listener; {data['config']['records']:,} records of "
         f"{SIZE} B produced by kcat (acks=1, linger.ms=5, 1 MiB batches) and consumed by kcat from the "
         f"beginning, over each listener in turn, {data['config']['repeats']} time(s); the median run of "
         f"each is shown. TLS: {data['tls_version']}, {data['tls_cipher']}. Broker and kcat share the same "
         f"{m['nproc']} cores. Target: TLS at least {TARGET:.0%} of plaintext."),
        "",
        ("| | plaintext records/s | TLS records/s | plaintext MB/s | TLS MB/s | TLS / plaintext | "
         "broker CPU s plaintext / TLS | kcat CPU s plaintext / TLS | target met |"),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for what in ("produce", "consume"):
        p, t = r[what]["plaintext"], r[what]["tls"]
        ratio = r[what]["ratio"]
        L.append(f"| {what} 1 KiB | {p['records_per_s']:,.0f} | {t['records_per_s']:,.0f} | "
                 f"{p['mb_per_s']:,.1f} | {t['mb_per_s']:,.1f} | {ratio:.0%} | "
                 f"{p['broker_cpu_seconds']:.2f} / {t['broker_cpu_seconds']:.2f} | "
                 f"{p['client_cpu_seconds']:.2f} / {t['client_cpu_seconds']:.2f} | "
                 f"{'yes' if ratio >= TARGET else 'no'} |")
    L += ["", "Commands (TLS adds `-X security.protocol=SSL -X ssl.ca.location=CA`):", "", "```",
          data["broker"]["command"], r["produce"]["tls"]["command"], r["consume"]["tls"]["command"], "```"]
    if data.get("notes"):
        L += [""] + [f"- {n}" for n in data["notes"]]
    L.append(f"<!-- {MARK}:end -->")
    foundation.write_section(md_path, MARK, "\n".join(L))
    log(f"wrote {md_path} ({MARK} section) and {json_path}")


def cpu_notes(data: dict) -> list[str]:
    """Where the time goes, from the runs' CPU seconds (broker and kcat share the cores)."""
    notes = []
    for what in ("produce", "consume"):
        p, t = data["results"][what]["plaintext"], data["results"][what]["tls"]
        plain = p["broker_cpu_seconds"] + p["client_cpu_seconds"]
        tls = t["broker_cpu_seconds"] + t["client_cpu_seconds"]
        notes.append(
            f"{what}: the broker used {t['broker_cpu_seconds']:.2f} s of CPU over TLS against "
            f"{p['broker_cpu_seconds']:.2f} s in plaintext, kcat {t['client_cpu_seconds']:.2f} s against "
            f"{p['client_cpu_seconds']:.2f} s; together {tls:.2f} against {plain:.2f} CPU-seconds "
            f"({plain / tls:.0%}), the bound of the ratio whenever the {data['machine']['nproc']} shared cores "
            "are the limit.")
    notes.append(
        "Why TLS costs what it does here: `sendfile` cannot encrypt, so every consumed byte is read, "
        "encrypted (OpenSSL, AES-256-GCM) and copied to the socket by the broker; librdkafka writes about "
        "one TLS record per message (1-2 KB), so a produced MiB is some 600 records the broker decrypts one "
        "call each, and kcat's own TLS costs grow alike. Encrypting on a thread pool, pipelined with the "
        "reads and sends, was measured too and was slower on these 2 cores (more CPU for both processes). "
        "Kernel TLS (kTLS), which would bring `sendfile` back, needs the kernel's `tls` module "
        "(absent on this machine) and Python 3.12's `ssl.OP_ENABLE_KTLS`.")
    return notes


def _negotiated(port: int, ca: Path) -> tuple[str, str]:
    import socket
    import ssl

    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port)) as raw, ctx.wrap_socket(raw, server_hostname="localhost") as s:
        return str(s.version()), str(s.cipher()[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100,000 records, one run")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"))
    ap.add_argument("--work-dir", default="/tmp", help="temporary broker data dir (a real disk)")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args()
    cfg = dict(QUICK if args.quick else FULL)
    cfg["records"] = args.records or cfg["records"]
    cfg["repeats"] = args.repeats or cfg["repeats"]
    command = "python bench/tls.py" + (" --quick" if args.quick else "")
    if Path(args.out).resolve() != (REPO / "docs" / "benchmarks.md"):
        command += f" --out {args.out}"
    work = Path(tempfile.mkdtemp(prefix="strata-bench-tls-", dir=args.work_dir))
    from tests.security_fixtures import Pki

    pki = Pki(work)
    import ssl

    data: dict = {"command": command, "mode": "quick" if args.quick else "full", "openssl": ssl.OPENSSL_VERSION,
                  "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                  "machine": machine_info(work), "config": cfg, "notes": []}
    data["prewarm"] = foundation.prewarm_memory(work, cfg["prewarm_gib"])
    records = work / "records-1024.txt"
    foundation.generate_records(records, SIZE, cfg["records"])
    broker = BrokerProcess(work / "data", work / "broker.log")
    tls_port = free_port()
    at = broker.cmd.index("--listen")
    broker.cmd[at:at + 2] = ["--listeners", f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{tls_port}",
                             "--ssl-cert", str(pki.server_cert), "--ssl-key", str(pki.server_key)]
    tls_bootstrap = f"127.0.0.1:{tls_port}"
    tls_x = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    started = time.monotonic()
    try:
        broker.start()
        shown = broker.cmd[:]
        for flag in ("--ssl-cert", "--ssl-key"):
            shown[shown.index(flag) + 1] = flag.upper().strip("-").replace("-", "_")
        data["broker"] = {"command": shlex.join(shown)}
        data["tls_version"], data["tls_cipher"] = _negotiated(tls_port, pki.ca)
        runs: dict = {"produce": {"plaintext": [], "tls": []}, "consume": {"plaintext": [], "tls": []}}
        for i in range(cfg["repeats"]):
            for label, bootstrap, extra in (("plaintext", broker.bootstrap, None), ("tls", tls_bootstrap, tls_x)):
                topic = f"bench-tls-{label}-{i}"
                log(f"== [{i + 1}/{cfg['repeats']}] {label}: produce and consume {cfg['records']:,} x {SIZE} B")
                runs["produce"][label].append(foundation.run_produce(
                    broker, topic, records, SIZE, cfg["records"], None, "", bootstrap=bootstrap, extra_x=extra))
                runs["consume"][label].append(foundation.run_consume_kcat(
                    broker, topic, SIZE, cfg["records"], bootstrap=bootstrap, extra_x=extra))
                foundation.delete_topic(broker.bootstrap, topic)
        data["runs"] = runs
        data["results"] = {}
        for what in ("produce", "consume"):
            p = _median(runs[what]["plaintext"], "records_per_s")
            t = _median(runs[what]["tls"], "records_per_s")
            data["results"][what] = {"plaintext": p, "tls": t, "ratio": t["records_per_s"] / p["records_per_s"]}
            log(f"{what}: TLS {t['records_per_s']:,.0f} records/s vs plaintext {p['records_per_s']:,.0f} = "
                f"{data['results'][what]['ratio']:.0%}")
        data["notes"] += cpu_notes(data)
        data["broker"]["rss_mib_at_end"] = round(broker.rss_mib(), 1)
    finally:
        foundation.stop_and_clean(broker, data, work)
    quick = "`--quick` run: 100,000 records, one run; use the full run for figures."
    return foundation.finish_report(data, started, quick if args.quick else None, args.out, write_report)


if __name__ == "__main__":
    sys.exit(main())
