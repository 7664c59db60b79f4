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

``--java-client DIR`` (a directory holding ``kafka-clients-*.jar`` and its ``lib/``, as
``shared/tools/java-client/build.sh`` builds it) runs the same comparison with the Apache
Kafka Java client too (``bench/java/TlsBench.java``: a default producer, idempotent with
acks=all, 512 KiB batches; a consumer reading from the beginning). Whatever the client,
the bench also measures what OpenSSL alone takes to decrypt a GiB in records of the sizes
librdkafka and the Java client send (1 KiB and 16 KiB), in this process: the floor of a
TLS produce's cost to any broker built on OpenSSL.

Writes its section of docs/benchmarks.md between ``<!-- tls:start -->`` and
``<!-- tls:end -->`` and docs/benchmarks-tls.json.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shlex
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(REPO))

import foundation
from foundation import BrokerProcess, free_port, java_classpath, log, machine_info, timed_child

MARK = "tls"
SIZE = 1024
FULL = {"records": 1_000_000, "repeats": 3, "prewarm_gib": 4}
QUICK = {"records": 100_000, "repeats": 1, "prewarm_gib": 0.5}
TARGET = 0.70


def _median(runs: list[dict], key: str) -> dict:
    return sorted(runs, key=lambda r: r[key])[len(runs) // 2]


def _summarise(runs: dict, who: str) -> dict:
    """Per direction: the median plaintext and TLS runs and their ratio (logged)."""
    results = {}
    for what in ("produce", "consume"):
        p = _median(runs[what]["plaintext"], "records_per_s")
        t = _median(runs[what]["tls"], "records_per_s")
        results[what] = {"plaintext": p, "tls": t, "ratio": t["records_per_s"] / p["records_per_s"]}
        log(f"{who}{what}: TLS {t['records_per_s']:,.0f} records/s vs plaintext {p['records_per_s']:,.0f} = "
            f"{results[what]['ratio']:.0%}")
    return results


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
    java = data.get("java")
    if java:
        L += ["", (f"The same with the {java['client']} (`bench/java/TlsBench.java`: the producer's defaults, "
                   "idempotent with acks=all, and 512 KiB batches; a consumer from the beginning; the rate is "
                   "timed inside the JVM, the client's CPU includes the JVM's start):"), "",
              ("| | plaintext records/s | TLS records/s | TLS / plaintext | broker CPU s plaintext / TLS | "
               "Java process CPU s plaintext / TLS | target met |"),
              "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for what in ("produce", "consume"):
            p, t = java["results"][what]["plaintext"], java["results"][what]["tls"]
            ratio = java["results"][what]["ratio"]
            L.append(f"| {what} 1 KiB | {p['records_per_s']:,.0f} | {t['records_per_s']:,.0f} | {ratio:.0%} | "
                     f"{p['broker_cpu_seconds']:.2f} / {t['broker_cpu_seconds']:.2f} | "
                     f"{p['client_process_cpu_seconds']:.2f} / {t['client_process_cpu_seconds']:.2f} | "
                     f"{'yes' if ratio >= TARGET else 'no'} |")
    floor = data.get("openssl_floor")
    if floor:
        L += ["", ("What OpenSSL alone takes in this process (`ssl.SSLObject` over memory BIOs, as the "
                   "broker uses it; no sockets, no Kafka), per GiB of payload:"), "",
              "| record size | decrypt s/GiB | µs per record | encrypt s/GiB |", "| ---: | ---: | ---: | ---: |"]
        for size, f in floor.items():
            L.append(f"| {int(size):,} B | {f['decrypt_s_per_gib']:.2f} | {f['decrypt_us_per_record']:.2f} | "
                     f"{f['encrypt_s_per_gib']:.2f} |")
    if data.get("notes"):
        L += [""] + [f"- {n}" for n in data["notes"]]
    L.append(f"<!-- {MARK}:end -->")
    foundation.write_section(md_path, MARK, "\n".join(L))
    log(f"wrote {md_path} ({MARK} section) and {json_path}")


def cpu_notes(data: dict) -> list[str]:
    """Where the time goes, from the runs' CPU seconds (broker and kcat share the cores)."""
    notes = []
    cores = data["machine"]["nproc"]
    for what in ("produce", "consume"):
        p, t = data["results"][what]["plaintext"], data["results"][what]["tls"]
        plain = p["broker_cpu_seconds"] + p["client_cpu_seconds"]
        tls = t["broker_cpu_seconds"] + t["client_cpu_seconds"]
        notes.append(
            f"{what}: the broker used {t['broker_cpu_seconds']:.2f} s of CPU over TLS against "
            f"{p['broker_cpu_seconds']:.2f} s in plaintext, kcat {t['client_cpu_seconds']:.2f} s against "
            f"{p['client_cpu_seconds']:.2f} s; together {tls:.2f} against {plain:.2f} CPU-seconds "
            f"({plain / tls:.0%}), the bound of the ratio whenever the {cores} shared cores are the limit; "
            f"of the {tls - plain:.2f} CPU-seconds TLS adds, kcat's own are "
            f"{t['client_cpu_seconds'] - p['client_cpu_seconds']:.2f}.")
    floor = data.get("openssl_floor", {})
    small, large = floor.get("1040"), floor.get("16384")
    if small and large:
        produce = data["results"]["produce"]
        gib = produce["tls"]["payload_bytes"] / (1 << 30)
        extra = (produce["tls"]["broker_cpu_seconds"] - produce["plaintext"]["broker_cpu_seconds"]) / gib
        notes.append(
            f"Why a TLS produce costs the broker what it does: {extra:.2f} s more CPU per GiB, where "
            f"OpenSSL alone takes {small['decrypt_s_per_gib']:.2f} s to decrypt a GiB sent in 1 KiB records "
            f"({small['decrypt_us_per_record']:.2f} µs a record) and {large['decrypt_s_per_gib']:.2f} s in "
            "16 KiB records. librdkafka sends many small records: it calls `SSL_write` once per piece of "
            "its request buffer, and a message whose value it references rather than copies is two pieces "
            "(counted on this broker: 100 MB from kcat came as 51,600 records, 4,300 full 16 KiB ones "
            "holding 70% of the bytes and 46,000 under 1 KiB). The Java client fills 16 KiB records, and "
            "the broker's extra CPU for its TLS produce is mostly OpenSSL's (perf: libcrypto is 14% of the "
            "broker's samples, the interpreter's share no larger than in plaintext).")
    notes.append(
        "Why a TLS consume costs what it does: `sendfile` cannot encrypt, so every consumed byte is read "
        "from the page cache, encrypted (AES-256-GCM) and copied to the socket by the broker, where "
        "plaintext hands the kernel a file range. Encrypting on a thread pool, pipelined with the reads "
        "and sends, was measured too and was slower on these 2 cores (more CPU for both processes). "
        "Kernel TLS (kTLS), which would bring `sendfile` back, needs the kernel's `tls` module (absent on "
        "this machine: `modprobe tls` finds none) and Python 3.12's `ssl.OP_ENABLE_KTLS`.")
    return notes


def java_runs(broker: BrokerProcess, client: Path, work: Path, records: int, repeats: int,
              tls_bootstrap: str, ca: Path) -> dict:
    """The Java client's produce and consume over each listener (module docstring)."""
    classpath = java_classpath(client, work / "java-classes", "TlsBench.java")
    runs: dict = {"produce": {"plaintext": [], "tls": []}, "consume": {"plaintext": [], "tls": []}}
    for i in range(repeats):
        for label, bootstrap, extra in (("plaintext", broker.bootstrap, []), ("tls", tls_bootstrap, [str(ca)])):
            topic = f"bench-tls-java-{label}-{i}"
            foundation.create_topic(broker.bootstrap, topic)
            for what in ("produce", "consume"):
                cmd = ["java", "-cp", classpath, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "TlsBench",
                       bootstrap, what, topic, str(records), *extra]
                cpu0 = broker.cpu_seconds()
                _, proc, client_cpu = timed_child(cmd, text=True)
                broker_cpu = broker.cpu_seconds() - cpu0
                result = next((ln.split() for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
                if proc.returncode != 0 or result is None:
                    raise SystemExit(f"Java {what} over {label} failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
                _, count, seconds, tail = result
                if what == "produce":
                    low, high = foundation.high_watermark(broker.bootstrap, topic)
                    if int(tail) or (low, high) != (0, records):
                        raise SystemExit(f"FAIL: Java producer: {tail} errors, offsets [{low}, {high}) for {records:,}")
                elif int(count) != records or int(tail) != records * SIZE:
                    raise SystemExit(f"FAIL: Java consumer read {count} records, {tail} bytes of {records:,}")
                rate = records / float(seconds)
                runs[what][label].append({
                    "records_per_s": rate, "mb_per_s": rate * SIZE / 1e6, "seconds": float(seconds),
                    "broker_cpu_seconds": broker_cpu, "client_process_cpu_seconds": client_cpu,
                    "command": shlex.join(cmd)})
                log(f"  java {what} over {label}: {rate:,.0f} records/s (broker CPU {broker_cpu:.2f} s)")
            foundation.delete_topic(broker.bootstrap, topic)
    jar = max(client.glob("kafka-clients-*.jar")).name
    return {"client": f"Apache Kafka Java client ({jar})", "records": records, "runs": runs,
            "results": _summarise(runs, "java ")}


def openssl_floor(pki, record_sizes: tuple[int, ...] = (1040, 16384), total: int = 256 << 20) -> dict:
    """Seconds per GiB that OpenSSL alone takes (in this process, ``ssl.SSLObject`` over memory
    BIOs, as the broker uses it) to decrypt records of each size, and to encrypt them."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    client = ssl.create_default_context(cafile=str(pki.ca))
    floor = {}
    for size in record_sizes:
        c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
        c = client.wrap_bio(c_in, c_out, server_hostname="localhost")
        s = server.wrap_bio(s_in, s_out, server_side=True)
        for _ in range(6):  # the handshake, both ends in turn
            for end in (c, s):
                try:
                    end.do_handshake()
                except ssl.SSLWantReadError:
                    pass
            s_in.write(c_out.read())
            c_in.write(s_out.read())
        payload, count = b"\x5a" * size, total // size
        per_chunk = max(1, (256 << 10) // size)  # ciphertext moved 256 KiB at a time, as TlsTransport does
        enc, dec = [], []
        for _ in range(3):
            chunks = []
            t0 = time.perf_counter()
            for i in range(count):
                c.write(payload)
                if i % per_chunk == per_chunk - 1:
                    chunks.append(c_out.read())
            chunks.append(c_out.read())
            enc.append(time.perf_counter() - t0)
            buf = memoryview(bytearray(count * size + 1))
            read, got = s._sslobj.read, 0  # type: ignore[attr-defined]  # as TlsTransport reads
            t0 = time.perf_counter()
            for chunk in chunks:
                s_in.write(chunk)
                try:
                    while True:
                        got += read(len(buf) - got, buf[got:])
                except ssl.SSLWantReadError:
                    pass
            dec.append(time.perf_counter() - t0)
            assert got == count * size, (got, count * size)
        gib = count * size / (1 << 30)
        floor[str(size)] = {"decrypt_s_per_gib": statistics.median(dec) / gib,
                            "encrypt_s_per_gib": statistics.median(enc) / gib,
                            "decrypt_us_per_record": statistics.median(dec) / count * 1e6}
        log(f"OpenSSL alone, {size} B records: decrypt {floor[str(size)]['decrypt_s_per_gib']:.2f} s/GiB, "
            f"encrypt {floor[str(size)]['encrypt_s_per_gib']:.2f} s/GiB")
    return floor


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
    ap.add_argument("--java-client", type=Path, default=None,
                    help="also measure with the Java client built in DIR (module docstring)")
    args = ap.parse_args()
    cfg = dict(QUICK if args.quick else FULL)
    cfg["records"] = args.records or cfg["records"]
    cfg["repeats"] = args.repeats or cfg["repeats"]
    command = "python bench/tls.py" + (" --quick" if args.quick else "")
    if Path(args.out).resolve() != (REPO / "docs" / "benchmarks.md"):
        command += f" --out {args.out}"
    if args.java_client is not None:
        command += " --java-client DIR"
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
        data["results"] = _summarise(runs, "")
        if args.java_client is not None:
            data["java"] = java_runs(broker, args.java_client, work, cfg["records"], cfg["repeats"],
                                     tls_bootstrap, pki.ca)
        data["openssl_floor"] = openssl_floor(pki)
        data["notes"] += cpu_notes(data)
        data["broker"]["rss_mib_at_end"] = round(broker.rss_mib(), 1)
    finally:
        foundation.stop_and_clean(broker, data, work)
    quick = "`--quick` run: 100,000 records, one run; use the full run for figures."
    return foundation.finish_report(data, started, quick if args.quick else None, args.out, write_report)


if __name__ == "__main__":
    sys.exit(main())
