"""Who may touch a :class:`~local_tier.log.Log`: one owner thread, and the hand-offs to it.

A partition's log has one owner, the thread of the broker's event loop (for a log
made before the loop runs, the thread that made it: the loop runs on the same
thread). Appends, reads, rolls, truncation, retention, swaps and every read of its
offsets happen there; none of it takes a lock. Other threads reach a log only
through one of these hand-offs:

- **run it on the owner** (:class:`LoopOwner`): a cleaner thread hands a function to
  the loop and waits for its result; how the cleaner takes a log's
  :meth:`~local_tier.log.Log.cleaning_view` and swaps cleaned segments in.
- **a frozen view taken on the owner**: :meth:`~local_tier.log.Log.read_view` (the
  coordinators' loads replay ``__consumer_offsets`` from it on a worker thread) and
  :meth:`~local_tier.log.Log.cleaning_view` (the cleaner). A view holds the
  segments as they were; it never changes the log.
- **closures over segments, not the log**: the flush thread fsyncs the segments a
  flush was planned for and moves the recovery point under the log's one small lock;
  the tiered copier threads read a sealed segment's files (``remote_tier``); the
  history sender threads ``sendfile`` regions of segment files (``fetch/sending.py``).

With ``STRATA_CHECK_LOG_OWNER=1`` in the environment (the test suite sets it, for its
own process and the brokers it starts), every method of :class:`~local_tier.log.Log`
and :class:`~local_tier.manager.LogManager` marked :func:`owner_only` checks that it
runs on the owner thread and raises :class:`LogOwnerError` when it does not. Without
it the marker returns the method unchanged: no cost in production.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from local_tier.cleaning.cleaner import CleaningAborted

__all__ = ["CHECKS", "LogOwnerError", "LoopOwner", "Owned", "owner_only"]

#: whether :func:`owner_only` methods check their thread (read once, at import)
CHECKS = os.environ.get("STRATA_CHECK_LOG_OWNER", "") not in ("", "0")

F = TypeVar("F", bound=Callable[..., Any])


class LogOwnerError(AssertionError):
    """A thread that does not own a log (or the log manager) touched it."""


class Owned:
    """An object with one owner thread: the one that made it, until :meth:`adopt_owner`."""

    _owner_thread: threading.Thread

    def _init_owner(self) -> None:
        self._owner_thread = threading.current_thread()

    def _owner_label(self) -> str:
        return type(self).__name__

    def adopt_owner(self) -> None:
        """The calling thread owns this object from now on (a hand-over, e.g. to a loop
        started on another thread than the one that loaded the logs)."""
        self._owner_thread = threading.current_thread()


def owner_only(fn: F) -> F:
    """Mark a method of an :class:`Owned` object as callable on its owner thread only."""
    if not CHECKS:
        return fn

    @functools.wraps(fn)
    def checked(self: Owned, *args: Any, **kwargs: Any) -> Any:
        if self._owner_thread is not threading.current_thread():
            raise LogOwnerError(
                f"{fn.__qualname__} of {self._owner_label()} called on thread "
                f"{threading.current_thread().name!r}, which does not own it: hand the work to "
                "the owner (local_tier/ownership.py)"
            )
        return fn(self, *args, **kwargs)

    return checked  # type: ignore[return-value]


class LoopOwner:
    """Runs functions on ``loop`` for other threads: ``owner(fn)`` blocks until ``fn()`` ran
    there and returns its result (or raises its exception). Called on the loop's own
    thread it simply calls ``fn``. Gives up with :class:`CleaningAborted` once
    ``stopping()`` is true or the loop is closed, so a cleaner thread never waits on
    a loop that is shutting down (which may itself be waiting for the thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stopping: Callable[[], bool]) -> None:
        self._loop = loop
        self._stopping = stopping
        self._loop_thread = threading.get_ident()

    def __call__(self, fn: Callable[[], Any]) -> Any:
        if threading.get_ident() == self._loop_thread:
            return fn()
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                future.set_exception(exc)

        try:
            self._loop.call_soon_threadsafe(run)
        except RuntimeError as exc:  # the loop is closed
            raise CleaningAborted("the event loop is closed") from exc
        while True:
            try:
                return future.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                if self._stopping() and future.cancel():
                    raise CleaningAborted("the broker is shutting down") from None
