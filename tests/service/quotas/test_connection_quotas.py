"""Connection limits and connection-creation quotas (Kafka's ConnectionQuotas, KIP-308/402/612)
and Strata's open-files guard, on :class:`ConnectionQuotas` with a simulated clock; the
accept loops on a real broker are in tests/e2e/test_connection_limits.py."""

from __future__ import annotations

import asyncio
import functools
import resource
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.config import BrokerConfig
from service.quotas.connections import (
    IP_THROTTLED,
    OPEN_FILES,
    PER_IP,
    ConnectionQuotas,
    ConnectionSettings,
    ListenerLimits,
    connection_quotas,
    connection_settings,
    parse_overrides,
)
from service.quotas.entities import alter_quotas, describe_quotas, ip_rates
from service.quotas.manager import QuotaManager

LOW_FD = 10  # a descriptor number far from any limit


def on_a_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


def test_per_ip_limit_and_overrides_close_the_connection_beyond() -> None:
    quotas = ConnectionQuotas(per_ip=2, per_ip_overrides={"10.0.0.9": 3, "::ffff:10.0.0.8": 1})
    assert [quotas.admit("PLAINTEXT", "10.0.0.1", LOW_FD).reason for _ in range(3)] == [None, None, PER_IP]
    assert [quotas.admit("PLAINTEXT", "10.0.0.9", LOW_FD).reason for _ in range(4)] == [None, None, None, PER_IP]
    # an IPv4-mapped IPv6 address is its IPv4 address, for the overrides and the counts
    assert quotas.admit("SSL", "10.0.0.8", LOW_FD).admitted
    assert quotas.admit("PLAINTEXT", "::ffff:10.0.0.8", LOW_FD).reason == PER_IP
    assert quotas.connections_from("10.0.0.1") == 2 and quotas.total == 6
    quotas.release("PLAINTEXT", "10.0.0.1")
    assert quotas.admit("PLAINTEXT", "10.0.0.1", LOW_FD).admitted  # a closed connection frees its slot
    assert quotas.refused == {("PLAINTEXT", PER_IP): 3}


def test_zero_per_ip_needs_overrides() -> None:
    with pytest.raises(ValueError, match="overrides"):
        ConnectionQuotas(per_ip=0)
    only = ConnectionQuotas(per_ip=0, per_ip_overrides={"10.0.0.2": 1})
    assert only.admit("PLAINTEXT", "10.0.0.2", LOW_FD).admitted
    assert only.admit("PLAINTEXT", "10.0.0.3", LOW_FD).reason == PER_IP


def test_overrides_parse_addresses_and_host_names_and_refuse_garbage() -> None:
    parsed = parse_overrides(" 10.0.0.1:5, [::2]:7,localhost:3")
    assert parsed["10.0.0.1"] == 5 and parsed["::2"] == 7 and parsed["127.0.0.1"] == 3
    assert parse_overrides("") == {}
    for bad in ("10.0.0.1", "10.0.0.1:x", ":5", "10.0.0.1:-1"):
        with pytest.raises(ValueError, match="HOST:COUNT"):
            parse_overrides(bad)
    with pytest.raises(ValueError, match="cannot resolve"):
        parse_overrides("no-such-host.invalid:4")


@on_a_loop
async def test_max_connections_holds_the_accept_until_one_closes() -> None:
    quotas = ConnectionQuotas(max_connections=2, listeners={"SSL": ListenerLimits(max_connections=1)})
    for ip in ("10.0.0.1", "10.0.0.2"):
        await asyncio.wait_for(quotas.before_accept("PLAINTEXT"), 1)
        assert quotas.admit("PLAINTEXT", ip, LOW_FD).admitted
    waiting = asyncio.ensure_future(quotas.before_accept("PLAINTEXT"))
    other = asyncio.ensure_future(quotas.before_accept("SSL"))
    await asyncio.sleep(0.05)
    assert not waiting.done() and not other.done()  # the broker is full: no listener accepts
    quotas.release("PLAINTEXT", "10.0.0.1")
    await asyncio.wait_for(asyncio.gather(waiting, other), 1)
    assert quotas.admit("SSL", "10.0.0.3", LOW_FD).admitted
    listener_full = asyncio.ensure_future(quotas.before_accept("SSL"))  # SSL's own limit is 1
    await asyncio.sleep(0.05)
    assert not listener_full.done()
    quotas.release("SSL", "10.0.0.3")
    await asyncio.wait_for(listener_full, 1)


@on_a_loop
async def test_the_inter_broker_listener_is_exempt_and_evicts_the_least_recent_client() -> None:
    evicted: list[str] = []
    quotas = ConnectionQuotas(max_connections=2, protected="BROKER")
    quotas.register("CLIENTS", lambda: evicted.append("CLIENTS") is None)
    quotas.register("BROKER", lambda: evicted.append("BROKER") is None)
    for ip in ("10.0.0.1", "10.0.0.2"):
        assert quotas.admit("CLIENTS", ip, LOW_FD).admitted
    await asyncio.wait_for(quotas.before_accept("BROKER"), 1)  # no wait for the brokers' listener
    assert quotas.admit("BROKER", "10.0.0.9", LOW_FD).admitted
    assert evicted == ["CLIENTS"]  # a client connection makes room, not the broker's


def test_the_open_files_guard_refuses_inside_the_reserve_and_pauses_the_listener() -> None:
    quotas = ConnectionQuotas(fd_limit=256, fd_reserve=64, protected="BROKER")
    assert quotas.admit("CLIENTS", "10.0.0.1", 191).admitted
    assert quotas.admit("CLIENTS", "10.0.0.1", 192).reason == OPEN_FILES
    assert not quotas._room("CLIENTS")  # the listener waits (for a close, or a second) before its next accept
    assert quotas.admit("BROKER", "10.0.0.9", 200).admitted  # a broker's connection may use the reserve
    quotas.release("CLIENTS", "10.0.0.1")
    assert quotas._room("CLIENTS")


def test_creation_rate_delays_the_next_accept_and_spares_the_inter_broker_listener() -> None:
    now = [100.0]
    quotas = ConnectionQuotas(creation_rate=10, protected="BROKER", samples=2, window_s=1.0, clock=lambda: now[0])
    for i in range(20):
        assert quotas.admit("CLIENTS", f"10.0.0.{i}", LOW_FD).admitted
    delay = quotas._creation_delay("CLIENTS")
    assert delay == pytest.approx(1.0)  # 20 in the first window: (20 - 10) / 10 x 1 s
    assert quotas._creation_delay("BROKER") == 0  # the broker-wide rate does not apply to it
    now[0] += 2.5
    assert quotas._creation_delay("CLIENTS") == 0


@on_a_loop
async def test_a_listeners_own_creation_rate_is_waited_for() -> None:
    now = [100.0]
    quotas = ConnectionQuotas(listeners={"SSL": ListenerLimits(creation_rate=1000)}, samples=2,
                              window_s=0.01, clock=lambda: now[0])
    for i in range(30):
        quotas.admit("SSL", f"10.0.0.{i}", LOW_FD)
    await asyncio.wait_for(quotas.before_accept("SSL"), 1)
    assert quotas.accept_throttle_s["SSL"] == pytest.approx(0.01)  # (3000 - 1000) / 1000 x 10 ms, one window at most


@on_a_loop
async def test_a_creation_rate_of_zero_waits_a_window_at_a_time() -> None:
    quotas = connection_quotas(BrokerConfig({"max.connection.creation.rate": "0", "quota.window.size.seconds": "1"}),
                               ["PLAINTEXT"], "PLAINTEXT", ip_rate=lambda ip: None)
    assert quotas.admit("PLAINTEXT", "10.0.0.1", LOW_FD).admitted
    assert quotas._creation_delay("PLAINTEXT") == 1.0  # Kafka allows 0: no division by it


class FakeSocket:
    def __init__(self, fd: int = LOW_FD) -> None:
        self.fd, self.closed = fd, False

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        self.closed = True


@on_a_loop
async def test_screen_looks_for_room_again_so_listeners_cannot_overshoot_together() -> None:
    quotas = ConnectionQuotas(max_connections=1)
    await asyncio.gather(quotas.before_accept("PLAINTEXT"), quotas.before_accept("SSL"))  # both saw room
    assert await quotas.screen("PLAINTEXT", FakeSocket(), "10.0.0.1")  # type: ignore[arg-type]
    late = asyncio.ensure_future(quotas.screen("SSL", FakeSocket(), "10.0.0.2"))  # type: ignore[arg-type]
    await asyncio.sleep(0.05)
    assert not late.done() and quotas.total == 1  # it waits with its socket, not over the limit
    quotas.release("PLAINTEXT", "10.0.0.1")
    assert await asyncio.wait_for(late, 1) and quotas.total == 1


@on_a_loop
async def test_held_sockets_are_bounded_and_closed_after_their_throttle() -> None:
    quotas = ConnectionQuotas(ip_rate=lambda ip: 20.0, samples=2, window_s=0.05, fd_reserve=64, fd_limit=10_000)
    socks = [FakeSocket() for _ in range(30)]
    served = [await quotas.screen("PLAINTEXT", s, "10.0.0.7") for s in socks]  # type: ignore[arg-type]
    assert served.count(True) == 1 and quotas.held == 16  # max(16, 64 // 4)
    assert sum(s.closed for s in socks) == 30 - 1 - 16  # the rest closed at once
    for _ in range(100):  # their throttle is about 50 ms; a loaded machine may take longer
        await asyncio.sleep(0.05)
        if quotas.held == 0:
            break
    assert quotas.held == 0 and sum(s.closed for s in socks) == 29


def test_quiet_addresses_rate_sensors_are_dropped() -> None:
    now = [0.0]
    quotas = ConnectionQuotas(ip_rate=lambda ip: 100.0, samples=2, window_s=1.0, clock=lambda: now[0])
    for i in range(1000):
        quotas.admit("PLAINTEXT", f"10.0.{i // 250}.{i % 250}", LOW_FD)
        now[0] += 0.001
    now[0] += 120
    quotas.admit("PLAINTEXT", "10.9.9.9", LOW_FD)
    assert len(quotas._ip_sensors) == 1


def test_an_ip_over_its_creation_rate_is_throttled_and_not_counted() -> None:
    now = [50.0]
    rates = {"10.0.0.7": 2.0}
    quotas = ConnectionQuotas(ip_rate=rates.get, samples=2, window_s=1.0, clock=lambda: now[0])
    verdicts = [quotas.admit("PLAINTEXT", "10.0.0.7", LOW_FD) for _ in range(4)]
    assert [v.reason for v in verdicts] == [None, None, IP_THROTTLED, IP_THROTTLED]
    assert verdicts[2].delay_s == pytest.approx(0.5)  # measured 3/s against 2/s over 1 s
    assert verdicts[3].delay_s == pytest.approx(0.5)  # the refused one did not count
    assert quotas.connections_from("10.0.0.7") == 2
    assert quotas.admit("PLAINTEXT", "10.0.0.8", LOW_FD).admitted  # another address has no quota
    now[0] += 3
    assert quotas.admit("PLAINTEXT", "10.0.0.7", LOW_FD).admitted


def test_ip_quotas_are_kafkas_ip_entities() -> None:
    section, results = alter_quotas(None, [
        ([("ip", "10.0.0.7")], [("connection_creation_rate", 20.0, False)]),
        ([("ip", None)], [("connection_creation_rate", 100.0, False)]),
        ([("ip", "::ffff:10.0.0.6")], [("connection_creation_rate", 5.0, False)]),
    ], False)
    assert [code for code, _ in results] == [0, 0, 0]
    assert ip_rates(section) == ({"10.0.0.7": 20.0, "10.0.0.6": 5.0}, 100.0)
    assert len(describe_quotas(section, [("ip", 2, None)], strict=True)) == 3
    manager = QuotaManager(lambda: 1, lambda: section, 11, 1.0)
    assert manager.ip_rate("10.0.0.7") == 20.0 and manager.ip_rate("10.0.0.1") == 100.0
    refused = alter_quotas(section, [
        ([("ip", "10.0.0.7"), ("user", "alice")], [("connection_creation_rate", 1.0, False)]),
        ([("ip", "not-an-address")], [("connection_creation_rate", 1.0, False)]),
        ([("ip", "10.0.0.7")], [("producer_byte_rate", 1.0, False)]),
        ([("user", "alice")], [("connection_creation_rate", 1.0, False)]),
        ([("ip", "10.0.0.7")], [("connection_creation_rate", 1.5, False)]),
    ], False)[1]
    assert [code for code, _ in refused] == [42] * 5  # INVALID_REQUEST
    assert "combination" in str(refused[0][1]) and "not a valid IP" in str(refused[1][1])


def test_the_broker_raises_its_open_files_limit_and_reserves_an_eighth() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(512, hard), hard))
        quotas = connection_quotas(BrokerConfig({"listener.name.ssl.max.connections": "7",
                                                 "max.connection.creation.rate": "30"}),
                                   ["PLAINTEXT", "SSL"], "PLAINTEXT", ip_rate=lambda ip: None)
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert quotas.fd_limit == hard and quotas.fd_reserve == max(64, hard // 8)
    assert quotas.limits("SSL") == ListenerLimits(7, 30)  # the listener's own, else the broker's
    assert quotas.limits("PLAINTEXT").max_connections == 2**31 - 1
    try:
        with pytest.raises(ValueError, match="leaves no descriptor"):
            connection_quotas(BrokerConfig({"connections.reserved.fds": str(hard)}), ["PLAINTEXT"], "PLAINTEXT",
                              ip_rate=lambda ip: None)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@on_a_loop
async def test_a_raised_limit_frees_a_listener_waiting_at_the_old_one() -> None:
    revision, limit = [1], [1]
    quotas = ConnectionQuotas()
    quotas.follow(lambda: revision[0], lambda: ConnectionSettings(max_connections=limit[0]))
    await quotas.before_accept("PLAINTEXT")
    assert quotas.admit("PLAINTEXT", "10.0.0.1", LOW_FD).admitted
    waiting = asyncio.ensure_future(quotas.before_accept("PLAINTEXT"))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    revision[0], limit[0] = 2, 100  # a dynamic config raised the limit; no connection closed
    await asyncio.wait_for(waiting, 3)


def test_a_dynamic_change_no_client_could_use_keeps_the_per_ip_limits_and_takes_the_rest() -> None:
    quotas = ConnectionQuotas(per_ip=3)
    quotas.reconfigure(ConnectionSettings(max_connections=50, per_ip=0), strict=False)
    assert quotas.max_connections == 50 and quotas._per_ip == 3
    quotas.reconfigure(ConnectionSettings(max_connections=60, per_ip=5, per_ip_overrides=None), strict=False)
    assert quotas.max_connections == 60 and quotas._per_ip == 3  # unreadable overrides: per-IP as it was
    with pytest.raises(ValueError, match="could not be read"):
        quotas.reconfigure(ConnectionSettings(per_ip_overrides=None))  # at start: refused
    resolved: dict[str, Any] = {}
    config = BrokerConfig({"max.connections.per.ip.overrides": "no-such-host.invalid:4"})
    assert connection_settings(config, [], resolved).per_ip_overrides is None
    assert resolved == {"no-such-host.invalid:4": None}  # looked up once per value, failures too


_STEPS = st.lists(st.one_of(
    st.tuples(st.just("open"), st.sampled_from(["CLIENTS", "SSL", "BROKER"]), st.integers(1, 4),
              st.integers(0, 300)),
    st.tuples(st.just("close"), st.integers(0, 50)),
    st.tuples(st.just("limits"), st.integers(0, 6), st.integers(0, 4)),
), max_size=80)


@given(_STEPS)
@settings(max_examples=200, deadline=None, database=None)
def test_counts_stay_true_to_the_connections_through_any_opens_closes_and_changes(steps: list[Any]) -> None:
    evicted: list[tuple[str, str]] = []
    quotas = ConnectionQuotas(max_connections=5, per_ip=2, protected="BROKER", fd_limit=256, fd_reserve=64)
    open_: list[tuple[str, str]] = []

    def evict_from(listener: str) -> Any:
        def evict() -> bool:
            victims = [c for c in open_ if c[0] == listener]
            if not victims:
                return False
            open_.remove(victims[0])
            evicted.append(victims[0])
            quotas.release(*victims[0])
            return True
        return evict

    for name in ("CLIENTS", "SSL", "BROKER"):
        quotas.register(name, evict_from(name))
    for step in steps:
        if step[0] == "open":
            _, listener, host, fd = step
            ip = f"10.0.0.{host}"
            if not quotas._room(listener):
                continue  # the accept loop would wait here
            before, full = quotas.total, quotas.total >= quotas.max_connections
            others = any(c[0] != "BROKER" for c in open_)
            if quotas.admit(listener, ip, fd).admitted:
                open_.append((listener, ip))
                assert listener == "BROKER" or not full  # only the brokers' listener goes past the limit
                if listener == "BROKER" and full and others:
                    assert quotas.total == before  # ... and a client's connection made room
        elif step[0] == "close" and open_:
            quotas.release(*open_.pop(step[1] % len(open_)))
        elif step[0] == "limits":
            quotas.reconfigure(ConnectionSettings(max_connections=step[1], per_ip=step[2] or 1), strict=False)
        assert quotas.total == len(open_) == sum(quotas.by_listener.values())
        assert all(quotas.connections_from(ip) == sum(1 for _, i in open_ if i == ip) for _, ip in open_)
        assert min(quotas.by_listener.values(), default=0) >= 0
    assert all(listener != "BROKER" for listener, _ in evicted)  # brokers' connections are never the ones closed
