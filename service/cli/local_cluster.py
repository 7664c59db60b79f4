"""``strata up --brokers N``: a local cluster of N brokers, one process each.

Broker K (1..N) runs ``strata up --node-id K`` with the listener port of
``--listen`` plus K-1 (9092, 9093, 9094 by default), the HTTP port of ``--http``
plus K-1 (9644, 9645, ...), its data under ``DATA_DIR/broker-K``, and the one
object store they share (``--object-store``, default ``file://DATA_DIR/bucket``):
brokers started with the same store are one cluster. N processes are how Strata
uses N cores.

This process only starts, watches and stops them: Ctrl-C or SIGTERM sends
SIGTERM to every broker (each does a controlled shutdown and the controller
hands its lease back) and waits for all of them; a broker that exits on its own
is reported and the others keep running.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType

from service.cli.up_options import shift_ports

__all__ = ["run_local_cluster"]

_STOP_TIMEOUT_S = 30.0


def _hostport(value: str, default_port: int) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        return value, default_port
    return host.strip("[]") or "127.0.0.1", int(port)


def _commands(args: argparse.Namespace) -> list[tuple[int, list[str], str, str | None]]:
    """(node id, command, Kafka address, HTTP address) of each broker."""
    data_dir = Path(args.data_dir).resolve()
    host, port = _hostport(args.listen or "127.0.0.1:9092", 9092)
    http_off = args.http.lower() in ("off", "none", "")
    http_host, http_port = (None, 0) if http_off else _hostport(args.http, 9644)
    store = args.object_store or (data_dir / "bucket").as_uri()
    out = []
    for k in range(1, args.brokers + 1):
        listen = f"{host}:{port + k - 1}"
        http = None if http_off else f"{http_host}:{http_port + k - 1}"
        if args.listeners:  # every listener's port plus K-1
            listen = shift_ports(args.listeners, k - 1)
            where = ["--listeners", listen]
            if args.advertised_listeners:
                where += ["--advertised-listeners", shift_ports(args.advertised_listeners, k - 1)]
        else:
            where = ["--listen", listen]
        cmd = [sys.executable, "-m", "service", "up", "--node-id", str(k), *where,
               "--data-dir", str(data_dir / f"broker-{k}"),
               "--http", http or "off", "--object-store", store, *_security_flags(args)]
        if args.s3_endpoint:
            cmd += ["--s3-endpoint", args.s3_endpoint]
        if args.s3_region:
            cmd += ["--s3-region", args.s3_region]
        if getattr(args, "s3_ca_bundle", None):
            cmd += ["--s3-ca-bundle", args.s3_ca_bundle]
        for pair in args.set:
            cmd += ["--set", pair]
        if args.verbose:
            cmd.insert(4, "-v")
        out.append((k, cmd, listen, http))
    return out


def _security_flags(args: argparse.Namespace) -> list[str]:
    """The security options of ``strata up``, the same for every broker."""
    out: list[str] = []
    for flag in ("config", "ssl_cert", "ssl_key", "ssl_ca", "ssl_client_auth", "sasl_mechanisms",
                 "super_users"):
        value = getattr(args, flag, None)
        if value is not None:
            out += [f"--{flag.replace('_', '-')}", value]
    if getattr(args, "acls", False):
        out.append("--acls")
    return out


def run_local_cluster(args: argparse.Namespace) -> int:
    """Start the brokers, wait for Ctrl-C / SIGTERM, stop them all; the exit code."""
    if args.brokers < 1:
        print("strata up: --brokers takes a count of at least 1", file=sys.stderr)
        return 2
    if args.node_id is not None or args.advertise is not None:
        print("strata up: --node-id and --advertise are per broker; with --brokers each broker "
              "gets node id K and advertises its own listener", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    store = args.object_store or (Path(args.data_dir).resolve() / "bucket").as_uri()
    # Made here, before any broker: a broker that fails to start removes what its start
    # created, and a DATA_DIR it found missing would take the other brokers' data with it.
    Path(args.data_dir).resolve().mkdir(parents=True, exist_ok=True)
    try:
        for k, cmd, listen, http in _commands(args):
            # a session of its own: Ctrl-C reaches this process, which stops the brokers in order
            procs[k] = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT)
            threading.Thread(target=_relay, args=(k, procs[k]), daemon=True).start()
            where = f"broker {k}: Kafka {listen}" + (f", HTTP http://{http}/" if http else "")
            with _print_lock:
                print(f"strata: {where}, data in {Path(args.data_dir).resolve() / f'broker-{k}'}",
                      flush=True)
        bootstrap = ",".join(listen for _, _, listen, _ in _commands(args))
        print(f"strata: a cluster of {len(procs)} broker(s) sharing {store}; "
              f"bootstrap servers {bootstrap}; Ctrl-C stops them all", flush=True)
        reported: set[int] = set()
        while not stop.wait(0.5):
            for k, proc in procs.items():
                code = proc.poll()
                if code is not None and k not in reported:
                    reported.add(k)
                    print(f"strata: broker {k} exited with code {code}", flush=True)
            if len(reported) == len(procs):
                return 1
    finally:
        _stop_all(procs)
    return 0


_print_lock = threading.Lock()


def _relay(node: int, proc: subprocess.Popen[bytes]) -> None:
    """Print a broker's output line by line, each line marked with its node id."""
    assert proc.stdout is not None
    for raw in iter(proc.stdout.readline, b""):
        with _print_lock:
            print(f"[broker {node}] {raw.decode(errors='replace').rstrip()}", flush=True)


def _stop_all(procs: dict[int, subprocess.Popen[bytes]]) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for k, proc in procs.items():
        try:
            proc.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"strata: broker {k} did not stop in {_STOP_TIMEOUT_S:.0f} s; killing it", flush=True)
            proc.kill()
            proc.wait()
    if procs:
        print(f"strata: all {len(procs)} broker(s) stopped", flush=True)
