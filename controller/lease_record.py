"""The controller lease object's content and timings: :class:`LeaseRecord`, :class:`LeaseTimings`.

``docs/adr/0009-controller-lease.md`` gives the format; :mod:`controller.lease` the protocol.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from common.config.broker import BrokerConfig

__all__ = ["NO_HOLDER", "LeaseRecord", "LeaseTimings", "monotonic_ms", "wall_ms"]

NO_HOLDER = -1
_FORMAT_VERSION = 1


def monotonic_ms() -> float:
    """This machine's monotonic time in milliseconds, counting time spent suspended
    (``CLOCK_BOOTTIME`` on Linux), so a holder that was suspended sees its lease expire."""
    clock_id = getattr(time, "CLOCK_BOOTTIME", None)
    if clock_id is not None:
        return time.clock_gettime_ns(clock_id) / 1_000_000
    return time.monotonic_ns() / 1_000_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class LeaseTimings:
    """The lease's timings in milliseconds (see the module docstring).

    Invariant: ``renew_ms + safety_margin_ms < lease_ms``, so the holder renews
    at least once before it would stop acting; ``ValueError`` otherwise.
    """

    lease_ms: int = 5_000
    renew_ms: int = 1_000
    safety_margin_ms: int = 1_500
    clock_skew_ms: int = 500
    poll_ms: int = 500
    #: how long at most a controller whose lease ran out in a bucket outage every broker
    #: sees holds the cluster as it is (0: never; ADR 0031)
    outage_hold_max_ms: int = 0

    def __post_init__(self) -> None:
        if min(self.lease_ms, self.renew_ms, self.poll_ms) <= 0:
            raise ValueError("controller lease timings must be positive")
        if self.safety_margin_ms < 0 or self.clock_skew_ms < 0 or self.outage_hold_max_ms < 0:
            raise ValueError("controller lease safety margin and clock skew must be >= 0")
        if self.renew_ms + self.safety_margin_ms >= self.lease_ms:
            raise ValueError(
                f"controller.lease.renew.ms ({self.renew_ms}) + "
                f"controller.lease.safety.margin.ms ({self.safety_margin_ms}) must be below "
                f"controller.lease.ms ({self.lease_ms}): the controller would stop acting "
                "before its next renewal"
            )

    @classmethod
    def from_config(cls, config: BrokerConfig) -> LeaseTimings:
        return cls(
            lease_ms=config.get_int("controller.lease.ms"),
            renew_ms=config.get_int("controller.lease.renew.ms"),
            safety_margin_ms=config.get_int("controller.lease.safety.margin.ms"),
            clock_skew_ms=config.get_int("controller.lease.clock.skew.ms"),
            poll_ms=config.get_int("controller.lease.poll.ms"),
            outage_hold_max_ms=config.get_int("controller.bucket.outage.hold.ms"),
        )

    @property
    def valid_for_ms(self) -> int:
        """How long after sending a successful renewal the holder may act."""
        return self.lease_ms - self.safety_margin_ms

    @property
    def hold_report_ms(self) -> int:
        """How long a broker's report that it cannot read the lease counts for a controller
        holding through a bucket outage, from the controller's answer the report echoes
        (ADR 0031): with :attr:`hold_grant_ms`, three quarters of the wait any takeover needs
        after the broker reads the bucket again."""
        return self.lease_ms * 3 // 8

    @property
    def hold_grant_ms(self) -> int:
        """How long a broker that cannot read the metadata may go on leading after it sent
        a request the holding controller answered (ADR 0031)."""
        return self.lease_ms * 3 // 8


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The lease object's content. ``holder`` is ``NO_HOLDER`` once released."""

    holder: int
    epoch: int
    incarnation_id: str
    lease_ms: int
    renewals: int = 0
    renewed_wall_ms: int = 0  # for people reading the object; never trusted
    #: on a released lease (holder -1), the node that released it (-1: unknown); written
    #: only then, so a reader of format 1 that predates the field reads it unchanged
    released_by: int = NO_HOLDER

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "version": _FORMAT_VERSION,
            "holder": self.holder,
            "epoch": self.epoch,
            "incarnation_id": self.incarnation_id,
            "lease_ms": self.lease_ms,
            "renewals": self.renewals,
            "renewed_wall_ms": self.renewed_wall_ms,
        }
        if self.released_by != NO_HOLDER:
            doc["released_by"] = self.released_by
        return json.dumps(doc, separators=(",", ":")).encode()

    @staticmethod
    def decode(data: bytes) -> LeaseRecord:
        """Parse a lease object; ``ValueError`` if it is not one of a known version."""
        try:
            doc: Any = json.loads(data)
            if doc["version"] != _FORMAT_VERSION:
                raise ValueError(f"lease format version {doc['version']!r} is not supported")
            record = LeaseRecord(
                holder=doc["holder"],
                epoch=doc["epoch"],
                incarnation_id=str(doc["incarnation_id"]),
                lease_ms=doc["lease_ms"],
                renewals=doc["renewals"],
                renewed_wall_ms=doc["renewed_wall_ms"],
                released_by=doc.get("released_by", NO_HOLDER),
            )
        except (KeyError, TypeError, json.JSONDecodeError) as err:
            raise ValueError(f"controller lease object is malformed: {err!r}") from err
        numbers = (record.holder, record.epoch, record.lease_ms, record.renewals, record.released_by)
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            raise ValueError(f"controller lease object is malformed: {record}")
        if record.epoch < 0 or record.lease_ms <= 0:
            raise ValueError(f"controller lease object is malformed: {record}")
        return record
