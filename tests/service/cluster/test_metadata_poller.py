"""MetadataPoller.refresh: a read of the store that starts after the call, shared by
the callers waiting at that moment, and at most one per MIN_REFRESH_INTERVAL_S."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from service.cluster import metadata_poller
from service.cluster.metadata_poller import FAST_INTERVAL_S, MetadataPoller


class _View:
    """A stand-in MetadataView: each refresh installs the next revision."""

    def __init__(self) -> None:
        self.refreshes = 0
        self.revision = 0
        self.release = threading.Event()
        self._listeners: list[Any] = []

    def add_snapshot_listener(self, listener: Any) -> None:
        self._listeners.append(listener)

    def refresh(self) -> bool:
        self.release.wait(5)
        self.refreshes += 1
        self.revision += 1
        for hear in self._listeners:
            hear(self.snapshot())
        return True

    def snapshot(self) -> Any:
        return type("Snap", (), {"revision": self.revision})()


def _poller(view: _View, applied: list[int]) -> MetadataPoller:
    return MetadataPoller(view, 60_000, lambda s: applied.append(s.revision),  # type: ignore[arg-type]
                          asyncio.get_running_loop())


def test_callers_waiting_together_share_one_read_and_see_it_applied() -> None:
    async def run() -> tuple[int, list[int]]:
        view, applied = _View(), []
        poller = _poller(view, applied)
        view.release.set()
        await asyncio.gather(*(poller.refresh() for _ in range(5)))
        return view.refreshes, applied

    refreshes, applied = asyncio.run(run())
    assert refreshes == 1 and applied == [1]


def test_a_caller_arriving_during_a_read_waits_for_the_next_one(monkeypatch: Any) -> None:
    monkeypatch.setattr(metadata_poller, "MIN_REFRESH_INTERVAL_S", 0.0)

    async def run() -> tuple[int, list[int]]:
        view, applied = _View(), []
        poller = _poller(view, applied)
        first = asyncio.ensure_future(poller.refresh())
        await asyncio.sleep(0.05)  # the first read is in flight (held by view.release)
        second = asyncio.ensure_future(poller.refresh())
        await asyncio.sleep(0.05)
        view.release.set()
        await asyncio.gather(first, second)
        return view.refreshes, applied

    refreshes, applied = asyncio.run(run())
    assert refreshes == 2 and applied == [1, 2]


def test_reads_come_at_most_once_per_interval(monkeypatch: Any) -> None:
    monkeypatch.setattr(metadata_poller, "MIN_REFRESH_INTERVAL_S", 60.0)

    async def run() -> int:
        view = _View()
        poller = _poller(view, [])
        view.release.set()
        for _ in range(10):
            await poller.refresh()
        return view.refreshes

    assert asyncio.run(run()) == 1


def test_after_a_lost_peer_the_poll_runs_fast_for_a_while_then_at_its_interval() -> None:
    """A peer lost (its connection dropped): leaderships are about to move, so the store is
    read every FAST_INTERVAL_S for the given time, then again every interval (60 s here)."""
    async def run() -> tuple[int, int, int]:
        view, applied = _View(), []
        view.release.set()
        poller = _poller(view, applied)
        poller.start()
        try:
            await asyncio.sleep(0.3)
            at_start = view.refreshes  # the first read, then nothing for 60 s
            poller.poll_fast(0.5)
            await asyncio.sleep(0.6)
            fast = view.refreshes - at_start
            await asyncio.sleep(0.5)
            after = view.refreshes - at_start - fast
            return at_start, fast, after
        finally:
            poller.close()

    at_start, fast, after = asyncio.run(run())
    assert at_start == 1
    expected = 0.5 / FAST_INTERVAL_S  # every FAST_INTERVAL_S for 0.5 s
    assert expected / 3 <= fast <= expected + 2, fast  # a loaded machine wakes late, never early
    assert after <= 1, after


def test_what_a_read_returns_is_as_new_as_its_start_not_its_end() -> None:
    """A read in flight when the process is paused (SIGSTOP, a VM freeze) completes on waking
    with the metadata from before the pause. Counted from its end, the broker took itself
    for up to date, heartbeated without asking to be fenced, was unfenced, and served a
    group's offsets from before the pause (a CI run of the paused-coordinator test). A read
    that takes 0.4 s leaves the metadata at least 0.4 s old."""

    async def run() -> float:
        view, applied = _View(), []
        poller = _poller(view, applied)
        threading.Timer(0.4, view.release.set).start()  # the read's answer comes 0.4 s later
        await poller.refresh()
        return poller.age_s()

    # counted from its end the age would be about 0; the read starts a little after the timer
    # (1.1 ms in a CI run on a loaded machine), so its age is the 0.4 s less that gap
    assert asyncio.run(run()) >= 0.4 - 0.02


def test_fencings_are_made_ahead_on_their_own_thread_never_while_the_poll_runs_fast(monkeypatch: Any) -> None:
    """The ahead thread asks the view to make the other brokers' fencings (its own node id
    left out) until it says there is nothing more, but not while a peer was just lost (the
    poll runs fast) or while the local controller is the active one."""
    monkeypatch.setattr(metadata_poller, "AHEAD_CHECK_S", 0.01)
    calls: list[tuple[int, float]] = []
    more = [3]

    dropped = []

    class _AheadView(_View):
        def prepare_ahead(self, node_id: int, quiet_s: float) -> bool:
            calls.append((node_id, quiet_s))
            more[0] -= 1
            return more[0] > 0

        def drop_ahead(self) -> None:
            dropped.append(1)

    async def run() -> None:
        view = _AheadView()
        view.release.set()
        active = [True]
        poller = MetadataPoller(view, 60_000, lambda s: None, asyncio.get_running_loop(),  # type: ignore[arg-type]
                                ahead_node_id=7, may_prepare_ahead=lambda: not active[0])
        poller.start()
        try:
            await asyncio.sleep(0.1)
            assert calls == [] and dropped  # the active controller's broker: its view is handed images
            poller.poll_fast(for_s=0.3)
            active[0] = False
            await asyncio.sleep(0.15)
            assert calls == []  # a peer was just lost
            await asyncio.sleep(0.4)
            assert calls[:3] == [(7, metadata_poller.AHEAD_QUIET_S)] * 3
        finally:
            poller.close()

    asyncio.run(run())


def test_the_applies_of_those_fencings_are_planned_on_that_thread_too_even_for_the_active_controller(
    monkeypatch: Any,
) -> None:
    """After the fencings (or instead of them, on the active controller's broker: its own are
    the ones it applies), the ahead thread asks for the applies to be planned until there is
    nothing more, never while the poll runs fast."""
    monkeypatch.setattr(metadata_poller, "AHEAD_CHECK_S", 0.01)
    planned: list[float] = []
    more = [2]

    def plan_ahead() -> bool:
        planned.append(time.monotonic())
        more[0] -= 1
        return more[0] > 0

    class _ControllersView(_View):
        def drop_ahead(self) -> None:
            pass

    async def run() -> None:
        view = _ControllersView()
        view.release.set()
        poller = MetadataPoller(view, 60_000, lambda s: None, asyncio.get_running_loop(),  # type: ignore[arg-type]
                                ahead_node_id=7, may_prepare_ahead=lambda: False, plan_ahead=plan_ahead)
        poller.poll_fast(for_s=0.3)
        poller.start()
        try:
            await asyncio.sleep(0.2)
            assert planned == []  # a peer was just lost
            await asyncio.sleep(0.4)
            assert len(planned) >= 2 and more[0] <= 0  # the active controller's broker plans too
        finally:
            poller.close()

    asyncio.run(run())


def test_an_idle_ahead_thread_looks_less_and_less_often_and_at_once_when_an_image_comes() -> None:
    """Each look of the ahead thread takes the interpreter's lock from the loop thread. With
    nothing to make, it doubles its wait from AHEAD_CHECK_S to AHEAD_IDLE_S (it looked every
    AHEAD_CHECK_S: ten times a second on an idle broker); a newly installed image brings a
    look at once, and the quick looks again."""
    looks: list[float] = []

    def plan_ahead() -> bool:
        looks.append(time.monotonic())
        return False

    class _QuietView(_View):
        def drop_ahead(self) -> None:
            pass

        def prepare_ahead(self, node_id: int, quiet_s: float) -> bool:
            return False

    async def run() -> tuple[int, float]:
        view = _QuietView()
        view.release.set()
        # a 60 s poll: the first read installs revision 1, then nothing comes from the poll
        poller = MetadataPoller(view, 60_000, lambda s: None, asyncio.get_running_loop(),  # type: ignore[arg-type]
                                ahead_node_id=7, plan_ahead=plan_ahead)
        poller.start()
        try:
            await asyncio.sleep(2.6)
            idle = len(looks)
            while len(looks) == idle:  # a look has just been made: the thread now waits 0.5 s
                await asyncio.sleep(0.005)
            sent = time.monotonic()
            await asyncio.get_running_loop().run_in_executor(None, view.refresh)  # a new image
            await asyncio.sleep(0.6)
            first_after = min((t for t in looks if t >= sent), default=float("inf"))
            return idle, first_after - sent
        finally:
            poller.close()

    idle, delay = asyncio.run(run())
    # waits of 0.1, 0.2, 0.4, 0.5, 0.5, ...: 7 looks in 2.6 s (26 at a fixed AHEAD_CHECK_S); the
    # first read's image at the start brings one more
    assert 4 <= idle <= 12, idle
    assert delay < 0.25, delay  # at once, not at the end of the 0.5 s wait it had just begun
