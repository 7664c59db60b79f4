"""The CPU a set of server processes used, from a cgroup of their own, to the nanosecond.

/proc/PID/stat gives a process's CPU in clock ticks (10 ms): a measured run that costs a
server 40 ms (a consume of 100 MB from the page cache) is then read as 30, 40 or 50 ms, and
two systems that both cost about that compare as 1.00 or 0.75 or 1.33 by chance. A cgroup's
accounting counts every thread and child of the processes in it, those that exited too, in
nanoseconds of CPU time; its user/system split is sampled at the kernel's timer tick (4 ms
at HZ 250), so it is a statistical split of an exact total.

:class:`CpuGroup` makes one cgroup, moves the given processes into it (threads and later
children follow) and reads its counters: cgroup v1's ``cpuacct`` controller
(``cpuacct.usage``, ``usage_user``, ``usage_sys``) or cgroup v2's ``cpu.stat``
(``usage_usec``, ``user_usec``, ``system_usec``). :func:`CpuGroup.create` answers ``None``
where neither can be made (not root, no cgroup file system): callers then fall back to
/proc and say so.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup/cpuacct")
V2_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


class CpuGroup:
    def __init__(self, path: Path, version: int) -> None:
        self.path, self.version = path, version

    @property
    def source(self) -> str:
        return f"cgroup v{self.version} {self.path}"

    @classmethod
    def create(cls, name: str) -> CpuGroup | None:
        """A new, empty cgroup named ``name`` (made unique with this process's id), or None."""
        leaf = f"{name}-{os.getpid()}"
        candidates = [(V1_ROOT, 1, "cpuacct.usage")]
        candidates += [(root, 2, "cgroup.controllers") for root in V2_ROOTS]
        for root, version, marker in candidates:
            if not (root / marker).exists():
                continue
            path = root / leaf
            try:
                path.mkdir(exist_ok=True)
            except OSError:
                continue
            group = cls(path, version)
            try:
                group.usage()
            except (OSError, ValueError):
                group.remove()
                continue
            return group
        return None

    def add(self, pid: int) -> None:
        """Move ``pid`` (all its threads) into the group; CPU it used before is not counted."""
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def usage(self) -> tuple[float, float, float]:
        """(total, user, system) CPU seconds of everything that ran in the group so far."""
        if self.version == 1:
            total = int((self.path / "cpuacct.usage").read_text()) / 1e9
            user = int((self.path / "cpuacct.usage_user").read_text()) / 1e9
            system = int((self.path / "cpuacct.usage_sys").read_text()) / 1e9
            return total, user, system
        stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines() if line.strip())
        return int(stat["usage_usec"]) / 1e6, int(stat["user_usec"]) / 1e6, int(stat["system_usec"]) / 1e6

    def remove(self, timeout: float = 5.0) -> None:
        """Remove the group once the processes in it have exited (a cgroup with tasks stays)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() >= deadline:
                    return  # left behind, empty once its processes are gone
                time.sleep(0.1)
