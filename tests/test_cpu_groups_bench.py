"""bench/cpu_groups.py: the CPU of the processes in a cgroup, every thread, to the nanosecond."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from cpu_groups import CpuGroup  # noqa: E402

# a child that waits for a line, then starts a process of its own, and each spins for 0.3 s
# of its own CPU time (looking at the clock only every 10,000 turns: user space, not syscalls)
SPIN = """
import subprocess, sys, time
def spin():
    end = time.process_time() + 0.3
    while time.process_time() < end:
        for _ in range(10000):
            pass
if sys.argv[1] == "parent":
    sys.stdin.readline()
    grandchild = subprocess.Popen([sys.executable, "-c", sys.argv[2], "child"])
    spin()
    sys.exit(grandchild.wait())
spin()
"""


def test_a_group_counts_the_cpu_of_its_processes_and_their_children_and_nothing_before() -> None:
    group = CpuGroup.create("strata-test-cpu")
    if group is None:
        pytest.skip("no cgroup this user may create (cpuacct v1 or v2) on this machine")
    child = subprocess.Popen([sys.executable, "-c", SPIN, "parent", SPIN], stdin=subprocess.PIPE, text=True)
    try:
        before_total = group.usage()[0]
        assert before_total == 0.0, "a new group has run nothing"
        group.add(child.pid)
        child.stdin.write("go\n")
        child.stdin.close()
        assert child.wait(timeout=30) == 0
        total, user, system = group.usage()
        # 0.3 s each for the child and its own child (started after the move), plus the
        # grandchild's interpreter start; the child's start before the move is not counted
        assert 0.6 <= total <= 1.5, total
        assert user >= 0.3, (user, system)
        assert abs((user + system) - total) < 0.25, (total, user, system)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        group.remove()
    assert not group.path.exists()
