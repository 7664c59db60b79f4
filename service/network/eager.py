"""A handler's first step run at once: :func:`start_eagerly` (Python 3.12's eager task
factory, for the connection reader's one call site, on 3.11).

Most requests (a Produce with acks=1, Metadata, a Fetch with data at hand) are answered
in their first step, so they cost no task, no extra turn of the event loop and no
done-callback round. Only a handler that awaits something gets a task, for the rest.
Not thread-safe: runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import types
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any

__all__ = ["cancel_and_wait", "start_eagerly"]


def start_eagerly(loop: asyncio.AbstractEventLoop, awaitable: Awaitable[Any]) -> asyncio.Future[Any]:
    """A future of ``awaitable``'s result, its first step already run, in a context of
    its own: the one a task would have had, so a handler that sets a context variable
    before its first await keeps it, in its task, for the rest."""
    if type(awaitable) is not types.CoroutineType and not isinstance(awaitable, Coroutine):
        return asyncio.ensure_future(awaitable)  # a future as it is, any other awaitable in a task
    context = contextvars.copy_context()
    try:
        yielded = context.run(awaitable.send, None)
    except StopIteration as stop:
        done = loop.create_future()
        done.set_result(stop.value)
        return done
    except (KeyboardInterrupt, SystemExit):
        raise
    except asyncio.CancelledError:
        cancelled = loop.create_future()
        cancelled.cancel()
        return cancelled
    except BaseException as exc:  # the writer reports it, as it would a task's
        failed = loop.create_future()
        failed.set_exception(exc)
        return failed
    return loop.create_task(_Rest(awaitable, yielded), context=context)


class _Rest(Coroutine[Any, Any, Any]):
    """A coroutine whose first step already ran and yielded ``yielded``: its task yields
    that first, then drives the coroutine on (values and exceptions passed through)."""

    __slots__ = ("_inner", "_yielded")

    def __init__(self, inner: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self._inner, self._yielded = inner, yielded

    def send(self, value: Any) -> Any:
        if self._yielded is not _SENT:
            yielded, self._yielded = self._yielded, _SENT
            return yielded
        return self._inner.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._yielded = _SENT
        return self._inner.throw(typ, val, tb) if val is not None else self._inner.throw(typ)

    def close(self) -> None:
        self._inner.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        return self  # type: ignore[return-value]  # an iterator of its steps

    def __iter__(self) -> _Rest:
        return self

    def __next__(self) -> Any:
        return self.send(None)


_SENT = object()


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
