"""Who this data dir belongs to: ``meta.properties``, as Kafka keeps it in every log dir.

Kafka writes ``meta.properties`` (``version``, ``cluster.id``, ``node.id``) into
each log directory and refuses to start when a directory belongs to another
cluster or node. Strata does the same, and keeps two more lines that make a
restart after a crash fast (docs/adr/0009-controller-lease.md, "Restarts"):

* ``incarnation.id`` -- the process that last ran on this directory, written
  *before* it competes for the controller lease. The next process on this
  directory (which holds the data dir lock, so the previous one is gone) may take
  over a lease that still names it at once.
* ``broker.epoch`` -- the broker epoch that incarnation was registered with,
  written once registered. The next incarnation sends it as BrokerRegistration's
  ``PreviousBrokerEpoch``, which tells the controller that this is a restart of
  that broker and not a second process with the same node.id.

Writes are atomic (temp file, fsync, rename). Not thread-safe; read and written
at start-up only.
"""

from __future__ import annotations

import errno
import logging
import os
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

__all__ = ["META_PROPERTIES", "DataDirOwnerError", "NodeIdentity"]

META_PROPERTIES = "meta.properties"
_log = logging.getLogger("strata.cluster")
_FILE_BYTES = 512
_VERSION = "1"


class DataDirOwnerError(Exception):
    """The data dir belongs to another node or another cluster."""


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """The content of ``meta.properties`` (None: not known yet)."""

    node_id: int
    cluster_id: str | None = None
    incarnation_id: uuid.UUID | None = None
    broker_epoch: int = -1

    @staticmethod
    def read(data_dir: Path) -> NodeIdentity | None:
        """The identity stored in ``data_dir`` (None when it has none yet)."""
        path = data_dir / META_PROPERTIES
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        values: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and not line.lstrip().startswith("#"):
                values[key.strip()] = value.strip()
        try:
            return NodeIdentity(
                node_id=int(values["node.id"]),
                cluster_id=values.get("cluster.id") or None,
                incarnation_id=(
                    uuid.UUID(values["incarnation.id"]) if values.get("incarnation.id") else None
                ),
                broker_epoch=int(values.get("broker.epoch", "-1")),
            )
        except (KeyError, ValueError) as exc:
            raise DataDirOwnerError(f"{path} is unreadable ({exc!r}); move it away to start") from exc

    def check(self, node_id: int, data_dir: Path) -> None:
        """Refuse a data dir written by another node id."""
        if self.node_id != node_id:
            raise DataDirOwnerError(
                f"the data dir {data_dir} belongs to node.id {self.node_id}, not {node_id} "
                f"(see {data_dir / META_PROPERTIES}): start with --node-id {self.node_id}, "
                "or give this node its own --data-dir"
            )

    def check_cluster(self, cluster_id: str, data_dir: Path) -> None:
        """Refuse a data dir of another cluster (its logs would be taken for this one's)."""
        if self.cluster_id is not None and self.cluster_id != cluster_id:
            raise DataDirOwnerError(
                f"the data dir {data_dir} belongs to cluster {self.cluster_id}, but the object "
                f"store holds cluster {cluster_id}: point --object-store at that cluster's "
                "bucket, or give this broker an empty --data-dir"
            )

    def with_incarnation(self, incarnation_id: uuid.UUID) -> NodeIdentity:
        return replace(self, incarnation_id=incarnation_id, broker_epoch=-1)

    def write_or_warn(self, data_dir: Path) -> bool:
        """:meth:`write`, logging instead of raising when the disk is full (the file only
        makes the next restart faster); True if written."""
        try:
            self.write(data_dir)
        except OSError as exc:
            _log.warning("cannot write %s (%s); the next restart of this broker waits for "
                         "its previous session and lease to expire", data_dir / META_PROPERTIES, exc)
            return False
        return True

    def write(self, data_dir: Path) -> None:
        lines = [
            "# Written by Strata; the data dir's owner (do not edit while the broker runs)",
            f"version={_VERSION}",
            f"node.id={self.node_id}",
        ]
        if self.cluster_id is not None:
            lines.append(f"cluster.id={self.cluster_id}")
        if self.incarnation_id is not None:
            lines.append(f"incarnation.id={self.incarnation_id}")
        lines.append(f"broker.epoch={self.broker_epoch}")
        text = "\n".join(lines) + "\n"
        # padded to a fixed size, so that on a full disk it can be rewritten in place
        data = (text + "#" * max(0, _FILE_BYTES - len(text) - 1) + "\n").encode()
        path = data_dir / META_PROPERTIES
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not path.exists():
                raise
            if path.stat().st_size != len(data):
                raise
            fd = os.open(path, os.O_WRONLY)  # the same blocks: no new space needed
            try:
                os.pwrite(fd, data, 0)
                os.fsync(fd)
            finally:
                os.close(fd)
            return
        fd = os.open(data_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
