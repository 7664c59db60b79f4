"""A cluster of real broker processes sharing one object store, for tests.

``start_cluster`` (function scope) and ``module_start_cluster`` (module scope)
are factories::

    def test_x(start_cluster):
        cluster = start_cluster(3)                      # file:// store under tmp
        cluster = start_cluster(3, s3=s3_bucket)        # a moto S3 bucket (tests/s3_fixtures.py)
        cluster = start_cluster(3, racks={1: "a", 2: "b", 3: "c"})  # broker.rack of each
        cluster = start_cluster(3, proxied=True)        # traffic between brokers via cluster.proxies
        cluster.bootstrap                               # "127.0.0.1:p1,127.0.0.1:p2,..."
        cluster.controller_id()                         # the lease holder, read from the bucket
        cluster.kill(2); cluster.restart(2)

Each broker is a :class:`tests.conftest.BrokerProcess` started with ``--node-id N``
and the shared ``--object-store``; :meth:`Cluster.start` starts them all at once
and waits until each answers ``/v1/ready`` (joined, unfenced, serving). Timings
are short (:data:`FAST`: a 3 s controller lease, 3 s broker sessions) so failover
tests take seconds. Every broker is killed at teardown; logs are in
``<tmp>/broker-N.log``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BrokerProcess, free_port
from tests.e2e.tcp_proxy import CuttingProxy
from tests.s3_fixtures import S3Bucket

__all__ = ["FAST", "Cluster", "module_start_cluster", "start_cluster"]

#: Short lease and session timings for tests (docs/adr/0009-controller-lease.md).
FAST: Mapping[str, str] = {
    "controller.lease.ms": "3000",
    "controller.lease.renew.ms": "500",
    "controller.lease.safety.margin.ms": "500",
    "controller.lease.clock.skew.ms": "300",
    "controller.lease.poll.ms": "200",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "metadata.poll.interval.ms": "200",
    "controlled.shutdown.timeout.ms": "2000",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "6",
    "replica.fetch.backoff.ms": "200",
}
READY_TIMEOUT_S = 45.0


class Cluster:
    """Brokers 1..N on loopback sharing one object store (see the module docstring)."""

    def __init__(
        self,
        base: Path,
        size: int,
        *,
        s3: S3Bucket | None = None,
        sets: Mapping[str, str] | None = None,
        racks: Mapping[int, str] | None = None,
        proxied: bool = False,
        s3_endpoints: Mapping[int, str] | None = None,
        listeners: str | None = None,
        args: list[str] | None = None,
    ) -> None:
        """``listeners``: ``--listeners`` of each broker, ``{port}`` its client port (the
        one waited for) and ``{port2}`` one more of its own; ``args``: more options."""
        self.base = base
        #: with ``proxied``: broker N's REPLICATION listener (the one brokers use between
        #: themselves) is advertised behind ``proxies[N]``, which a test can partition
        self.proxies: dict[int, CuttingProxy] = {}
        if s3 is not None:
            self.store_url = f"s3://{s3.bucket}/cluster"
            store_args = ["--object-store", self.store_url, "--s3-endpoint", s3.endpoint_url]
        else:
            self.store_dir = base / "bucket"
            self.store_url = self.store_dir.as_uri()
            store_args = ["--object-store", self.store_url]
        self.s3 = s3
        merged = {**FAST, **(sets or {})}
        self.brokers: dict[int, BrokerProcess] = {}
        for n in range(1, size + 1):
            port = free_port()
            own = dict(merged)
            if racks and n in racks:
                own["broker.rack"] = racks[n]
            own_listeners = None if listeners is None else listeners.replace("{port2}", str(free_port()))
            if proxied:
                replication = free_port()
                proxy = self.proxies[n] = CuttingProxy(replication)
                own_listeners = f"PLAINTEXT://127.0.0.1:{port},REPLICATION://127.0.0.1:{replication}"
                own.update({
                    "advertised.listeners":
                        f"PLAINTEXT://127.0.0.1:{port},REPLICATION://127.0.0.1:{proxy.port}",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
                    "inter.broker.listener.name": "REPLICATION",
                })
            own_args = ["--node-id", str(n), *store_args, *(args or [])]
            if s3_endpoints and n in s3_endpoints:
                own_args[own_args.index("--s3-endpoint") + 1] = s3_endpoints[n]
            self.brokers[n] = BrokerProcess(
                base / f"broker-{n}" / "data", port, sets=own, log_path=base / f"broker-{n}.log",
                args=own_args, listeners=own_listeners,
            )

    # -- addresses ------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def live_bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.running)

    def node_of_port(self, port: int) -> int:
        return next(n for n, b in self.brokers.items() if b.port == port)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, *nodes: int) -> Cluster:
        """Start ``nodes`` (default: all) at once; return when each is ready."""
        wanted = nodes or tuple(self.brokers)
        errors: list[BaseException] = []

        def start(node: int) -> None:
            try:
                self.brokers[node].start()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(n,)) for n in wanted]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        for n in wanted:
            self.wait_ready(n)
        return self

    def wait_ready(self, node: int, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until broker ``node`` has joined and serves (its ``/v1/ready`` says so)."""
        broker = self.brokers[node]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not broker.running:
                raise RuntimeError(f"broker {node} exited; log:\n{broker.log_tail()}")
            try:
                with urllib.request.urlopen(f"{broker.admin_url}/v1/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"broker {node} not ready in {timeout_s:.0f} s; log:\n{broker.log_tail()}")

    def kill(self, node: int) -> None:
        """kill -9."""
        self.brokers[node].kill()

    def stop(self, node: int) -> int | None:
        """SIGTERM (a clean stop: controlled shutdown, lease handed back)."""
        return self.brokers[node].stop()

    def restart(self, node: int) -> None:
        """Start a stopped or killed broker again on its data dir and port; wait until ready."""
        self.brokers[node].start()
        self.wait_ready(node)

    def close(self) -> None:
        for broker in self.brokers.values():
            try:
                broker.kill()
            except Exception as exc:  # noqa: BLE001 - teardown must reach every broker
                print(f"could not kill {broker}: {exc}", file=sys.stderr)
        for proxy in self.proxies.values():
            proxy.close()

    # -- the bucket -----------------------------------------------------------------------

    def read_object(self, key: str) -> bytes | None:
        """An object of the cluster's store (``cluster/controller-lease``...), or None."""
        if self.s3 is None:
            path = self.store_dir / key
            return path.read_bytes() if path.exists() else None
        import boto3

        client = boto3.client("s3", endpoint_url=self.s3.endpoint_url, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        try:
            return bytes(client.get_object(Bucket=self.s3.bucket, Key=f"cluster/{key}")["Body"].read())
        except client.exceptions.NoSuchKey:
            return None

    def lease(self) -> dict[str, Any]:
        """The controller lease object (holder, epoch...)."""
        data = self.read_object("cluster/controller-lease")
        return {} if data is None else dict(json.loads(data))

    def controller_id(self) -> int:
        """The node holding the controller lease (-1: none)."""
        return int(self.lease().get("holder", -1))

    def object_store(self) -> Any:
        """The cluster's object store, as the brokers open it."""
        from remote_tier.url import open_object_store

        if self.s3 is None:
            return open_object_store(self.store_url)
        return open_object_store(self.store_url, s3_endpoint=self.s3.endpoint_url, s3_region="us-east-1",
                                 s3_access_key="testing", s3_secret_key="testing")

    def metadata(self) -> dict[str, Any]:
        """The newest cluster metadata image as a format-2 document ({} before there is one)."""
        from controller.commit import current_document

        return current_document(self.object_store()) or {}

    def wait_for(self, what: str, check: Any, timeout_s: float = 30.0, interval_s: float = 0.1) -> Any:
        """Poll ``check()`` until it returns something truthy; that value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not happen within {timeout_s:.0f} s")
            time.sleep(interval_s)


class _ClusterPool:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.clusters: list[Cluster] = []

    def __call__(self, size: int = 3, *, start: bool = True, **kw: Any) -> Cluster:
        """A cluster, started (``start=False``: the test starts its brokers, in its order)."""
        cluster = Cluster(self.tmp / f"cluster{len(self.clusters)}", size, **kw)
        self.clusters.append(cluster)
        return cluster.start() if start else cluster

    def close(self) -> None:
        for cluster in self.clusters:
            cluster.close()


@pytest.fixture
def start_cluster(tmp_path: Path) -> Iterator[_ClusterPool]:
    """Factory for function-scoped clusters: ``start_cluster(3, s3=bucket, sets={...})``."""
    pool = _ClusterPool(tmp_path)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def module_start_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_ClusterPool]:
    """Factory for clusters shared by the tests of a module (use distinct topic names)."""
    pool = _ClusterPool(tmp_path_factory.mktemp("clusters"))
    yield pool
    pool.close()
