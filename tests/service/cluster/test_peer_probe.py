"""The controller's probe of brokers whose heartbeats are late (issue #33): a broker that
answers an ApiVersions request is slow, not cut off; a partition swallows the request."""

from __future__ import annotations

import time
from types import SimpleNamespace

from service.cluster.node import ClusterNode
from tests.conftest import BrokerProcess, free_port
from tests.e2e.tcp_proxy import CuttingProxy


def _probe(port: int, timeout_s: float) -> bool:
    node = SimpleNamespace(_endpoint_of=lambda _n: ("127.0.0.1", port), inter_broker=None, node_id=9)
    return ClusterNode._answers_requests(node, 2, timeout_s)  # type: ignore[arg-type]


def test_a_broker_answers_the_probe(module_broker: BrokerProcess) -> None:
    assert _probe(module_broker.port, 2.0)


def test_a_partitioned_broker_does_not_answer_within_the_timeout(module_broker: BrokerProcess) -> None:
    proxy = CuttingProxy(module_broker.port)
    try:
        assert _probe(proxy.port, 2.0)  # through the proxy while it passes traffic
        proxy.partition()
        started = time.monotonic()
        assert not _probe(proxy.port, 0.5)  # accepted, and the request goes nowhere
        assert time.monotonic() - started < 1.5
    finally:
        proxy.close()


def test_nobody_listening_is_no_answer() -> None:
    assert not _probe(free_port(), 1.0)
    assert not _probe(free_port(), 0.0)
