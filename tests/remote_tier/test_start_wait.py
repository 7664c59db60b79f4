"""A start's wait for an object store that does not answer yet (remote_tier/start_wait.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from common.errors import KafkaStorageError
from remote_tier import start_wait
from remote_tier.errors import ObjectStoreUnavailable, ObjectStoreUnreachable, unreachable_store
from remote_tier.start_wait import StartWait


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _wrapped(cause: Exception) -> KafkaStorageError:
    """As the metadata store raises it: its own error, from the store's."""
    try:
        raise KafkaStorageError("cannot read cluster metadata") from cause
    except KafkaStorageError as exc:
        return exc


def test_an_unreachable_store_is_found_through_the_errors_wrapping_it() -> None:
    down = ObjectStoreUnreachable("no connection")
    assert unreachable_store(_wrapped(down)) is down
    assert unreachable_store(_wrapped(ObjectStoreUnavailable("bucket 'b' does not exist"))) is None
    assert unreachable_store(ValueError("x")) is None


def test_a_store_that_does_not_answer_is_tried_again_with_growing_pauses_until_the_wait_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = _Clock()
    wait = StartWait("the object store at s3://b", 30_000, every_s=10.0, clock=clock)
    pauses = []
    with caplog.at_level(logging.WARNING, logger="remote_tier.start_wait"):
        while (pause := wait.retry_after(_wrapped(ObjectStoreUnreachable("refused")))) is not None:
            pauses.append(pause)
            clock.now += pause
    assert pauses[:5] == [0.25, 0.5, 1.0, 2.0, 2.0]
    assert sum(pauses) == pytest.approx(30.0)  # the last pause ends where the wait does
    waits = [r for r in caplog.records if "does not answer yet" in r.getMessage()]
    assert 3 <= len(waits) <= 4  # at the first try and every 10 s, not at each of ~18 tries
    assert "refused" in waits[0].getMessage()
    gave_up = [r for r in caplog.records if "gave up waiting for the object store at s3://b" in r.getMessage()]
    assert len(gave_up) == 1 and gave_up[0].levelno == logging.ERROR


def test_what_no_wait_mends_ends_the_start_at_the_first_try() -> None:
    wait = StartWait("the object store", 300_000, clock=_Clock())
    assert wait.retry_after(_wrapped(ObjectStoreUnavailable("bucket 'b' does not exist"))) is None
    assert wait.retry_after(ObjectStoreUnavailable("AccessDenied")) is None


def test_no_wait_configured_gives_up_at_the_first_failure() -> None:
    assert StartWait("the object store", 0, clock=_Clock()).retry_after(ObjectStoreUnreachable("x")) is None


def test_an_answer_after_failures_says_how_long_it_waited(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    wait = StartWait("the object store", 60_000, clock=clock)
    with caplog.at_level(logging.WARNING, logger="remote_tier.start_wait"):
        wait.answered()  # nothing failed: nothing to say
        assert not caplog.records
        for _ in range(3):
            pause = wait.retry_after(ObjectStoreUnreachable("503 SlowDown"))
            assert pause is not None
            clock.now += pause
        wait.answered()
    assert "the object store answers: waited 1.8 s through 3 failed attempt(s)" in caplog.records[-1].getMessage()


def test_run_tries_again_until_the_store_answers_and_raises_what_no_wait_mends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []
    monkeypatch.setattr(start_wait.time, "sleep", slept.append)
    outcomes: list[Exception | str] = [ObjectStoreUnreachable("refused"), _wrapped(ObjectStoreUnreachable("503")), "ok"]

    def attempt() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert StartWait("the object store", 60_000).run(attempt) == "ok"
    assert slept == [0.25, 0.5]
    outcomes[:] = [ObjectStoreUnavailable("bucket 'b' does not exist"), "never reached"]
    with pytest.raises(ObjectStoreUnavailable, match="does not exist"):
        StartWait("the object store", 60_000).run(attempt)


def test_run_async_waits_on_the_loop_and_a_cancel_ends_it() -> None:
    async def scenario() -> None:
        tries = []

        async def attempt() -> str:
            tries.append(1)
            if len(tries) < 3:
                raise ObjectStoreUnreachable("refused")
            return "ok"

        assert await StartWait("the object store", 60_000).run_async(attempt) == "ok"
        assert len(tries) == 3

        async def never() -> None:
            raise ObjectStoreUnreachable("refused")

        waiting = asyncio.ensure_future(StartWait("the object store", 60_000).run_async(never))
        await asyncio.sleep(0.1)
        waiting.cancel()  # a stop during the broker's join
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(scenario())
