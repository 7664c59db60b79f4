"""How ``.ci/test``'s two pytest-xdist workers share the suite.

xdist's ``--dist loadfile`` hands out whole files, by default in order of their number of
tests. The suite's time is elsewhere: a few end-to-end files of a handful of tests each take
a minute or two, and each worker that runs a Spark test starts a JVM session of its own
(20-40 s). Handed out last, one long file kept a worker busy while the other had nothing
left. So here:

* every file under ``tests/spark/`` is one unit of work, so one worker starts one session;
* the units go out heaviest kind first (Spark, then ``tests/e2e/``, then the rest, each in
  collection order), so the many short unit-test files are what both workers share at the
  end.

Used by tests/conftest.py's hooks; a file's tests keep their order and stay together.
"""

from __future__ import annotations

from typing import Any

#: directory prefixes whose files go out first, in this order
HEAVY_FIRST = ("tests/spark/", "tests/e2e/")
#: directories whose files are one unit of work together (one Spark session per worker)
ONE_UNIT = ("tests/spark/",)


def _path(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or its directory for ``ONE_UNIT``."""
    path = _path(nodeid)
    return next((d.rstrip("/") for d in ONE_UNIT if path.startswith(d)), path)


def rank_of(nodeid: str) -> int:
    """Where a test's unit goes in the queue: the index of its ``HEAVY_FIRST`` prefix."""
    path = _path(nodeid)
    return next((i for i, d in enumerate(HEAVY_FIRST) if path.startswith(d)), len(HEAVY_FIRST))


def heavy_first_scheduler(config: Any, log: Any) -> Any:
    """A ``--dist loadfile`` scheduler that hands out :func:`scope_of` units in collection
    order (the collection is sorted by :func:`rank_of` in tests/conftest.py)."""
    from xdist.scheduler import LoadFileScheduling

    class HeavyFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    config.option.loadscopereorder = False  # keep the collection's order, not tests per file
    return HeavyFirst(config, log)
