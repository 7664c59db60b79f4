"""The request clock behind the request-time quota (``request_percentage``): it counts
the time a request runs on the event loop and not the time it waits (Kafka counts
handler-thread time, never purgatory), and a cancelled or failing request still stops it."""

from __future__ import annotations

import asyncio
import time

import pytest

from service.handlers.context import RequestClock


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def _request(busy_s: float, wait_s: float) -> str:
    _spin(busy_s / 2)
    await asyncio.sleep(wait_s)  # an acks=all wait, a long poll: not the request's time
    _spin(busy_s / 2)
    return "answer"


def test_the_clock_counts_the_steps_and_not_the_waits() -> None:
    async def main() -> tuple[str, float, float]:
        clock = RequestClock()
        clock.pause()
        other = asyncio.create_task(asyncio.to_thread(_spin, 0.0))  # the loop has other work
        started = time.perf_counter()
        answer = await clock.timed(_request(0.04, 0.3))
        await other
        return answer, clock.busy_ms(), (time.perf_counter() - started) * 1000

    answer, busy_ms, wall_ms = asyncio.run(main())
    assert answer == "answer"
    assert wall_ms >= 300
    assert 40 <= busy_ms < 120, busy_ms  # the 40 ms of work, not the 300 ms asleep


def test_other_requests_steps_are_not_counted() -> None:
    async def main() -> tuple[float, float]:
        mine, theirs = RequestClock(), RequestClock()
        mine.pause()
        theirs.pause()
        await asyncio.gather(mine.timed(_request(0.02, 0.1)), theirs.timed(_request(0.2, 0.05)))
        return mine.busy_ms(), theirs.busy_ms()

    mine_ms, theirs_ms = asyncio.run(main())
    assert 20 <= mine_ms < 80, mine_ms  # the other request's 200 ms ran while this one waited
    assert 200 <= theirs_ms < 300, theirs_ms


def test_a_cancelled_request_stops_the_clock_and_sees_the_cancellation() -> None:
    seen: list[str] = []

    async def request() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main() -> float:
        clock = RequestClock()
        clock.pause()
        task = asyncio.ensure_future(clock.timed(request()))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        at = clock.busy_ms()
        await asyncio.sleep(0.05)
        assert clock.busy_ms() == at  # stopped
        return at

    assert asyncio.run(main()) < 20
    assert seen == ["cancelled"]


def test_an_error_in_the_request_reaches_the_caller() -> None:
    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("bad request")

    async def main() -> None:
        clock = RequestClock()
        clock.pause()
        with pytest.raises(ValueError, match="bad request"):
            await clock.timed(failing())

    asyncio.run(main())
