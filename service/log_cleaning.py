"""The log cleaner in the broker: its settings, and the event loop as the logs' owner.

The cleaner threads (``local_tier.cleaning``) read a log's state and swap
segments only on the thread that owns the logs, the broker's event loop;
:class:`LoopOwner` is how a cleaner thread runs a function there and waits for
its result. Tiered compacted logs are left to the remote cleaner (ADR 0019):
their sealed segments go to the bucket, which is compacted instead.

Thread-safety: :class:`LoopOwner` is called from cleaner threads; the rest runs
on the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from controller.configs import BrokerConfig
from local_tier.cleaning.cleaner import CleaningAborted
from local_tier.cleaning.manager import CleanerConfig

__all__ = ["LoopOwner", "cleaner_config"]

T = TypeVar("T")


def cleaner_config(config: BrokerConfig) -> CleanerConfig:
    """The broker's ``log.cleaner.*`` keys as the cleaner's settings."""
    points = frozenset(p.strip() for p in config.get_str("log.cleaner.test.pause.at").split(",") if p.strip())
    return CleanerConfig(
        enable=config.get_bool("log.cleaner.enable"),
        threads=config.get_int("log.cleaner.threads"),
        dedupe_buffer_size=config.get_int("log.cleaner.dedupe.buffer.size"),
        io_buffer_size=config.get_int("log.cleaner.io.buffer.size"),
        io_buffer_load_factor=float(config.get_str("log.cleaner.io.buffer.load.factor")),
        io_max_bytes_per_second=float(config.get_str("log.cleaner.io.max.bytes.per.second")),
        backoff_ms=config.get_int("log.cleaner.backoff.ms"),
        test_pause_points=points,
    )


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
