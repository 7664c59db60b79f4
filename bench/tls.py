"""Strata over TLS vs plaintext: produce and consume 1 KiB records, same broker, same run.

    python bench/tls.py [--quick] [--out docs/benchmarks.md] [--records N] [--repeats N] [--java-client DIR]

Starts one single-node broker (bench/foundation.py's BrokerProcess) with two listeners,
``PLAINTEXT`` and ``SSL`` (a throwaway CA and server certificate made with
``cryptography``; TLS 1.3, OpenSSL's default suite, AES-256-GCM), and measures each
direction over each listener in turn (plaintext first, then TLS, ``--repeats`` times; the
median run of each is reported) from three clients:

* **kcat**, bench/foundation.py's produce (acks=1, linger.ms=5, 1 MiB batches) and consume
  from the beginning to the end;
* **a lean client** (bench/tls_loadgen.py: 1,000-record batches sent again and again, 8 in
  flight; Fetch to the end; every response and batch checked), which costs so little CPU
  that the broker is what the rate measures: the broker-bound view, with the broker's
  threads on the last CPU and the client on the first (``taskset``; unpinned, the two were
  now and then put on one core and the rate halved);
* with ``--java-client DIR`` (a directory holding ``kafka-clients-*.jar`` and its ``lib/``,
  as ``shared/tools/java-client/build.sh`` builds it), **the Apache Kafka Java client**
  (``bench/java/TlsBench.java``: a default producer, idempotent with acks=all, 512 KiB
  batches; a consumer reading from the beginning).

The ratio TLS/plaintext is the figure (target: at least 70%). Client and broker share the
machine's cores, so kcat's and the Java client's figures carry their own TLS costs; the
report says how far the clients' CPU alone bounds them. The bench also measures what each
TLS library the broker has (the ``ssl`` module's OpenSSL and the wheel's one the Kafka
listeners use, service/security/tls_engine.py) takes to decrypt and encrypt a GiB in 1 KiB
and 16 KiB records, in this process.

Before each produce run 1.5 GiB is written through the page cache and deleted: on a VM
with free page reporting (this one: Firecracker, ``page_reporting_order=11``) memory a
deleted topic gave back is handed to the host and is several times slower to touch
again, which otherwise lands on whichever run writes next.

Writes its section of docs/benchmarks.md between ``<!-- tls:start -->`` and
``<!-- tls:end -->`` and docs/benchmarks-tls.json.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
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
FULL = {"records": 1_000_000, "repeats": 3, "lean_repeats": 7, "prewarm_gib": 4}
QUICK = {"records": 100_000, "repeats": 1, "lean_repeats": 1, "prewarm_gib": 0.5}
TARGET = 0.70
WARM_GIB = 1.5  # written and deleted before each produce run (module docstring)
CHUNK = 256 * 1024  # plaintext the broker encrypts at a time (service/security/tls_transport.py)


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


def _warm(work: Path) -> None:
    """Write and delete WARM_GIB through the page cache before a produce run (module docstring)."""
    foundation.prewarm_memory(work, WARM_GIB, quiet=True)


def _cpu_per_gib(run: dict) -> str:
    return f"{run['broker_cpu_seconds'] / (run['records'] * SIZE / (1 << 30)):.2f}"


def write_report(data: dict, md_path: Path) -> None:
    json_path = md_path.with_name("benchmarks-tls.json")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    m = data["machine"]
    r = data["results"]
    lean = data["lean"]["results"]
    L = [
        f"<!-- {MARK}:start -->",
        "## TLS vs plaintext (`bench/tls.py`)",
        "",
        (f"Command: `{data['command']}` — {data['date']}; {m['nproc']} CPUs {m['cpu_model']}, "
         f"{m['memory_gib']} GiB, Linux {m['kernel']}, Python {m['python']}. TLS libraries: the Kafka "
         f"listeners' {data['openssl']['listeners']} (the `cryptography` wheel's, through pyOpenSSL: "
         f"service/security/tls_engine.py), the `ssl` module's {data['openssl']['ssl_module']}. "
         f"Broker: `{data['broker']['command']}` (certificate flags elided). Raw figures: "
         "`docs/benchmarks-tls.json`."),
        "",
        (f"One broker with a `PLAINTEXT` and an `SSL` listener; {data['config']['records']:,} records of "
         f"{SIZE} B produced and then consumed from the beginning, over each listener in turn, "
         f"{data['config']['repeats']} time(s); the median run of each is shown. TLS: {data['tls_version']}, "
         f"{data['tls_cipher']}. Clients and broker share the same {m['nproc']} cores. Target: TLS at least "
         f"{TARGET:.0%} of plaintext."),
        "",
        ("**The broker's view** (bench/tls_loadgen.py, a client that costs little: 1,000-record batches sent "
         "again and again, 8 in flight, acks=1; Fetch to the end, every batch's CRC checked; over TLS it "
         "writes whole requests, so the broker gets 16 KiB records, as from the Java client; "
         f"{data['config']['lean_repeats']} run(s) of each, the broker's threads on the last CPU and the client "
         "on the first, so that neither waits for the other's core). "
         + ("The broker's core is what runs out here (it was at least 90% busy in every median run), so the "
            "ratio is the broker's own:" if _broker_bound(lean) else
            "The broker's core was not always what ran out (see the notes):")),
        "",
        ("| | plaintext records/s | TLS records/s | TLS / plaintext | broker CPU s per GiB plaintext / TLS | "
         "client CPU s plaintext / TLS | target met |"),
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for what in ("produce", "consume"):
        p, t, ratio = lean[what]["plaintext"], lean[what]["tls"], lean[what]["ratio"]
        L.append(f"| {what} 1 KiB | {p['records_per_s']:,.0f} | {t['records_per_s']:,.0f} | {ratio:.0%} | "
                 f"{_cpu_per_gib(p)} / {_cpu_per_gib(t)} | "
                 f"{p['client_cpu_seconds']:.2f} / {t['client_cpu_seconds']:.2f} | "
                 f"{'yes' if ratio >= TARGET else 'no'} |")
    L += ["", ("**kcat** (acks=1, linger.ms=5, 1 MiB batches; consuming from the beginning to the end): "
               "its own TLS work shares the cores with the broker:"), "",
          ("| | plaintext records/s | TLS records/s | plaintext MB/s | TLS MB/s | TLS / plaintext | "
           "broker CPU s plaintext / TLS | kcat CPU s plaintext / TLS | target met |"),
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for what in ("produce", "consume"):
        p, t = r[what]["plaintext"], r[what]["tls"]
        ratio = r[what]["ratio"]
        L.append(f"| {what} 1 KiB | {p['records_per_s']:,.0f} | {t['records_per_s']:,.0f} | "
                 f"{p['mb_per_s']:,.1f} | {t['mb_per_s']:,.1f} | {ratio:.0%} | "
                 f"{p['broker_cpu_seconds']:.2f} / {t['broker_cpu_seconds']:.2f} | "
                 f"{p['client_cpu_seconds']:.2f} / {t['client_cpu_seconds']:.2f} | "
                 f"{'yes' if ratio >= TARGET else 'no'} |")
    L += ["", ("Commands (TLS adds `-X security.protocol=SSL -X ssl.ca.location=CA`, `--ca CA` for the lean "
               "client):"), "", "```", data["broker"]["command"], r["produce"]["tls"]["command"],
          r["consume"]["tls"]["command"], lean["produce"]["tls"]["command"], lean["consume"]["tls"]["command"],
          "```"]
    java = data.get("java")
    if java:
        L += ["", (f"**The {java['client']}** (`bench/java/TlsBench.java`: the producer's defaults, "
                   "idempotent with acks=all, and 512 KiB batches; a consumer from the beginning; the rate and "
                   "the JVM's CPU, every thread's, its compilers' included, are measured inside the JVM over the "
                   "timed part):"), "",
              ("| | plaintext records/s | TLS records/s | TLS / plaintext | broker CPU s plaintext / TLS | "
               "JVM CPU s plaintext / TLS | target met |"),
              "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for what in ("produce", "consume"):
            p, t = java["results"][what]["plaintext"], java["results"][what]["tls"]
            ratio = java["results"][what]["ratio"]
            L.append(f"| {what} 1 KiB | {p['records_per_s']:,.0f} | {t['records_per_s']:,.0f} | {ratio:.0%} | "
                     f"{p['broker_cpu_seconds']:.2f} / {t['broker_cpu_seconds']:.2f} | "
                     f"{p['client_cpu_seconds']:.2f} / {t['client_cpu_seconds']:.2f} | "
                     f"{'yes' if ratio >= TARGET else 'no'} |")
    floor = data.get("openssl_floor")
    if floor:
        L += ["", ("What each TLS library alone takes in this process (a connection over memory BIOs; no "
                   "sockets, no Kafka), per GiB of payload, as the broker calls it:"), "",
              "| library | record size | decrypt s/GiB | µs per record | encrypt s/GiB |",
              "| --- | ---: | ---: | ---: | ---: |"]
        for library, sizes in floor.items():
            for size, f in sizes.items():
                L.append(f"| {library} | {int(size):,} B | {f['decrypt_s_per_gib']:.2f} | "
                         f"{f['decrypt_us_per_record']:.2f} | {f['encrypt_s_per_gib']:.2f} |")
    if data.get("notes"):
        L += [""] + [f"- {n}" for n in data["notes"]]
    L.append(f"<!-- {MARK}:end -->")
    foundation.write_section(md_path, MARK, "\n".join(L))
    log(f"wrote {md_path} ({MARK} section) and {json_path}")


def _broker_bound(lean: dict) -> bool:
    return all(lean[w][k]["broker_cpu_seconds"] / lean[w][k]["seconds"] >= 0.9
               for w in ("produce", "consume") for k in ("plaintext", "tls"))


def _busy(run: dict) -> str:
    return f"{run['broker_cpu_seconds'] / run['seconds']:.0%}"


def cpu_notes(data: dict) -> list[str]:
    """Where the time goes, from the runs' CPU seconds (clients and broker share the cores)."""
    notes = []
    cores = data["machine"]["nproc"]
    lean = data["lean"]["results"]
    consume = lean["consume"]
    if consume["ratio"] > 1:
        notes.append(
            "The broker's view, consume: TLS is faster than plaintext here because `sendfile` into a loopback "
            f"socket cost this broker {_cpu_per_gib(consume['plaintext'])} s of CPU per GiB (the kernel's "
            "splice path, and TCP's receive side, which on loopback runs in the sender's call), more than "
            f"reading, encrypting and sending 256 KiB buffers did ({_cpu_per_gib(consume['tls'])} s).")
    for what in ("produce", "consume"):
        p, t = lean[what]["plaintext"], lean[what]["tls"]
        notes.append(
            f"The broker's view, {what}: the broker's CPU over the run was {_busy(p)} of its time in plaintext "
            f"and {_busy(t)} over TLS, {_cpu_per_gib(p)} against {_cpu_per_gib(t)} s per GiB; the client used "
            f"{p['client_cpu_seconds']:.2f} and {t['client_cpu_seconds']:.2f} s (the broker's CPU is read from "
            "/proc in 10 ms ticks around the client's whole process, its start and handshake included, the time "
            "over the client's timed part only: a few percent either way).")
    views = [("kcat", data["results"])] + ([("the Java client", data["java"]["results"])] if data.get("java") else [])
    for who, results in views:
        for what in ("produce", "consume"):
            notes.append(_client_bound(who, what, results[what], cores))
    notes.append(
        "Why kcat's TLS produce costs it what it does: librdkafka calls `SSL_write` once per piece of its "
        "request buffer, and each becomes a TLS record and a `write` system call (counted with `strace -c` "
        "on this machine: 360,292 writes for 1 GiB over TLS against 4,300 `sendmsg` calls in plaintext), "
        "and it keeps the records it could not send yet in memory it has to fault in. The broker decrypts "
        "those records one by one: about 1 µs each.")
    notes.append(
        "Why a TLS consume costs the broker what it does: `sendfile` cannot encrypt, so every consumed byte "
        "is read from the page cache, encrypted and copied to the socket, where plaintext hands the kernel "
        "a file range. Kernel TLS (kTLS), which would bring `sendfile` back, needs the kernel's `tls` module "
        "(absent on this machine: `modprobe tls` finds none) and an OpenSSL built with it.")
    return notes


def _client_bound(who: str, what: str, result: dict, cores: int) -> str:
    """How the client's own CPU bounds its TLS/plaintext ratio when it shares the cores: a
    bound while the cores are what runs out (both runs at least 90% busy), else an estimate."""
    p, t = result["plaintext"], result["tls"]
    plain = p["broker_cpu_seconds"] + p["client_cpu_seconds"]
    tls = t["broker_cpu_seconds"] + t["client_cpu_seconds"]
    free_broker = p["broker_cpu_seconds"] + t["client_cpu_seconds"]
    busy_p, busy_t = plain / p["seconds"] / cores, tls / t["seconds"] / cores
    text = (f"{who}, {what}: the broker used {t['broker_cpu_seconds']:.2f} s of CPU over TLS against "
            f"{p['broker_cpu_seconds']:.2f} s in plaintext, the client {t['client_cpu_seconds']:.2f} s against "
            f"{p['client_cpu_seconds']:.2f} s; together {tls:.2f} against {plain:.2f} CPU-seconds ({plain / tls:.0%}); "
            f"the {cores} cores were {busy_p:.0%} busy in plaintext and {busy_t:.0%} over TLS. ")
    if min(busy_p, busy_t) >= 0.9:
        return text + (f"The cores are what ran out, so had the broker spent no more over TLS than in plaintext, "
                       f"the client's own TLS work would still bound the ratio at {plain / free_broker:.0%}.")
    return text + (f"The cores did not run out (the client waits on more than CPU), so the same sum "
                   f"({plain / free_broker:.0%}, had the broker spent nothing more) is an estimate, not a bound.")


def _pin(pid: int, cpu: int) -> dict[int, set[int]]:
    """Every thread of ``pid`` onto ``cpu``; each thread's CPUs before, to give back."""
    before: dict[int, set[int]] = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            before[int(task)] = os.sched_getaffinity(int(task))
            os.sched_setaffinity(int(task), {cpu})
    return before


def _unpin(before: dict[int, set[int]]) -> None:
    for task, cpus in before.items():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(task, cpus)


def lean_runs(broker: BrokerProcess, work: Path, records: int, repeats: int, tls_bootstrap: str,
              ca: Path) -> dict:
    """bench/tls_loadgen.py's produce and consume over each listener (module docstring): the
    broker on the last CPU this bench may use, the client on the first, so that neither
    waits for the other's core."""
    runs: dict = {"produce": {"plaintext": [], "tls": []}, "consume": {"plaintext": [], "tls": []}}
    cpus = sorted(os.sched_getaffinity(0))
    pinned: dict[int, set[int]] = {}
    try:
        if len(cpus) > 1:
            pinned = _pin(broker.proc.pid, cpus[-1])
        _lean_repeats(broker, work, records, repeats, tls_bootstrap, ca, runs,
                      pin=str(cpus[0]) if len(cpus) > 1 else None)
    finally:
        _unpin(pinned)  # the threads as they were (the broker's own pinning of its reader threads included)
    return {"runs": runs, "results": _summarise(runs, "lean "), "pinned": len(cpus) > 1}


def _lean_repeats(broker: BrokerProcess, work: Path, records: int, repeats: int, tls_bootstrap: str,
                  ca: Path, runs: dict, pin: str | None) -> None:
    for i in range(repeats):
        for label, bootstrap, extra in (("plaintext", broker.bootstrap, []), ("tls", tls_bootstrap,
                                                                              ["--ca", str(ca)])):
            topic = f"bench-tls-lean-{label}-{i}"
            foundation.create_topic(broker.bootstrap, topic)
            for what in ("produce", "consume"):
                if what == "produce":
                    _warm(work)
                    foundation.sync_disks()
                cmd = [sys.executable, str(BENCH / "tls_loadgen.py"), what, bootstrap, topic, str(records), *extra]
                if pin is not None:
                    cmd = ["taskset", "-c", pin, *cmd]
                cpu0 = broker.cpu_seconds()
                _, proc, _ = timed_child(cmd, text=True)
                broker_cpu = broker.cpu_seconds() - cpu0
                if proc.returncode != 0:
                    raise SystemExit(f"FAIL: lean {what} over {label} (rc {proc.returncode}): {proc.stderr[-2000:]}"
                                     f"{proc.stdout[-500:]}")
                result = json.loads(proc.stdout.strip().splitlines()[-1])
                if what == "produce":
                    low, high = foundation.high_watermark(broker.bootstrap, topic)
                    if (low, high) != (0, records):
                        raise SystemExit(f"FAIL: lean producer: offsets [{low}, {high}) for {records:,}")
                shown = [{str(ca): "CA", sys.executable: "python", str(BENCH / "tls_loadgen.py"):
                          "bench/tls_loadgen.py"}.get(c, c) for c in cmd]
                runs[what][label].append({**result, "broker_cpu_seconds": broker_cpu, "command": shlex.join(shown)})
                log(f"  lean {what} over {label}: {result['records_per_s']:,.0f} records/s "
                    f"(broker CPU {broker_cpu:.2f} s, client CPU {result['client_cpu_seconds']:.2f} s)")
            foundation.delete_topic(broker.bootstrap, topic)


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
                if what == "produce":
                    _warm(work)
                cmd = ["java", "-cp", classpath, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "TlsBench",
                       bootstrap, what, topic, str(records), *extra]
                cpu0 = broker.cpu_seconds()
                _, proc, client_cpu = timed_child(cmd, text=True)
                broker_cpu = broker.cpu_seconds() - cpu0
                result = next((ln.split() for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
                if proc.returncode != 0 or result is None:
                    raise SystemExit(f"Java {what} over {label} failed (rc {proc.returncode}): {proc.stderr[-2000:]}")
                _, count, seconds, tail, window_cpu = result
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
                    "client_cpu_seconds": float(window_cpu), "command": shlex.join(cmd)})
                log(f"  java {what} over {label}: {rate:,.0f} records/s (broker CPU {broker_cpu:.2f} s)")
            foundation.delete_topic(broker.bootstrap, topic)
    jar = max(client.glob("kafka-clients-*.jar")).name
    return {"client": f"Apache Kafka Java client ({jar})", "records": records, "runs": runs,
            "results": _summarise(runs, "java ")}


class _Ends:
    """A client ``ssl.SSLObject`` over memory BIOs and the server end of one TLS library,
    handshaken; the server end is called as the broker calls it."""

    def __init__(self, library: str, settings, client: ssl.SSLContext) -> None:  # type: ignore[no-untyped-def]
        if library == "ssl module":
            from service.security.tls import server_context

            self.c_in, self.c_out = ssl.MemoryBIO(), ssl.MemoryBIO()
            self.cli = client.wrap_bio(self.c_in, self.c_out, server_hostname="localhost")
            self.s_in, self.s_out = ssl.MemoryBIO(), ssl.MemoryBIO()
            self.srv = server_context(settings).wrap_bio(self.s_in, self.s_out, server_side=True)
            self._read = self.srv._sslobj.read  # type: ignore[attr-defined]  # the C method, as before tls_engine
            self.feed, self.decrypt, self.encrypt = self.s_in.write, self._std_decrypt, self._std_encrypt
            self.records = self._std_records
        else:  # the listeners' library, its records read by the broker's own step (the C loop if built)
            from service.security.tls_engine import ffi, lib, listener_context
            from service.security.tls_transport import record_step
            from tests.security_fixtures import client_records, listener_handshake

            self.lib, self.ffi = lib, ffi
            self.cli, self.conn = listener_handshake(listener_context(settings), client)
            self.records = lambda plaintext: client_records(self.cli, plaintext)
            self.step = record_step(self.conn)
            self.out = bytearray(CHUNK + 65536)
            self.out_ptr = ffi.from_buffer(self.out)
            self.feed, self.decrypt, self.encrypt = self._ossl_feed, self._ossl_decrypt, self._ossl_encrypt
            return
        for _ in range(6):
            for step in (self.cli.do_handshake, self.srv.do_handshake):
                try:
                    step()
                except ssl.SSLWantReadError:
                    pass
            if data := self.c_out.read():
                self.s_in.write(data)
            self.c_in.write(self.s_out.read())

    def _std_records(self, plaintext: bytes) -> bytes:
        self.cli.write(plaintext)
        return self.c_out.read()

    def _std_decrypt(self, buf: memoryview, got: int) -> int:
        try:
            while True:
                got += self._read(len(buf) - got, buf[got:])
        except ssl.SSLWantReadError:
            return got

    def _std_encrypt(self, chunk: memoryview) -> None:
        self.srv.write(chunk)
        self.s_out.read()

    def _ossl_feed(self, data: bytes) -> None:
        self.fed = data

    def _ossl_decrypt(self, buf: memoryview, got: int) -> int:
        got, _, _ = self.step(self.fed, 0, len(self.fed), 64 << 10, buf, got)
        return got

    def _ossl_encrypt(self, chunk: memoryview) -> None:
        lib, ssl_, bio = self.lib, self.conn._ssl, self.conn._from_ssl
        ptr, done = self.ffi.from_buffer(chunk), 0
        while done < len(chunk):
            done += lib.SSL_write(ssl_, ptr + done, min(len(chunk) - done, 16384))
            while lib.BIO_read(bio, self.out_ptr, len(self.out)) > 0:
                pass


def openssl_floor(pki, record_sizes: tuple[int, ...] = (1040, 16384), total: int = 256 << 20) -> dict:  # type: ignore[no-untyped-def]
    """Seconds per GiB that each TLS library takes, in this process, to decrypt records of
    each size and to encrypt 256 KiB chunks (module docstring)."""
    from service.security.tls import TlsSettings

    settings = TlsSettings(
        keystore_location=None, certificate_chain=None, private_key=None, key_password=None,
        truststore_location=None, truststore_certificates=None, client_auth="none",
        enabled_protocols=("TLSv1.2", "TLSv1.3"), cipher_suites=(), endpoint_identification=False,
        certificate_location=str(pki.server_cert), key_location=str(pki.server_key))
    client = ssl.create_default_context(cafile=str(pki.ca))
    floor: dict = {}
    for library in ("ssl module", "Kafka listeners"):
        floor[library] = {}
        for size in record_sizes:
            enc, dec = [], []
            count = total // size
            for _ in range(3):
                ends = _Ends(library, settings, client)
                payload, per_chunk = b"\x5a" * size, max(1, (256 << 10) // size)  # ciphertext 256 KiB at a time
                chunks = [b"".join(ends.records(payload) for _ in range(min(per_chunk, count - i)))
                          for i in range(0, count, per_chunk)]
                buf = memoryview(bytearray(count * size + 1))
                got = 0
                t0 = time.perf_counter()
                for chunk in chunks:
                    ends.feed(chunk)
                    got = ends.decrypt(buf, got)
                dec.append(time.perf_counter() - t0)
                assert got == count * size, (library, got, count * size)
                plain = memoryview(bytearray(CHUNK))
                t0 = time.perf_counter()
                for _ in range(total // CHUNK):
                    ends.encrypt(plain)
                enc.append(time.perf_counter() - t0)
            gib = count * size / (1 << 30)
            f = floor[library][str(size)] = {"decrypt_s_per_gib": statistics.median(dec) / gib,
                                             "encrypt_s_per_gib": statistics.median(enc) / (total / (1 << 30)),
                                             "decrypt_us_per_record": statistics.median(dec) / count * 1e6}
            log(f"{library}, {size} B records: decrypt {f['decrypt_s_per_gib']:.2f} s/GiB, "
                f"encrypt {f['encrypt_s_per_gib']:.2f} s/GiB")
    return floor


def _negotiated(port: int, ca: Path) -> tuple[str, str]:
    import socket

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
    cfg["lean_repeats"] = max(cfg["repeats"], cfg["lean_repeats"])  # a second a run: more of them
    command = "python bench/tls.py" + (" --quick" if args.quick else "")
    if Path(args.out).resolve() != (REPO / "docs" / "benchmarks.md"):
        command += f" --out {args.out}"
    if args.java_client is not None:
        command += " --java-client DIR"
    work = Path(tempfile.mkdtemp(prefix="strata-bench-tls-", dir=args.work_dir))
    from tests.security_fixtures import Pki

    pki = Pki(work)
    from service.security.tls_engine import openssl_version

    data: dict = {"command": command, "mode": "quick" if args.quick else "full",
                  "openssl": {"listeners": openssl_version(), "ssl_module": ssl.OPENSSL_VERSION},
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
                _warm(work)
                runs["produce"][label].append(foundation.run_produce(
                    broker, topic, records, SIZE, cfg["records"], None, "", bootstrap=bootstrap, extra_x=extra))
                runs["consume"][label].append(foundation.run_consume_kcat(
                    broker, topic, SIZE, cfg["records"], bootstrap=bootstrap, extra_x=extra))
                foundation.delete_topic(broker.bootstrap, topic)
        data["runs"] = runs
        data["results"] = _summarise(runs, "")
        log("== the broker's view: bench/tls_loadgen.py")
        data["lean"] = lean_runs(broker, work, cfg["records"], cfg["lean_repeats"], tls_bootstrap, pki.ca)
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
