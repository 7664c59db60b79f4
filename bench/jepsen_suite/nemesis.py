"""Faults: each nemesis makes one (``start``) and undoes it (``heal``), returning what it did.

| name | fault | heal |
| --- | --- | --- |
| ``kill`` | kill -9 of a random broker | start it again |
| ``kill-controller`` | kill -9 of the lease holder | start it again |
| ``kill-other`` | kill -9 of a random broker that is not the controller | start it again |
| ``pause`` | SIGSTOP of a random broker | SIGCONT |
| ``isolate`` | a random non-controller cut from its peers (clients and bucket still reach it) | reconnect |
| ``isolate-controller`` | the controller cut from its peers | reconnect |
| ``bucket`` | a random non-controller cut from the bucket | reconnect |
| ``bucket-controller`` | the controller cut from the bucket | reconnect |
| ``bucket-all`` | every broker cut from the bucket (an outage of the bucket, ADR 0031) | reconnect |
| ``kill-all`` | kill -9 of every broker | start them all |
| ``rolling-restart`` | SIGTERM each broker in turn, start it, wait until it serves | nothing |

The controller is the holder named by ``cluster/controller-lease`` in the bucket at the
moment of the fault. Driven by one thread (the runner's).
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from typing import Any

from .cluster import JepsenCluster

__all__ = ["NEMESES", "Nemesis"]

READY_S = 90.0
SIGTERM_S = 30.0


class Nemesis:
    def __init__(self, cluster: JepsenCluster, rng: random.Random, log: Callable[[str], None]) -> None:
        self.c, self.rng, self.log = cluster, rng, log
        self.target: int | None = None
        self.notes: list[str] = []

    def _any(self) -> int:
        return self.rng.choice(sorted(self.c.brokers))

    def _controller(self) -> int:
        holder = self.c.controller_id()
        return holder if holder in self.c.brokers else self._any()

    def _non_controller(self) -> int:
        holder = self.c.controller_id()
        return self.rng.choice([n for n in sorted(self.c.brokers) if n != holder])

    def _restart(self, nodes: list[int]) -> None:
        try:
            self.c.start_brokers(nodes, READY_S)
        except RuntimeError as exc:
            self.notes.append(str(exc))
            self.log(f"  ! {exc}")

    # each returns a description of the fault it made
    def start(self, name: str) -> str:
        c, peers = self.c, lambda n: [m for m in self.c.brokers if m != n]
        if name in ("kill", "kill-controller", "kill-other"):
            self.target = {"kill-controller": self._controller,
                           "kill-other": self._non_controller}.get(name, self._any)()
            c.brokers[self.target].kill()
            return f"kill -9 broker {self.target}"
        if name == "pause":
            self.target = self._any()
            c.brokers[self.target].signal(signal.SIGSTOP)
            c.brokers[self.target].paused = True
            return f"SIGSTOP broker {self.target}"
        if name in ("isolate", "isolate-controller"):
            self.target = self._controller() if name == "isolate-controller" else self._non_controller()
            c.net.isolate(self.target, peers(self.target))
            return f"isolate broker {self.target} from {peers(self.target)}"
        if name in ("bucket", "bucket-controller"):
            self.target = self._controller() if name == "bucket-controller" else self._non_controller()
            c.net.cut_bucket(self.target)
            return f"cut broker {self.target} from the bucket"
        if name == "bucket-all":
            for n in sorted(c.brokers):
                c.net.cut_bucket(n)
            return "cut every broker from the bucket"
        if name == "kill-all":
            for b in c.brokers.values():
                b.kill()
            return "kill -9 every broker"
        if name == "rolling-restart":
            for n, b in sorted(c.brokers.items()):
                t = time.monotonic()
                clean = b.stop(SIGTERM_S)
                if not clean:
                    self.notes.append(f"broker {n} did not exit {SIGTERM_S:.0f} s after SIGTERM (killed)")
                self.log(f"  broker {n} stopped in {time.monotonic() - t:.1f} s"
                         f"{'' if clean else ' (SIGTERM hung: killed)'}")
                self._restart([n])
            return "SIGTERM, start, wait ready: each broker in turn"
        raise ValueError(f"unknown nemesis {name!r}; known: {', '.join(NEMESES)}")

    def heal(self, name: str) -> None:
        c, target = self.c, self.target
        if name in ("kill", "kill-controller", "kill-other") and target is not None:
            self._restart([target])
        elif name == "pause" and target is not None:
            c.brokers[target].signal(signal.SIGCONT)
            c.brokers[target].paused = False
        elif name in ("isolate", "isolate-controller", "bucket", "bucket-controller"):
            c.net.heal(target)
        elif name == "bucket-all":
            c.net.heal(None)
        elif name == "kill-all":
            self._restart(sorted(c.brokers))
        self.target = None

    def heal_everything(self) -> None:
        """Undo whatever may be left: no cuts, nothing paused, every broker running."""
        self.c.net.heal(None)
        for b in self.c.brokers.values():
            if b.paused:
                b.signal(signal.SIGCONT)
                b.paused = False
        down = [n for n, b in self.c.brokers.items() if not b.running]
        if down:
            self._restart(down)


NEMESES: tuple[str, ...] = ("kill", "kill-controller", "kill-other", "pause", "isolate", "isolate-controller",
                            "bucket", "bucket-controller", "bucket-all", "kill-all", "rolling-restart")


def fault_record(name: str, what: str, t0: float, t1: float, t_heal: float) -> dict[str, Any]:
    return {"nemesis": name, "what": what, "t0": t0, "t_made": t1, "t_heal": t_heal}
