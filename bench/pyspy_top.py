"""Summarise a py-spy ``--format raw`` (collapsed stacks) profile: top frames by self and total time.

    python bench/pyspy_top.py PROFILE.collapsed [-n 25]

``bench/foundation.py --profile DIR`` writes one such file per phase.
"""

from __future__ import annotations

import argparse
import collections
import re


def _short(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "func (to/file.py:123)"
    m = re.match(r"(.*) \((.*?)(?::(\d+))?\)$", frame)
    if not m:
        return frame
    func, path, line = m.groups()
    path = "/".join(path.split("/")[-2:])
    return f"{func} ({path}:{line})" if line else f"{func} ({path})"


def summarise(path: str, n: int = 25) -> str:
    self_t: collections.Counter[str] = collections.Counter()
    total_t: collections.Counter[str] = collections.Counter()
    samples = 0
    idle = 0
    for raw in open(path):
        raw = raw.rstrip("\n")
        if not raw:
            continue
        stack, _, count = raw.rpartition(" ")
        c = int(count)
        frames = [_short(f) for f in stack.split(";")]
        samples += c
        leaf = frames[-1]
        if "select (selectors.py" in leaf or "_run_once" in leaf and "select" in leaf:
            idle += c
        self_t[leaf] += c
        for f in set(frames):
            total_t[f] += c
    out = [f"{path}: {samples} samples ({idle} in selector.select = idle event loop)", "",
           f"top {n} by self time:"]
    for f, c in self_t.most_common(n):
        out.append(f"  {100 * c / samples:5.1f}%  {f}")
    out += ["", f"top {n} by total (inclusive) time:"]
    for f, c in total_t.most_common(n):
        out.append(f"  {100 * c / samples:5.1f}%  {f}")
    return "\n".join(out)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("profile")
    ap.add_argument("-n", type=int, default=25)
    a = ap.parse_args()
    print(summarise(a.profile, a.n))
