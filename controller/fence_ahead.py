"""The two batches each broker's fencing would write, made before the broker dies.

When a broker dies, the controller writes two batches (:func:`controller.replication_control.fence_broker`
without ISR places, then :func:`~controller.replication_control.drop_fenced_from_isrs`), and every
other broker reads and replays them. At 10,000 partitions on three brokers that is 3,300 and then
6,700 PartitionChangeRecords: computing them, encoding them, decoding them and replaying them
is Python work in proportion to the partitions, done at the very moment every survivor is
waiting for it (issue 33). Yet both batches are a pure function of the image they follow and
of which broker dies, and the image rarely changes.

:class:`FenceAhead` keeps, for every active broker, both :class:`Step` s made from the image it
was prepared for: the image before and after, the records, and the records' lines exactly as
:func:`controller.metadata_log_format.batch_text` writes them, and those lines deflated: the
controller's gzip of the batch then costs only its header (``batch_object``), and a broker
reading it inflates only the header (``known_text``).

* **The controller** takes a step when the image it fences from holds the step's base state
  (:func:`same_state`: its topics, registrations and brokers the very objects, as the image
  a commit installs shares them with the one it computed), and writes the step's lines instead of
  computing and encoding them (:meth:`FenceAhead.fence`, :meth:`FenceAhead.drop_from_isrs`, :meth:`FenceAhead.step_to`).
* **A broker** replaying a batch onto such an image takes the step's image when the batch's
  record lines are, byte for byte, the step's (:meth:`FenceAhead.image_after`). The same lines
  replayed onto the same image give the same result, which is the step's: the test suite proves
  at every commit that a batch's replay equals the image it was computed from
  (``STRATA_VERIFY_METADATA_REPLAY``). Lines that differ (a controller with other plans, another
  unclean-election policy, a batch of something else) are replayed as always.

Either side at worst does not use a step: they are caches that are never wrong. Memory, at
10,000 partitions on three brokers, per other broker: the two batches' lines (about 1.7 MB),
on the controller their records too (about 4.5 MB), and the images, which share every
unchanged topic with the one they were made from.

Thread-safety: one thread prepares (the controller's tick thread, a broker's ahead thread);
the steps are published whole, in one assignment, so the threads that use them (the
controller's commits, from request threads too; a broker's refresh) see all of them or none.
:attr:`FenceAhead.taken` is a counter for the logs and tests, not locked.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from controller.document import ClusterMetadata
from controller.fence_plans import FencePlans
from controller.metadata_log_format import GZIP_FROM_BYTES, KnownLines, deflate_lines, record_lines
from controller.metadata_records import records_between
from controller.replication_control import UncleanPolicy, drop_fenced_from_isrs, fence_broker

__all__ = ["FenceAhead", "Step", "same_state"]

_log = logging.getLogger(__name__)


def same_state(a: ClusterMetadata, b: ClusterMetadata) -> bool:
    """Whether ``a`` and ``b`` hold the same state in the same objects: each topic, each
    topic's registrations and each broker's registration the very object (an image shares
    them with the one it was made from; a copy with another revision or controller does too).
    O(topics + brokers)."""
    if a is b:
        return True
    return (a.cluster_id == b.cluster_id and a.next_producer_id == b.next_producer_id
            and _same_values(a.brokers, b.brokers)  # first: the cheapest, and a fencing changes one
            and _same_values(a.topics, b.topics) and _same_values(a.partitions, b.partitions)
            and a.sections == b.sections)


def _same_values(a: Mapping[Any, Any], b: Mapping[Any, Any]) -> bool:
    return len(a) == len(b) and all(b.get(key, _ABSENT) is value for key, value in a.items())


_ABSENT = object()


@dataclass(frozen=True, slots=True)
class Step:
    """One batch of a fencing: from ``base`` to ``image``, as ``records`` and their ``lines``."""

    node_id: int  # the broker fenced
    first: bool  # its first batch (new leaders, fenced); else the second (out of the ISRs)
    base: ClusterMetadata
    image: ClusterMetadata
    records: list[dict[str, Any]]  # empty where not kept (a broker needs only their count)
    count: int
    lines: bytes
    #: the lines deflated (None: too few to be gzipped): the controller writes them, a broker
    #: recognises them in the object it reads without inflating them
    deflated: bytes | None


class FenceAhead:
    """Both batches of each active broker's fencing from one image (module docstring)."""

    def __init__(self) -> None:
        self._steps: tuple[Step, ...] = ()
        self.prepared_for: ClusterMetadata | None = None
        self._pending: list[int] = []  # brokers still to prepare for ``prepared_for``
        self._made: list[Step] = []
        self.taken = 0  # steps used (a counter for the tests and the logs)

    @property
    def ready(self) -> bool:
        """Whether there are steps to use."""
        return bool(self._steps)

    @property
    def steps(self) -> tuple[Step, ...]:
        """The steps made for :attr:`prepared_for` (none until every broker's are)."""
        return self._steps

    @property
    def complete(self) -> bool:
        return self.prepared_for is not None and not self._pending

    def prepare(self, md: ClusterMetadata, unclean: UncleanPolicy, plans: FencePlans | None = None, *,
                skip: Iterable[int] = (), brokers_per_call: int | None = None, keep_records: bool = True) -> int:
        """Make the steps of ``md``, at most ``brokers_per_call`` brokers' in one call (the
        rest at the next calls with the same ``md``); returns the brokers done in this call.
        ``skip``: brokers whose fencing this node never replays (itself). ``keep_records``:
        the controller writes them; a broker only compares lines. The steps of an older image
        are dropped at the first call for a new one."""
        if md is not self.prepared_for:
            self.prepared_for, self._made = md, []
            skipped = set(skip)
            self._pending = [b.node_id for b in md.active_brokers() if b.node_id not in skipped]
            self._steps = ()
        done = 0
        while self._pending and (brokers_per_call is None or done < brokers_per_call):
            node_id = self._pending.pop(0)
            fenced = fence_broker(md, node_id, unclean, isr_places=False, plans=plans)
            dropped = drop_fenced_from_isrs(fenced, unclean, plans)
            self._made.append(_step(node_id, True, md, fenced, keep_records))
            if dropped is not fenced:
                self._made.append(_step(node_id, False, fenced, dropped, keep_records))
            done += 1
        if not self._pending:
            self._steps = tuple(self._made)
        return done

    def clear(self) -> None:
        self._steps, self.prepared_for, self._pending, self._made = (), None, [], []

    # -- the controller ---------------------------------------------------------------------

    def fence(self, md: ClusterMetadata, node_id: int) -> ClusterMetadata | None:
        """The image after ``node_id``'s first batch from ``md``, when made ahead."""
        return self._image_from(md, first=True, node_id=node_id)

    def drop_from_isrs(self, md: ClusterMetadata) -> ClusterMetadata | None:
        """The image after a fencing's second batch from ``md`` (the first's image), when made
        ahead."""
        return self._image_from(md, first=False)

    def step_to(self, base: ClusterMetadata, updated: ClusterMetadata) -> Step | None:
        """The step whose batch turns ``base`` into ``updated`` (that very image)."""
        for step in self._steps:
            if step.image is updated and same_state(step.base, base):
                return self._take(step)
        return None

    # -- a broker ---------------------------------------------------------------------------

    def known_lines(self) -> tuple[KnownLines, ...]:
        """Each step's lines with their deflate stream: a batch object that ends with one is
        not inflated whole (``controller.metadata_log_format.known_text``)."""
        return tuple((step.deflated, step.lines) for step in self._steps if step.deflated is not None)

    def may_match(self, text: bytes) -> bool:
        """Whether the batch ``text`` has the length of a step's (cheap: before the image it
        would apply to is built)."""
        size = len(text) - text.find(b"\n") - 1
        return any(len(step.lines) == size for step in self._steps)

    def image_after(self, base: ClusterMetadata, text: bytes, revision: int) -> ClusterMetadata | None:
        """The image after the batch ``text`` (its JSON Lines, header first) of slot
        ``revision`` replayed onto ``base``, when its record lines are a step's from ``base``;
        None otherwise (and for a header that is not that slot's: the decode then says why)."""
        steps = self._steps
        if not steps:
            return None
        header, _, lines = text.partition(b"\n")
        for step in steps:
            if len(step.lines) == len(lines) and same_state(step.base, base) and step.lines == lines:
                try:
                    batch = orjson.loads(header)["batch"]
                    fields = (batch["revision"], batch["controller_id"], batch["controller_epoch"], batch["records"])
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    return None
                if fields[0] != revision or fields[3] != step.count or not all(type(f) is int for f in fields):
                    return None
                self._take(step)
                _log.info("metadata revision %d is the %s batch of broker %d's fencing made ahead: "
                          "taken as made, not replayed", revision, "first" if step.first else "second",
                          step.node_id)
                return replace(step.image, revision=revision, controller_id=fields[1], controller_epoch=fields[2])
        return None

    def _take(self, step: Step) -> Step:
        self.taken += 1
        return step

    def _image_from(self, md: ClusterMetadata, *, first: bool, node_id: int | None = None) -> ClusterMetadata | None:
        for step in self._steps:
            if step.first == first and node_id in (None, step.node_id) and same_state(step.base, md):
                return self._take(step).image
        return None


def _step(node_id: int, first: bool, base: ClusterMetadata, image: ClusterMetadata, keep_records: bool) -> Step:
    records = records_between(base, image)
    lines = record_lines(records)
    return Step(node_id, first, base, image, records if keep_records else [], len(records), lines,
                deflate_lines(lines) if len(lines) >= GZIP_FROM_BYTES // 2 else None)
