"""CPU affinity for the threads that serve history (``remote.log.reader.cpus``).

A tiered read costs the broker CPU twice: the ranged GET (HTTP, copying the body)
and sending the records to the consumer. Both run off the event loop, but threads
of one process still share the machine's cores with it, and Linux wakes a thread
on the core of whatever woke it. Pinning the tiered-fetch and history-send threads
to their own CPUs keeps that work off the cores the event loop and the live
consumers run on: the dedicated-cores answer Redpanda gives with its shard
pinning, for one pool of threads.

Linux only (``os.sched_setaffinity`` on the calling thread). Elsewhere, or when
the CPUs are outside the process's cgroup cpuset, the threads run unpinned and
the broker says so once in its log.
"""

from __future__ import annotations

import logging
import os
import threading

__all__ = ["pin_current_thread"]

log = logging.getLogger("strata.affinity")
_warned = threading.Event()


def pin_current_thread(cpus: frozenset[int]) -> bool:
    """Restrict the calling thread to ``cpus`` (no-op when empty); False when it could not."""
    if not cpus:
        return True
    try:
        os.sched_setaffinity(0, cpus)  # pid 0: the calling thread, not the whole process
    except (AttributeError, OSError) as exc:
        if not _warned.is_set():
            _warned.set()
            log.warning("cannot pin history threads to CPUs %s (%s); they run unpinned",
                        ",".join(map(str, sorted(cpus))), exc)
        return False
    return True
