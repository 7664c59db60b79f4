"""start_eagerly: a handler's first step at once, a task only for the rest."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from service.network.eager import start_eagerly

_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("eager_test", default="unset")


def test_an_answer_in_the_first_step_is_done_at_once_without_a_task() -> None:
    async def main() -> None:
        steps: list[str] = []

        async def handler() -> bytes:
            steps.append("ran")
            return b"answer"

        tasks = len(asyncio.all_tasks())
        fut = start_eagerly(asyncio.get_running_loop(), handler())
        assert steps == ["ran"] and fut.done() and fut.result() == b"answer"
        assert len(asyncio.all_tasks()) == tasks

    asyncio.run(main())


def test_a_handler_that_waits_finishes_in_a_task_with_its_context() -> None:
    async def main() -> None:
        gate = asyncio.get_running_loop().create_future()

        async def handler() -> str:
            token = _VAR.set("mine")
            try:
                await gate
                return _VAR.get()
            finally:
                _VAR.reset(token)  # a token of another context would raise here

        fut = start_eagerly(asyncio.get_running_loop(), handler())
        assert not fut.done()
        assert _VAR.get() == "unset"  # the caller's context is not the handler's
        gate.set_result(None)
        assert await fut == "mine"

    asyncio.run(main())


def test_errors_reach_the_future_and_cancelling_reaches_the_handler() -> None:
    async def main() -> None:
        async def failing() -> None:
            raise ValueError("bad request")

        failed = start_eagerly(asyncio.get_running_loop(), failing())
        with pytest.raises(ValueError, match="bad request"):
            await failed

        cleaned: list[bool] = []

        async def waiting() -> None:
            try:
                await asyncio.sleep(60)
            finally:
                cleaned.append(True)

        fut = start_eagerly(asyncio.get_running_loop(), waiting())
        await asyncio.sleep(0)
        fut.cancel()
        with pytest.raises(asyncio.CancelledError):
            await fut
        assert cleaned == [True]

    asyncio.run(main())


def test_futures_and_other_awaitables_are_taken_as_they_are() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        ready.set_result(3)
        assert start_eagerly(loop, ready) is ready

        class Later:
            def __await__(self):  # type: ignore[no-untyped-def]
                return asyncio.sleep(0, result=4).__await__()

        assert await start_eagerly(loop, Later()) == 4

    asyncio.run(main())
