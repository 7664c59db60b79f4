"""What a round's history and the final logs say: anomalies, and how long partitions stalled.

Inputs: the :class:`~.workload.History`, the main topic and the transaction topic read from
start to end after every fault was healed (``{partition: [(offset, value)]}``; the
transaction topic ``read_committed``), the faults (start and heal times) and the window
the nemesis ran in. Definitions:

* **lost**: an acknowledged value that the final log does not hold;
* **duplicated**: each extra copy of a value in a final log (both topics) that the broker
  should have known for a retry: two copies written by the same producer id and epoch, or
  copies whose writer could not be read (:mod:`.identity`);
* **rewritten-by-new-epoch**: each extra copy of a value written under another producer id
  or epoch than the other copies: the client renumbered a record it held unacknowledged
  after bumping its epoch, which no broker can tell from a new record (reported, not an
  anomaly of the broker's);
* **conflicts**: an acknowledged value found at another offset than the one acknowledged
  (acknowledgements that carry no offset, as librdkafka reports a retried batch the broker
  had already written, are checked for presence only),
  or another value at its acknowledged offset; two acknowledgements of one offset; a value
  a group member read at an offset that holds something else (or nothing) in the end;
* **aborted-read**: a value of an aborted transaction seen by ``read_committed``;
* **partial-txn**: a committed transaction not wholly visible, or one of unknown outcome
  visible in part;
* **offset-regressions**: each committed offset read back (OffsetFetch answer) below one
  read back before it, or below one the group's commit of which had already succeeded;
* **max unavailability**: per partition, the longest gap between successive acknowledged
  writes in the window (from the last one before it to the first after it); the largest;
* **recovery** (per fault): time from the fault to the moment every partition has had a
  write acknowledged that was sent after the fault.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from .identity import Identity
from .workload import History

__all__ = ["check", "duplicate_offsets"]


def _examples(items: list[Any], n: int = 5) -> list[Any]:
    return items[:n]


def duplicate_offsets(final: dict[int, list[tuple[int, str]]]) -> dict[int, set[int]]:
    """``{partition: offsets}`` of every copy of a value found more than once."""
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, records in final.items():
        for o, v in records:
            where[v].append((p, o))
    out: dict[int, set[int]] = defaultdict(set)
    for locs in where.values():
        if len(locs) > 1:
            for p, o in locs:
                out[p].add(o)
    return dict(out)


def _one_writer(idents: list[Identity | None]) -> bool:
    """Whether two of these copies could be one send the broker should have known for a
    retry: the same producer id and epoch, or a writer not known."""
    seen: set[tuple[int, int]] = set()
    for ident in idents:
        if ident is None or ident[:2] in seen:
            return True
        seen.add(ident[:2])
    return False


def _data_checks(h: History, final: dict[int, list[tuple[int, str]]],
                 identities: dict[tuple[int, int], Identity] | None = None) -> dict[str, Any]:
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    at: dict[tuple[int, int], str] = {}
    for p, records in final.items():
        for o, v in records:
            where[v].append((p, o))
            at[(p, o)] = v
    lost = [v for _, _, v, _ in h.acks if v not in where]
    known = identities or {}
    dups, rewritten = [], []
    for v, locs in where.items():
        if len(locs) > 1:
            idents = [known.get(loc) for loc in locs]
            (dups if _one_writer(idents) else rewritten).append((v, list(zip(locs, idents))))
    conflicts: list[str] = []
    acked_at: dict[tuple[int, int], str] = {}
    for p, o, v, _ in h.acks:
        if o is None or o < 0:
            continue  # acknowledged without an offset (a retried batch the broker knew): presence only
        if (p, o) in acked_at and acked_at[(p, o)] != v:
            conflicts.append(f"two values acknowledged at {p}/{o}: {acked_at[(p, o)]} and {v}")
        acked_at[(p, o)] = v
        if v in where and (p, o) not in where[v]:
            conflicts.append(f"{v} acknowledged at {p}/{o}, found at {where[v]}")
        elif v in where and at.get((p, o)) != v:
            conflicts.append(f"{v} acknowledged at {p}/{o}, which holds {at.get((p, o))}")
    for p, o, v in h.reads:
        if at.get((p, o)) != v:
            conflicts.append(f"a member read {v} at {p}/{o}, which holds {at.get((p, o))} in the end")
    return {"lost": len(lost), "duplicated": sum(len(locs) - 1 for _, locs in dups),
            "rewritten_by_new_epoch": sum(len(locs) - 1 for _, locs in rewritten),
            "conflicts": len(conflicts),
            "examples": {"lost": _examples(lost), "duplicated": _examples(dups),
                         "rewritten_by_new_epoch": _examples(rewritten),
                         "conflicts": _examples(conflicts)}}


def _txn_checks(h: History, final_txn: dict[int, list[tuple[int, str]]]) -> dict[str, Any]:
    seen: dict[str, int] = defaultdict(int)
    for records in final_txn.values():
        for _, v in records:
            seen[v] += 1
    aborted_read, partial = [], []
    outcomes: dict[str, int] = defaultdict(int)
    for t in h.txns:
        outcomes[t["outcome"]] += 1
        present = sum(1 for _, v in t["values"] if seen.get(v))
        if t["outcome"] == "aborted" and present:
            aborted_read += [v for _, v in t["values"] if seen.get(v)]
        elif t["outcome"] == "committed" and present < len(t["values"]):
            partial.append(f"{t['id']} committed, {present} of {len(t['values'])} visible")
        elif t["outcome"] == "unknown" and 0 < present < len(t["values"]):
            partial.append(f"{t['id']} (outcome unknown) {present} of {len(t['values'])} visible")
    return {"aborted_read": len(aborted_read),
            "partial_txn": len(partial), "txn_duplicated": sum(n - 1 for n in seen.values() if n > 1),
            "txn_outcomes": dict(outcomes),
            "examples": {"aborted_read": _examples(aborted_read), "partial_txn": _examples(partial),
                         "txn_errors": _examples([f"{t['id']}: {t['error']}" for t in h.txns if "error" in t])}}


def _offset_checks(h: History) -> dict[str, Any]:
    regressions: list[str] = []
    by_p: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    for t0, t1, p, o in h.observed:
        by_p[p].append((t0, t1, o))
    commits = sorted(h.commits, key=lambda c: c[1])
    for p, obs in by_p.items():
        obs.sort()
        best_seen = -1
        for t0, _, o in obs:
            acked = max((c[3] for c in commits if c[2] == p and c[1] < t0), default=-1)
            if o < best_seen or o < acked:
                regressions.append(f"partition {p}: OffsetFetch {o} after seeing {best_seen}, "
                                   f"commit of {acked} acknowledged")
            best_seen = max(best_seen, o)
    return {"offset_regressions": len(regressions), "examples": {"offset_regressions": _examples(regressions)}}


def _availability(h: History, partitions: int, window: tuple[float, float],
                  faults: list[dict[str, Any]]) -> dict[str, Any]:
    w0, w1 = window
    by_p: dict[int, list[float]] = defaultdict(list)
    for p, _, _, t in h.acks:
        by_p[p].append(t)
    gaps: dict[int, float] = {}
    for p in range(partitions):
        ts = sorted(by_p[p])
        before = [t for t in ts if t < w0]
        inside = [t for t in ts if w0 <= t <= w1]
        after = [t for t in ts if t > w1]
        seq = [before[-1] if before else w0, *inside, after[0] if after else w1]
        gaps[p] = max(b - a for a, b in zip(seq, seq[1:], strict=False)) if len(seq) > 1 else 0.0
    sent_at = {v: t for v, (_, t) in h.sends.items()}
    recoveries = []
    for f in faults:
        worst = 0.0
        for p in range(partitions):
            first = min((t for q, _, v, t in h.acks if q == p and sent_at.get(v, 0) >= f["t0"]), default=None)
            worst = max(worst, (first - f["t0"]) if first is not None else w1 - f["t0"])
        f["recovery_s"] = round(worst, 3)
        recoveries.append(worst)
    return {"max_unavailability_s": round(max(gaps.values(), default=0.0), 3),
            "unavailability_by_partition_s": {p: round(g, 3) for p, g in gaps.items()},
            "recovery_median_s": round(statistics.median(recoveries), 3) if recoveries else None,
            "recovery_max_s": round(max(recoveries), 3) if recoveries else None}


def check(h: History, final: dict[int, list[tuple[int, str]]], final_txn: dict[int, list[tuple[int, str]]],
          partitions: int, window: tuple[float, float], faults: list[dict[str, Any]],
          identities: dict[tuple[int, int], Identity] | None = None) -> dict[str, Any]:
    """``identities``: the writer of each copy of a duplicated value in ``final``
    (:func:`duplicate_offsets`, :func:`.identity.producer_identities`); without them every
    extra copy counts as duplicated."""
    with h.lock:
        data, txn, offs = _data_checks(h, final, identities), _txn_checks(h, final_txn), _offset_checks(h)
        avail = _availability(h, partitions, window, faults)
        result: dict[str, Any] = {
            "acked": len(h.acks), "send_errors": len(h.errors),
            "acked_without_offset": sum(1 for _, o, _, _ in h.acks if o is None or o < 0), "lost": data["lost"],
            "duplicated": data["duplicated"] + txn["txn_duplicated"],
            "rewritten_by_new_epoch": data["rewritten_by_new_epoch"], "conflicts": data["conflicts"],
            "aborted_read": txn["aborted_read"], "partial_txn": txn["partial_txn"],
            "offset_regressions": offs["offset_regressions"], **avail,
            "txn_outcomes": txn["txn_outcomes"], "commits": len(h.commits),
            "client_errors": _examples(h.client_errors, 10),
            "examples": {**data["examples"], **txn["examples"], **offs["examples"]},
        }
    return result
