"""A second broker started with the node id of a live one, on the same object store, is
told so at once (issue #36): it used to retry for one and a half broker sessions (about
14 s on the defaults) before it said so, and, through the lease holder's channel, "broker
1 is not registered with an endpoint" on the way. Now a refused registration whose
registered listener answers a connection is final."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import BrokerProcess, free_port


def test_a_second_broker_with_a_live_node_id_stops_at_once_saying_why(tmp_path: Path) -> None:
    store = ["--object-store", (tmp_path / "bucket").as_uri()]
    live = BrokerProcess(tmp_path / "a", free_port(), args=store, log_path=tmp_path / "a.log").start()
    twin = BrokerProcess(tmp_path / "b", free_port(), args=store, log_path=tmp_path / "b.log")
    try:
        code, took = twin.start_that_ends()
        assert code != 0
        assert "node.id 1 is already held by a live broker" in twin.log_text()
        assert took < 8, f"told after {took:.1f} s"
        assert live.running
    finally:
        twin.kill()
        live.kill()
