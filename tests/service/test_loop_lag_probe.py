"""The event loop's lag probe (:mod:`service.loop_lag`): a blocked loop shows as a late probe,
in the histogram's buckets and the recent-max gauge; an idle loop stays in the lowest buckets."""

from __future__ import annotations

import asyncio
import time

from service.loop_lag import LoopLagProbe


def test_a_blocked_loop_shows_as_one_late_probe_of_about_the_stall() -> None:
    async def body() -> LoopLagProbe:
        probe = LoopLagProbe(0.005)
        probe.start()
        await asyncio.sleep(0.1)
        time.sleep(0.2)  # a blocking call on the loop
        await asyncio.sleep(0.05)
        probe.stop()
        return probe

    probe = asyncio.run(body())
    cumulative = dict(probe.cumulative())
    assert cumulative[float("inf")] >= 10
    assert cumulative[float("inf")] - cumulative[0.1] == 1  # exactly one probe ran >100 ms late
    assert cumulative[0.25] == cumulative[float("inf")]  # ... and by less than 250 ms
    assert 0.19 <= probe.recent_max_s < 0.25
    assert probe.total_s >= 0.19


def test_an_idle_loop_is_never_late_by_more_than_a_timer_tick() -> None:
    async def body() -> LoopLagProbe:
        probe = LoopLagProbe(0.005)
        probe.start()
        probe.start()  # idempotent: one timer
        await asyncio.sleep(0.2)
        probe.stop()
        return probe

    probe = asyncio.run(body())
    cumulative = dict(probe.cumulative())
    assert 10 <= cumulative[float("inf")] <= 45  # one timer firing every 5 ms, not two
    assert cumulative[0.05] == cumulative[float("inf")]


def _stalling_call() -> None:
    time.sleep(0.3)  # a blocking call on the loop, in a function of its own name


def test_a_stall_is_logged_with_what_the_loop_thread_ran(caplog: object) -> None:
    import logging

    async def body() -> LoopLagProbe:
        probe = LoopLagProbe(0.005, stall_log_s=0.1)
        probe.start()
        await asyncio.sleep(0.2)  # a free loop: nothing logged
        _stalling_call()
        await asyncio.sleep(0.2)
        probe.stop()
        return probe

    with caplog.at_level(logging.WARNING, logger="strata.loop"):  # type: ignore[attr-defined]
        probe = asyncio.run(body())
    assert probe.watch is not None and probe.watch.stalls == 1
    [record] = [r for r in caplog.records if "stalled" in r.getMessage()]  # type: ignore[attr-defined]
    message = record.getMessage()
    assert "_stalling_call" in message and "time.sleep(0.3)" in message
    assert 200 <= float(message.split("at least ")[1].split(" ms")[0]) <= 320


def test_a_long_garbage_collection_is_logged(caplog: object) -> None:
    import gc
    import logging

    async def body() -> LoopLagProbe:
        probe = LoopLagProbe(0.005, stall_log_s=0.000001)  # any collection is long enough
        probe.start()
        gc.collect()
        probe.stop()
        return probe

    with caplog.at_level(logging.WARNING, logger="strata.loop"):  # type: ignore[attr-defined]
        probe = asyncio.run(body())
    assert probe.watch is not None and probe.watch.gc_pauses >= 1
    assert any("garbage collection of generation 2" in r.getMessage() for r in caplog.records)  # type: ignore[attr-defined]
    assert probe.watch._on_gc not in gc.callbacks  # stop() took the callback away


def test_the_stall_watch_of_a_free_loop_wakes_once_per_threshold_not_four_times() -> None:
    """Each wake-up of the watch's thread takes the interpreter's lock from the loop thread: on a
    loop that never stalls it looks when the pending probe could first be a stall, about once per
    threshold (it looked four times per threshold, twenty times a second on an idle broker)."""

    async def body() -> LoopLagProbe:
        probe = LoopLagProbe(0.02, stall_log_s=0.1)
        probe.start()
        await asyncio.sleep(1.0)
        probe.stop()
        return probe

    probe = asyncio.run(body())
    assert probe.watch is not None and probe.watch.stalls == 0
    # a look about every 0.1 s (the threshold, plus up to the probe's interval): 8 to 10 in the
    # second, more when a busy machine runs the probe late; four per threshold made 39-40
    assert 3 <= probe.watch.looks <= 20
