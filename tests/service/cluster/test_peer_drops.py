"""A dropped connection to a peer, of any kind, has the controller role probe that peer.

A killed broker's kernel closes its files highest descriptor first: its listener (moved to
the top, ``service.network.server``), then the fetch connections its peers opened to it,
then thousands of log files, then the connection it heartbeats on, opened at start: 11 ms
later at 10,000 partitions. The first drop any kind of channel sees starts the probe.
"""

from __future__ import annotations

from service.cluster.node import ClusterNode


class _Controller:
    def __init__(self, active: bool) -> None:
        self.is_active = active
        self.probed: list[int] = []

    def peer_unreachable(self, node_id: int) -> None:
        self.probed.append(node_id)


class _Poller:
    def __init__(self) -> None:
        self.fast = 0

    def poll_fast(self) -> None:
        self.fast += 1


class _Lifecycle:
    def __init__(self) -> None:
        self.pokes = 0

    def poke(self) -> None:
        self.pokes += 1


def _node(active: bool) -> tuple[ClusterNode, _Controller, _Poller, _Lifecycle]:
    node = ClusterNode.__new__(ClusterNode)  # only the drop handlers: no store, no loop
    controller, poller, lifecycle = _Controller(active), _Poller(), _Lifecycle()
    node.controller, node.poller, node.lifecycle = controller, poller, lifecycle  # type: ignore[assignment]
    return node, controller, poller, lifecycle


def test_a_dropped_fetch_connection_has_the_controller_probe_the_peer_and_the_metadata_polled_fast() -> None:
    node, controller, poller, lifecycle = _node(active=False)
    node._leader_dropped(2)  # the replica fetcher's channel
    assert controller.probed == [2] and poller.fast == 1 and lifecycle.pokes == 0


def test_a_dropped_controller_channel_also_heartbeats_now_and_the_active_controller_polls_nothing() -> None:
    node, controller, poller, lifecycle = _node(active=True)
    node._peer_dropped(3)
    assert controller.probed == [3] and lifecycle.pokes == 1
    assert poller.fast == 0  # its own commits reach its view at once
