"""Writing the cluster metadata as the controller of one epoch: the fencing rule.

Every write of the document carries the writer's controller epoch and is a
compare-and-set against the version the change was computed from
(:meth:`MetadataCommitter.commit`). A write is refused, before anything is
sent, when the stored document already carries a higher controller epoch; and a
write that loses its compare-and-set re-reads the document and is refused the
same way if a higher epoch wrote it meanwhile. Since a new controller's first
act is a write with its epoch, every later write of a deposed controller fails:
its ``If-Match`` names a version that is gone, and the re-read shows the higher
epoch (``docs/adr/0009-controller-lease.md``).

Epoch 0 is the writer without a lease (the single-node :class:`controller.Controller`):
it may write only documents that no elected controller has written.

Thread-safe (no state besides the store, which is).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from controller.document import ClusterMetadata
from controller.document_codec import decode, encode
from controller.errors import ControllerFencedError
from controller.metadata_store import MetadataConflict, MetadataStore
from controller.registrations import NO_LEADER

__all__ = ["MetadataCommitter", "Snapshot", "StaleSnapshot", "check_controller_epoch"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A committed document and its store version (the object's etag)."""

    metadata: ClusterMetadata
    version: str

    @property
    def revision(self) -> int:
        return self.metadata.revision


class StaleSnapshot(MetadataConflict):
    """The write lost its compare-and-set; ``current`` is what the store holds now."""

    def __init__(self, current: Snapshot | None) -> None:
        super().__init__("the cluster metadata changed since it was read")
        self.current = current


def check_controller_epoch(stored: ClusterMetadata, controller_epoch: int, node_id: int) -> None:
    """``ControllerFencedError`` if ``stored`` was written by a higher controller epoch."""
    if stored.controller_epoch <= controller_epoch:
        return
    if controller_epoch == 0:
        raise ControllerFencedError(
            f"the cluster metadata is managed by an elected controller (node "
            f"{stored.controller_id}, controller epoch {stored.controller_epoch}); a "
            "single-node controller may not write it"
        )
    raise ControllerFencedError(
        f"node {node_id} is no longer the controller: its controller epoch {controller_epoch} "
        f"is fenced by node {stored.controller_id} at controller epoch {stored.controller_epoch}"
    )


class MetadataCommitter:
    """Reads snapshots and commits changes to a :class:`MetadataStore` (see module docstring)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    @property
    def store(self) -> MetadataStore:
        return self._store

    def read(self) -> Snapshot | None:
        """The stored snapshot, or None if the document was never written."""
        current = self._store.read()
        if current is None:
            return None
        data, version = current
        return Snapshot(decode(data), version)

    def create(self, metadata: ClusterMetadata) -> Snapshot:
        """Write the first document; ``MetadataConflict`` if one exists already."""
        return Snapshot(metadata, self._store.write(encode(metadata), None))

    def commit(
        self,
        base: Snapshot,
        updated: ClusterMetadata,
        *,
        controller_epoch: int,
        controller_id: int = NO_LEADER,
    ) -> Snapshot:
        """Write ``updated`` (computed from ``base``) as controller ``controller_id`` of
        ``controller_epoch``; returns the new snapshot.

        The written document has ``revision = base.revision + 1`` and carries the
        writer's epoch and id. Raises ``ControllerFencedError`` if ``base`` or the
        document stored now has a higher controller epoch, :class:`StaleSnapshot`
        (with the stored snapshot) if another write of an epoch not above ours got
        there first: re-apply the change to ``current`` and commit again.
        """
        check_controller_epoch(base.metadata, controller_epoch, controller_id)
        stamped = replace(
            updated,
            revision=base.metadata.revision + 1,
            controller_epoch=controller_epoch,
            controller_id=controller_id if controller_epoch > 0 else NO_LEADER,
        )
        try:
            version = self._store.write(encode(stamped), base.version)
        except MetadataConflict:
            current = self.read()
            if current is not None:
                check_controller_epoch(current.metadata, controller_epoch, controller_id)
            raise StaleSnapshot(current) from None
        return Snapshot(stamped, version)
