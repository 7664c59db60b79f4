"""A Log has one owner thread: the checks the suite runs with, and the hand-offs around them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from local_tier import ownership
from local_tier.log import Log
from local_tier.manager import LogManager
from local_tier.ownership import LogOwnerError, LoopOwner
from local_tier.replay import iter_log_records
from tests.conftest import REPO_ROOT
from tests.local_tier.batches import make_batch, small_config


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    made = Log(tmp_path / "t-0", "t", 0, small_config(segment_bytes=4096), needs_recovery=False)
    yield made
    made.close()


def _on_thread(fn: Callable[[], Any]) -> Any:
    """``fn()`` on a new thread: its result, or the exception it raised."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def test_the_suite_runs_with_the_checks_on() -> None:
    assert os.environ["STRATA_CHECK_LOG_OWNER"] == "1"
    assert ownership.CHECKS
    assert hasattr(Log.append_as_leader, "__wrapped__")


@pytest.mark.parametrize("touch", [
    lambda lg: lg.append_as_leader(make_batch(1), 0),
    lambda lg: lg.read(0, 1024),
    lambda lg: lg.log_end_offset,
    lambda lg: lg.high_watermark,
    lambda lg: lg.truncate_to(0),
    lambda lg: lg.roll(),
    lambda lg: lg.config,
    lambda lg: lg.cleaning_view(),
])
def test_another_thread_touching_a_log_fails(log: Log, touch: Callable[[Log], Any]) -> None:
    log.append_as_leader(make_batch(3), 0)
    error = _on_thread(lambda: touch(log))
    assert isinstance(error, LogOwnerError), error
    assert "t-0" in str(error) and "does not own it" in str(error)
    assert log.log_end_offset == 3  # the owner still may, and nothing changed


def test_the_name_may_be_read_anywhere(log: Log) -> None:
    assert _on_thread(lambda: (log.name, log.topic, log.partition, log.closed)) == ("t-0", "t", 0, False)


def test_the_log_manager_is_owned_too(tmp_path: Path) -> None:
    manager = LogManager(tmp_path / "logs")
    try:
        assert isinstance(_on_thread(manager.all_logs), LogOwnerError)
        assert manager.all_logs() == {}
    finally:
        manager.shutdown()


def test_adopt_hands_the_log_to_another_thread(log: Log) -> None:
    log.append_as_leader(make_batch(2), 0)

    def take() -> int:
        log.adopt_owner()
        return log.log_end_offset

    assert _on_thread(take) == 2
    assert isinstance(_on_thread(lambda: log.log_end_offset), LogOwnerError)  # a third thread
    with pytest.raises(LogOwnerError):
        log.log_end_offset  # noqa: B018 - the first owner gave it away
    log.adopt_owner()
    assert log.log_end_offset == 2


def test_a_read_view_is_taken_on_the_owner_and_read_anywhere(log: Log) -> None:
    for _ in range(5):
        log.append_as_leader(make_batch(4), 0)
        log.roll()
    view = log.read_view()
    log.append_as_leader(make_batch(4), 0)  # after the view: not in it
    assert len(view.segments) > 1  # the replay crosses segments
    records = _on_thread(lambda: [r.offset for _, r in iter_log_records(view)])
    assert records == list(range(20))


def test_loop_owner_runs_a_cleaner_threads_work_on_the_loop(log: Log) -> None:
    log.append_as_leader(make_batch(3), 0)

    async def scenario() -> Any:
        log.adopt_owner()  # the loop's thread (here the test's) owns it
        owner = LoopOwner(asyncio.get_running_loop(), lambda: False)
        direct = await asyncio.to_thread(lambda: _catch(lambda: log.log_end_offset))
        handed = await asyncio.to_thread(lambda: owner(lambda: log.log_end_offset))
        return direct, handed

    direct, handed = asyncio.run(scenario())
    assert isinstance(direct, LogOwnerError)
    assert handed == 3


def _catch(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except LogOwnerError as exc:
        return exc


def test_without_the_setting_the_methods_are_unchanged() -> None:
    code = ("import local_tier.ownership as o, local_tier.log as l; "
            "print(o.CHECKS, hasattr(l.Log.append_as_leader, '__wrapped__'))")
    env = {**os.environ, "STRATA_CHECK_LOG_OWNER": "0"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["False", "False"]
