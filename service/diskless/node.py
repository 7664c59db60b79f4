"""A broker's diskless topics, wired into its requests: :class:`DisklessNode` (ADR 0027).

Every broker takes Produce and Fetch for every diskless partition (Metadata names the
broker asked as its leader). Its parts, each built and tested on its own in this package:

* **writes**: a produced batch goes into the broker's one open write-ahead object
  (:class:`~service.diskless.writer.WalWriter`); once the object is in the bucket each
  batch is proposed to its partition's sequencer, the partition's leader in the
  metadata: this broker's own :class:`~service.diskless.sequencer.Sequencer` or a peer's
  over DisklessCommit (:mod:`service.diskless.rpc`). A proposal refused because the
  sequencer changed (NOT_LEADER_OR_FOLLOWER, an unknown or fenced leader epoch, a peer
  unreachable) is proposed again to the sequencer the metadata names then, with its leader
  epoch, until the commit deadline is near: a failover costs a producer latency, not an
  error. The object stays valid until the deadline, and a sequencer recognises a proposal
  it (or its predecessor) committed already by its object and position.
* **sequencing**: the partitions this broker leads are taken over from the bucket
  (:func:`~service.diskless.takeover.take_over`) once the previous sequencer can no longer
  answer (two thirds of a broker session after the leadership change), then sequenced.
* **reads**: the sequencer's committed entries from an offset (DisklessIndex from a peer,
  a long poll), the bytes from the bucket through the broker's cache of write-ahead
  objects; offsets below the partition's first unmerged one from its tiered segments.
* **merging** and **collecting** run on timers (:mod:`service.diskless.upkeep`).

Not thread-safe: the event loop owns it; bucket I/O runs on its own threads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from common.errors import (
    BrokerNotAvailableError,
    FencedLeaderEpochError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from common.record.batch import ValidatedRecords, read_batch_header, stamp_batch
from controller.document import ClusterMetadata
from controller.metadata import TopicInfo
from local_tier.producer_snapshot import decode_snapshot
from remote_tier.diskless.commits import ChainId, CommitChain, CommitEntry
from remote_tier.errors import FencedError
from remote_tier.manifest import ManifestStore, PartitionManifest
from service.diskless import rpc
from service.diskless.committer import GroupCommitter
from service.diskless.host import DisklessHost
from service.diskless.index_waits import IndexWaits, enough
from service.diskless.reader import WalCache
from service.diskless.sequence import Proposal
from service.diskless.sequencer import Sequencer
from service.diskless.takeover import take_over
from service.diskless.writer import WalWriter

__all__ = ["DisklessNode"]

_log = logging.getLogger("strata.diskless")

Key = tuple[uuid.UUID, int]

#: errors after which a proposal goes again to whichever broker sequences the partition then
_RESEND = (NotLeaderOrFollowerError, UnknownLeaderEpochError, FencedLeaderEpochError, BrokerNotAvailableError,
           LeaderNotAvailableError)
#: how long a manifest read for reads of merged offsets is used before it is read again
_MANIFEST_TTL_S = 5.0
#: how long index reads wait for the takeovers here reading their partitions' manifests and
#: commits (past the handover wait) before they answer NOT_LEADER_OR_FOLLOWER
TAKEOVER_READ_WAIT_S = 3.0



class DisklessNode:
    """See the module docstring."""

    def __init__(self, broker: DisklessHost) -> None:
        config = broker.config
        self._broker = broker
        self.node_id = broker.node_id
        self.store = broker.object_store
        self._io = ThreadPoolExecutor(max_workers=8, thread_name_prefix="strata-diskless")
        self.batch_ms = config.get_int("diskless.batch.ms")
        self.commit_deadline_ms = config.get_int("diskless.commit.deadline.ms")
        self.orphan_grace_ms = max(config.get_int("diskless.orphan.grace.ms"), 4 * self.commit_deadline_ms)
        self.merge_interval_ms = config.get_int("diskless.merge.interval.ms")
        self.collect_interval_ms = config.get_int("diskless.collect.interval.ms")
        #: the previous sequencer answers no commit two thirds of a session after it lost its
        #: leadership (ADR 0024's lease): a takeover waits that long (ADR 0027, section 4)
        self.handover_wait_s = config.get_int("broker.session.timeout.ms") * 2 / 3000 + 0.2
        self.cache = WalCache(config.get_int("diskless.cache.bytes"))
        self.tiered_reads = broker.tiered_reads
        self.manifests = ManifestStore(self.store, "")
        self.writer = WalWriter("", self.node_id, self._put, self._propose, batch_ms=self.batch_ms,
                                batch_bytes=config.get_int("diskless.batch.bytes"),
                                commit_deadline_ms=self.commit_deadline_ms, cache=self.cache,
                                max_inflight=config.get_int("diskless.max.inflight.objects"))
        self.sequencer: Sequencer | None = None
        self._taking: dict[Key, int] = {}  # partitions being taken over: the leader epoch
        self._loading: set[Key] = set()  # of them, those past the handover wait, reading the bucket
        self.waits = IndexWaits()  # long polls waiting for a commit
        self._index_busy: dict[tuple[int, int], int] = {}  # DisklessIndex in flight per connection
        self._getting: dict[str, asyncio.Future[bytes]] = {}  # GETs of write-ahead objects in flight
        self._manifest_cache: dict[Key, tuple[float, PartitionManifest | None]] = {}
        #: bytes of DisklessCommit and DisklessIndex sent and received (entries, never records)
        self.rpc_bytes_out = 0
        self.rpc_bytes_in = 0
        self.takeovers = 0
        self.merged_segments = 0
        #: when retention is next due by time in each partition sequenced here (ms; absent: now);
        #: forgotten when the topic's configs change, the partition is resigned or taken over
        self.retention_at: dict[Key, int] = {}
        #: partitions whose merge or retention failed: not before (ms)
        self.upkeep_backoff: dict[Key, float] = {}
        self._configs: dict[uuid.UUID, Any] = {}  # each diskless topic's configs as last applied

    def run_io(self, fn: Any, *args: Any) -> Awaitable[Any]:
        """``fn(*args)`` on the diskless I/O threads (bucket requests, merges)."""
        return asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    async def _put(self, key: str, data: bytes) -> None:
        await self.run_io(self.store.put, key, data)

    def close(self) -> None:
        self._io.shutdown(wait=False, cancel_futures=True)

    async def stop(self) -> None:
        """A clean stop: what is open goes to the bucket and is committed, or fails."""
        await self.writer.close()

    # -- the metadata --------------------------------------------------------------------

    def _metadata(self) -> ClusterMetadata:
        return self._broker.controller.metadata

    def apply(self, md: ClusterMetadata) -> None:
        """Sequence the diskless partitions ``md`` says this broker leads; resign the others."""
        sequencer = self._ensure_sequencer()
        if sequencer is None:
            return
        for info in md.topics.values():
            if not info.diskless:
                continue
            if self._configs.get(info.topic_id) is not info.configs:  # retention.* may have changed
                self._configs[info.topic_id] = info.configs
                for key in [k for k in self.retention_at if k[0] == info.topic_id]:
                    del self.retention_at[key]
            for index, reg in enumerate(md.partitions.get(info.topic_id, ())):
                key = (info.topic_id, index)
                led = sequencer.get(*key)
                if reg.leader != self.node_id:
                    if led is not None:
                        _log.info("diskless %s-%d: no longer sequenced here", info.name, index)
                        sequencer.resign(*key)
                        self._forget(key)
                    continue
                if (led is not None and led.leader_epoch == reg.leader_epoch) or self._taking.get(key) == reg.leader_epoch:
                    continue
                if led is not None:
                    sequencer.resign(*key)
                self._taking[key] = reg.leader_epoch
                if reg.leader_epoch == 0:  # no handover to wait for: reads wait for the takeover
                    self._loading.add(key)
                else:  # reads wait only once its handover wait is over
                    self._loading.discard(key)
                self._broker.spawn(self._take_over(info, index, reg.leader_epoch))
        for key in sequencer.led():
            if md.topic_by_id(key[0]) is None:  # deleted: its sequencer deletes its bucket data
                sequencer.resign(*key)
                self._forget(key)
                self._configs.pop(key[0], None)
                self._broker.spawn(self._broker.tiering.delete_partition(str(key[0]), *key))

    def _forget(self, key: Key) -> None:
        """A partition no longer sequenced here: its waiting readers hear it, its state goes."""
        self.waits.touch(key)
        self._manifest_cache.pop(key, None)
        self.retention_at.pop(key, None)
        self.upkeep_backoff.pop(key, None)

    def _ensure_sequencer(self) -> Sequencer | None:
        if self.sequencer is not None:
            return self.sequencer
        cluster = self._broker.cluster
        epoch = cluster.broker_epoch if cluster is not None else -1
        if epoch < 0:
            return None
        may_lead = self._broker.replicas.may_lead
        chain = CommitChain(self.store, "", ChainId(self.node_id, epoch))
        self.sequencer = Sequencer(GroupCommitter(chain, 0, self.run_io, may_answer=lambda: may_lead()),
                                   commit_deadline_ms=self.commit_deadline_ms)
        return self.sequencer

    async def _take_over(self, info: TopicInfo, index: int, epoch: int) -> None:
        key = (info.topic_id, index)
        try:
            if epoch > 0:
                await asyncio.sleep(self.handover_wait_s)
                if self._taking.get(key) == epoch:  # reads wait for the rest
                    self._loading.add(key)
            if not self._still_leads(key, epoch):
                return
            sequencer = self.sequencer
            assert sequencer is not None
            loaded = await self.run_io(self.manifests.load, info.topic_id, index)
            manifest = loaded[0] if loaded is not None else None
            producers = await self.run_io(self._producers_at_merge, manifest, info.topic_id, index)
            committer = sequencer.committer
            sequence = await self.run_io(
                take_over, self.store, "", self.manifests, info.topic_id, index, info.name, epoch,
                committer.chain.chain, committer.next_slot, producers)
            if not self._still_leads(key, epoch):
                return
            sequencer.lead(sequence)
            self.retention_at.pop(key, None)  # checked at the next pass
            self.takeovers += 1
            self._manifest_cache.pop(key, None)
            _log.info("diskless %s-%d: sequenced here at leader epoch %d from offset %d (%d entries unmerged)",
                      info.name, index, epoch, sequence.committed_end, len(sequence.durable))
            self.waits.touch(key)
        except FencedError as exc:
            _log.info("diskless %s-%d: a newer sequencer took over first: %s", info.name, index, exc)
        except Exception as exc:  # noqa: BLE001 - the bucket: the next metadata tries again
            _log.warning("diskless %s-%d: takeover at epoch %d failed: %r", info.name, index, epoch, exc)
        finally:
            if self._taking.get(key) == epoch:
                del self._taking[key]
                self._loading.discard(key)
                self.waits.touch(key)  # reads waiting it out look again
        if not self._sequenced(key, epoch) and self._still_leads(key, epoch):
            await asyncio.sleep(1.0)  # failed: try again
            self.apply(self._metadata())

    def _still_leads(self, key: Key, epoch: int) -> bool:
        reg = self._metadata().partition(*key)
        return reg is not None and reg.leader == self.node_id and reg.leader_epoch == epoch

    def _sequenced(self, key: Key, epoch: int) -> bool:
        led = self.sequencer.get(*key) if self.sequencer is not None else None
        return led is not None and led.leader_epoch == epoch

    def _producers_at_merge(self, manifest: PartitionManifest | None, topic_id: uuid.UUID, index: int) -> list[Any]:
        """The producer state at the merged end: the last merged segment's snapshot."""
        if manifest is None or not manifest.segments:
            return []
        segment = manifest.segments[-1]
        data = self._broker.tiering.rsm.read_producer_snapshot(segment, topic_id, index)
        return decode_snapshot(data) if data else []

    # -- writes --------------------------------------------------------------------------

    def produce(self, info: TopicInfo, index: int, records: Any, validated: ValidatedRecords,
                log_append_time: bool) -> Awaitable[CommitEntry]:
        """Write one partition's validated batches; the first batch's committed entry (its
        base offset), once every batch is committed, or the first error."""
        reg = self._metadata().partition(info.topic_id, index)
        if reg is None:
            raise UnknownTopicOrPartitionError(f"{info.name} has no partition {index}")
        if any(header.is_transactional for _, header in validated.headers):  # before any batch is written
            raise InvalidTxnStateError("transactions are not supported on diskless topics (issue 35)")
        waits = []
        view = memoryview(records)
        for position, header in validated.headers:
            batch: bytes | bytearray = bytes(view[position:position + header.size])
            if log_append_time:
                batch = bytearray(batch)
                stamp_batch(batch, 0, base_offset=0, leader_epoch=-1, log_append_time_ms=int(time.time() * 1000))
                header = read_batch_header(batch, 0)
            waits.append(self.writer.write(info.topic_id, index, reg.leader_epoch, bytes(batch), header))
        return _first_entry(waits)

    async def _propose(self, proposals: Sequence[Proposal]) -> list[CommitEntry | KafkaError]:
        answers: list[CommitEntry | KafkaError] = [NotLeaderOrFollowerError("not proposed")] * len(proposals)
        todo = list(range(len(proposals)))
        loop = asyncio.get_running_loop()
        give_up = loop.time() + max(0.5, self.commit_deadline_ms / 1000 - self.batch_ms / 1000 - 2.0)
        backoff = 0.05
        while True:
            md = self._metadata()
            groups: dict[int, list[tuple[int, Proposal]]] = {}
            for i in todo:
                p = proposals[i]
                reg = md.partition(p.topic_id, p.partition)
                if reg is None:
                    answers[i] = UnknownTopicOrPartitionError(f"no partition {p.partition} of topic {p.topic_id}")
                elif reg.leader < 0:
                    answers[i] = LeaderNotAvailableError(f"partition {p.partition} of {p.topic_id} has no sequencer")
                else:
                    groups.setdefault(reg.leader, []).append((i, dataclasses.replace(p, leader_epoch=reg.leader_epoch)))
            results = await asyncio.gather(*(self._commit_at(node, [p for _, p in group])
                                             for node, group in groups.items()))
            for group, result in zip(groups.values(), results, strict=True):
                for (i, _), answer in zip(group, result, strict=True):
                    answers[i] = answer
            todo = [i for i in todo if isinstance(answers[i], _RESEND)]
            if not todo or loop.time() + backoff >= give_up:
                return answers
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 0.5)

    async def _commit_at(self, node: int, proposals: list[Proposal]) -> Sequence[CommitEntry | KafkaError]:
        if node == self.node_id:
            return await self.commit_here(proposals)
        body = rpc.encode_commit_request(proposals)
        try:
            channel = self._peers().channel(node)
            self.rpc_bytes_out += len(body)
            raw = await channel.request_raw(rpc.DISKLESS_COMMIT, body,
                                            timeout_s=self.commit_deadline_ms / 1000)
            self.rpc_bytes_in += len(raw)
            return rpc.decode_commit_answer(raw, proposals)
        except KafkaError as exc:
            return [exc] * len(proposals)
        except rpc.RpcFormatError as exc:
            _log.warning("broker %d answered DisklessCommit with %s", node, exc)
            return [KafkaStorageError(f"broker {node} answered a diskless commit badly: {exc}")] * len(proposals)

    async def commit_here(self, proposals: Sequence[Proposal]) -> list[CommitEntry | KafkaError]:
        """Proposals to this broker's sequencer (its own writer's or a peer's)."""
        if self.sequencer is None:
            return [NotLeaderOrFollowerError(f"broker {self.node_id} sequences nothing yet")] * len(proposals)
        answers = await self.sequencer.commit(proposals)
        for key in {(p.topic_id, p.partition) for p in proposals}:
            self.waits.touch(key)
        return answers

    def _peers(self) -> Any:
        cluster = self._broker.cluster
        if cluster is None:
            raise BrokerNotAvailableError("this broker has not joined a cluster")
        return cluster.diskless_peers

    # -- the index: this broker as a sequencer, and asking one ----------------------------

    async def index_here(self, reads: Sequence[rpc.IndexRead], max_wait_ms: int,
                         poll: str = "", min_bytes: int = 1) -> list[rpc.IndexAnswer | KafkaError]:
        """This sequencer's answers to ``reads``, waiting up to ``max_wait_ms`` until they
        hold ``min_bytes`` of entries or one has something else to act on (merged offsets,
        an offset out of range, an error), or the poll is woken."""
        answers = [self._index_one(r) for r in reads]
        keys = {(r.topic_id, r.partition) for r in reads}
        if reads and keys <= self._loading:  # all of them being taken here: answered once they are
            woken = await self.waits.wait_out(keys, self._loading.__contains__, TAKEOVER_READ_WAIT_S, poll)
            answers = [self._index_one(r) for r in reads]
            if woken or (poll and self.waits.woken_before(poll)):
                return answers
        elif poll and self.waits.woken_before(poll):
            return answers  # its reader was answered before this poll even arrived
        if max_wait_ms <= 0 or not reads:
            return answers
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max_wait_ms, 30_000) / 1000
        while not enough(reads, answers, min_bytes):
            left = deadline - loop.time()
            if left <= 0:
                break
            woken = await self.waits.wait_any(keys, left, poll)
            answers = [self._index_one(r) for r in reads]
            if woken or (poll and self.waits.woken_before(poll)):
                break
        return answers

    def _index_one(self, read: rpc.IndexRead) -> rpc.IndexAnswer | KafkaError:
        sequence = self.sequencer.get(read.topic_id, read.partition) if self.sequencer is not None else None
        if sequence is None:
            return NotLeaderOrFollowerError(f"broker {self.node_id} does not sequence partition {read.partition} "
                                            f"of topic {read.topic_id}")
        chosen: list[CommitEntry] = []
        if read.timestamp == -3:  # the newest timestamp (the first batch holding it)
            chosen = [max(sequence.durable, key=lambda e: e.max_timestamp)] if sequence.durable else []
        elif read.timestamp >= 0:
            found = next((e for e in sequence.durable if e.max_timestamp >= read.timestamp), None)
            chosen = [found] if found is not None else []
        elif read.max_bytes > 0 and read.offset >= sequence.start_offset:
            size = 0
            for entry in sequence.entries_from(read.offset):
                if chosen and size + entry.size > read.max_bytes:
                    break
                chosen.append(entry)
                size += entry.size
        return rpc.IndexAnswer(sequence.start_offset, sequence.committed_end, tuple(chosen))

    def sequencer_of(self, topic_id: uuid.UUID, partition: int) -> int:
        """The broker sequencing the partition now; raises UNKNOWN_TOPIC_OR_PARTITION or
        LEADER_NOT_AVAILABLE."""
        reg = self._metadata().partition(topic_id, partition)
        if reg is None:
            raise UnknownTopicOrPartitionError(f"no partition {partition} of topic {topic_id}")
        if reg.leader < 0:
            raise LeaderNotAvailableError(f"partition {partition} of topic {topic_id} has no sequencer")
        return int(reg.leader)

    async def index_at(self, node: int, reads: Sequence[rpc.IndexRead], max_wait_ms: int,
                       poll: str = "", min_bytes: int = 1) -> list[rpc.IndexAnswer | KafkaError]:
        """:meth:`index_here` at broker ``node``; a failure is each read's error."""
        if node == self.node_id:
            return await self.index_here(reads, max_wait_ms, poll, min_bytes)
        body = rpc.encode_index_request(rpc.IndexRequest(tuple(reads), max_wait_ms, poll, min_bytes=min_bytes))
        self.rpc_bytes_out += len(body)
        try:
            slot = self._index_slot(node)
        except KafkaError as exc:
            return [exc] * len(reads)
        try:
            raw = await slot.channel(node).request_raw(rpc.DISKLESS_INDEX, body, timeout_s=max_wait_ms / 1000 + 10)
            self.rpc_bytes_in += len(raw)
            return rpc.decode_index_answer(raw, len(reads))
        except KafkaError as exc:
            return [exc] * len(reads)
        except rpc.RpcFormatError as exc:
            _log.warning("broker %d answered DisklessIndex with %s", node, exc)
            return [KafkaStorageError(f"broker {node} answered a diskless index request badly: {exc}")] * len(reads)
        finally:
            self._index_busy[(id(slot), node)] -= 1

    def _index_slot(self, node: int) -> Any:
        """The least busy of the index connections to ``node``: a connection answers in order,
        so a long poll held there would hold up the next request on it."""
        cluster = self._broker.cluster
        if cluster is None:
            raise BrokerNotAvailableError("this broker has not joined a cluster")
        slot = min(cluster.diskless_index_peers, key=lambda p: self._index_busy.get((id(p), node), 0))
        self._index_busy[(id(slot), node)] = self._index_busy.get((id(slot), node), 0) + 1
        return slot

    async def wake_at(self, node: int, poll: str) -> None:
        """End the long poll ``poll`` at broker ``node`` (best effort)."""
        if node == self.node_id:
            self.waits.wake(poll)
            return
        try:
            await self._peers().channel(node).request_raw(
                rpc.DISKLESS_INDEX, rpc.encode_index_request(rpc.IndexRequest(wake=poll)), timeout_s=5)
        except KafkaError:
            pass

    async def index(self, topic_id: uuid.UUID, partition: int, read: rpc.IndexRead) -> rpc.IndexAnswer:
        """One partition's answer from its sequencer, wherever it is; raises its error."""
        answer = (await self.index_at(self.sequencer_of(topic_id, partition), [read], 0))[0]
        if isinstance(answer, KafkaError):
            raise answer
        return answer

    # -- reading the bytes -----------------------------------------------------------------

    async def get_object(self, key: str) -> bytes:
        """A write-ahead object the cache lacks (its readers looked there first:
        :func:`~service.diskless.reader.read_entries`), with one GET however many ask at once."""
        pending = self._getting.get(key)
        if pending is None:
            pending = self._getting[key] = asyncio.ensure_future(self.run_io(self.store.get, key))
            pending.add_done_callback(lambda done: self._got(key, done))
        return await asyncio.shield(pending)

    def _got(self, key: str, done: asyncio.Future[bytes]) -> None:
        """A GET ended: its object goes in the cache before any reader can miss both."""
        del self._getting[key]
        if not done.cancelled() and done.exception() is None:
            self.cache.put(key, done.result())

    def forget_manifest(self, key: Key) -> None:
        """The partition's manifest changed here (a merge): read it again when next needed."""
        self._manifest_cache.pop(key, None)

    async def manifest(self, key: Key, *, newer_than: int = -1) -> PartitionManifest | None:
        """The partition's manifest, read again when older than a few seconds or when its
        merged end is below ``newer_than`` (a merge the cache has not seen)."""
        loop = asyncio.get_running_loop()
        cached = self._manifest_cache.get(key)
        if cached is not None and loop.time() - cached[0] < _MANIFEST_TTL_S and (
                cached[1].next_offset if cached[1] is not None else 0) >= newer_than:
            return cached[1]
        loaded = await self.run_io(self.manifests.load, *key)
        manifest = loaded[0] if loaded is not None else None
        self._manifest_cache[key] = (loop.time(), manifest)
        return manifest


async def _first_entry(waits: list[Awaitable[CommitEntry]]) -> CommitEntry:
    results = await asyncio.gather(*waits, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results[0]  # type: ignore[return-value]

