"""Freed memory kept in the guest while a benchmark runs (VMs with free page reporting).

This machine is a Firecracker VM whose balloon reports free memory to the host
(``virtio_balloon`` with free page reporting): a page the guest frees (a deleted topic's
page cache, a stopped JVM's heap) is handed back within seconds, and touching it again
costs the host a fault. Measured here (stop 63): writing 300 MB into the page cache took
0.06 s of system time on pages the guest had just used, and 0.6-1.0 s on pages handed
back, about 3 s per GB, charged to whichever process touched them first. A benchmark
whose rows write and delete topics then measures the host's page faults as much as the
servers: the RF 3 1 KiB produce of one Strata cluster went 9.2, 6.1, 3.1 s of CPU per GB
in three runs in a row, and 2.8-4.1 once freed pages were kept.

:func:`freed_pages_kept` holds freed pages in the guest for ``ms`` (the reporting
module's ``min_free_ms``: how long a page must stay free before it is reported), as a
server without a balloon would keep them, and restores the setting after. Where there is
no such setting (another machine) or it cannot be written (not root), nothing changes
and the result says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

__all__ = ["HOLD_PARAMETER", "describe", "freed_pages_kept"]

HOLD_PARAMETER = Path("/sys/module/page_reporting/parameters/min_free_ms")
#: a minute: longer than a benchmark's topic lives before the next one reuses its pages
#: (this kernel takes up to 300,000 ms at least, and refuses 600,000)
HOLD_MS = 60_000


@contextlib.contextmanager
def freed_pages_kept(ms: int = HOLD_MS, parameter: Path | None = None) -> Iterator[dict]:
    """Within the block, memory the guest frees stays in the guest for ``ms`` before it is
    reported to the host. Yields what was done, for the report: ``{"parameter", "was",
    "held_ms"}``, or ``{"unchanged": why}``."""
    path = HOLD_PARAMETER if parameter is None else parameter
    try:
        was = path.read_text().strip()
    except OSError as exc:
        yield {"unchanged": f"no free page reporting setting here ({path}: {exc.strerror or exc})"}
        return
    try:
        path.write_text(str(ms))
    except OSError as exc:
        yield {"unchanged": f"cannot set {path} ({exc.strerror or exc}); it stays {was}"}
        return
    try:
        yield {"parameter": str(path), "was": was, "held_ms": ms}
    finally:
        path.write_text(was)


def describe(memory: dict | None) -> str:
    """A report's sentence on ``{"freed_pages": what freed_pages_kept yielded, "prewarm":
    foundation.prewarm_memory's result}`` ("" when the run recorded neither)."""
    memory = memory or {}
    kept, warm = memory.get("freed_pages") or {}, memory.get("prewarm") or {}
    if "held_ms" not in kept:
        return f" Freed memory: left as it was ({kept.get('unchanged', 'not recorded')})." if kept else ""
    return (" Memory: this VM hands pages its guest frees back to the host (free page reporting), and a page "
            "handed back costs about 3 s of system time per GB to touch again, charged to whichever process "
            f"touches it. For the run, freed pages stayed in the guest for {kept['held_ms'] / 1000:g} s "
            f"(`{kept['parameter']}`, {kept['was']} before and after) and {warm.get('gib', 0):g} GiB were "
            "written and deleted through the page cache first, as on a server without a balloon "
            "(`bench/guest_memory.py`).")
