"""Broker processes, the S3 server they share, and what the bucket says about them.

:class:`JepsenCluster` starts ``python -m service up`` for nodes 1..N from the repository
this file is in (``PYTHONPATH`` set to it), each placed on the :class:`~.net.Network`
(its own namespace, or loopback behind proxies), all with ``--object-store
s3://BUCKET/strata`` on one moto server that runs as its own process on the network's
S3 address. Every process it starts it ends, by pid, in :meth:`close`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import IO, Any

from .net import Network

__all__ = ["DEFAULT_SETS", "FAST", "JepsenCluster"]

REPO = Path(__file__).resolve().parents[2]

#: tests/cluster_fixtures.py's FAST timings (a 3 s lease, 3 s broker sessions)
FAST: dict[str, str] = {
    "controller.lease.ms": "3000",
    "controller.lease.renew.ms": "500",
    "controller.lease.safety.margin.ms": "500",
    "controller.lease.clock.skew.ms": "300",
    "controller.lease.poll.ms": "200",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "metadata.poll.interval.ms": "200",
    "controlled.shutdown.timeout.ms": "2000",
    "replica.fetch.backoff.ms": "200",
}
#: set in both modes: small internal topics (2 cores), no rebalance delay
DEFAULT_SETS: dict[str, str] = {
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.num.partitions": "6",
    "group.initial.rebalance.delay.ms": "0",
}
_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1"}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "STRATA_BOOTSTRAP"))}
    env.update(_CREDENTIALS)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Broker:
    """One broker process (not thread-safe: the nemesis thread alone drives it)."""

    def __init__(self, node: int, cmd: list[str], admin_url: str, bootstrap: str, log: Path) -> None:
        self.node, self.cmd, self.admin_url, self.bootstrap, self.log_path = node, cmd, admin_url, bootstrap, log
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.paused = False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self.running:
            return
        self._close_log()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - held for the process's life
        self._log.write(f"\n===== jepsen: start {' '.join(self.cmd)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, env=_env(), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        self.paused = False

    def signal(self, sig: int) -> None:
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, sig)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.paused = False
        self._close_log()

    def stop(self, timeout_s: float) -> bool:
        """SIGTERM and wait; True if it exited in time (else it is killed)."""
        if not self.running:
            return True
        assert self.proc is not None
        if self.paused:
            self.signal(signal.SIGCONT)
            self.paused = False
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
            self._close_log()
            return True
        except subprocess.TimeoutExpired:
            self.kill()
            return False

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.admin_url}/v1/ready", timeout=1) as r:
                return r.status == 200
        except Exception:  # noqa: BLE001 - not ready yet, or cut off
            return False

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"broker {self.node} exited; see {self.log_path}")
            if self.ready():
                return
            time.sleep(0.1)
        raise RuntimeError(f"broker {self.node} not ready in {timeout_s:.0f} s; see {self.log_path}")


class JepsenCluster:
    def __init__(self, net: Network, work: Path, size: int = 3, sets: dict[str, str] | None = None,
                 s3_port: int | None = None) -> None:
        self.net, self.work, self.size = net, work, size
        work.mkdir(parents=True, exist_ok=True)
        self.bucket = f"jepsen-{uuid.uuid4().hex[:12]}"
        self.prefix = "strata"
        self._moto: subprocess.Popen[bytes] | None = None
        self.s3_port = s3_port or self._free_port(net.s3_host)
        net.set_s3_port(self.s3_port)
        self.s3_url = f"http://{net.s3_host}:{self.s3_port}"
        self.brokers: dict[int, Broker] = {}
        for n in range(1, size + 1):
            listen, own_sets = net.broker_args(n)
            merged = {**DEFAULT_SETS, **(sets or {}), **own_sets}
            cmd = [sys.executable, "-m", "service", "up", "--node-id", str(n),
                   "--data-dir", str(work / f"broker-{n}"), *listen,
                   "--object-store", f"s3://{self.bucket}/{self.prefix}", "--s3-endpoint", net.s3_endpoint(n)]
            for key, value in merged.items():
                cmd += ["--set", f"{key}={value}"]
            self.brokers[n] = Broker(n, net.broker_command(n, cmd), net.admin_url(n), net.bootstrap(n),
                                     work / f"broker-{n}.log")

    @staticmethod
    def _free_port(host: str) -> int:
        with socket.socket() as s:
            s.bind((host, 0))
            return int(s.getsockname()[1])

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self, ready_timeout_s: float = 60) -> JepsenCluster:
        log = open(self.work / "moto.log", "ab")  # noqa: SIM115 - the child keeps it
        self._moto = subprocess.Popen([sys.executable, str(Path(__file__).with_name("moto_proc.py")),
                                       self.net.s3_host, str(self.s3_port)],
                                      env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                self._s3().create_bucket(Bucket=self.bucket)
                break
            except Exception:
                if time.monotonic() > deadline or self._moto.poll() is not None:
                    raise RuntimeError(f"moto did not start; see {self.work / 'moto.log'}") from None
                time.sleep(0.2)
        self.start_brokers(list(self.brokers), ready_timeout_s)
        return self

    def start_brokers(self, nodes: list[int], ready_timeout_s: float = 60) -> None:
        for n in nodes:
            self.brokers[n].start()
        errors: list[BaseException] = []

        def wait(n: int) -> None:
            try:
                self.brokers[n].wait_ready(ready_timeout_s)
            except BaseException as exc:  # noqa: BLE001 - raised below
                errors.append(exc)

        threads = [threading.Thread(target=wait, args=(n,)) for n in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def _s3(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.s3_url, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing",
                            config=Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 2}))

    def lease(self) -> dict[str, Any]:
        try:
            body = self._s3().get_object(Bucket=self.bucket, Key=f"{self.prefix}/cluster/controller-lease")
            return dict(json.loads(body["Body"].read()))
        except Exception:  # noqa: BLE001 - no lease yet
            return {}

    def controller_id(self) -> int:
        """The lease holder (-1: none), read from the bucket as every broker reads it."""
        return int(self.lease().get("holder", -1))

    def close(self) -> None:
        for b in self.brokers.values():
            try:
                b.kill()
            except Exception as exc:  # noqa: BLE001 - every broker must be reached
                print(f"could not kill broker {b.node}: {exc}", file=sys.stderr)
        if self._moto is not None and self._moto.poll() is None:
            self._moto.kill()
            self._moto.wait()
