"""GroupOffsetService: committed consumer-group offsets through the Raft log.

Writes (OffsetCommit, OffsetDelete, expiry) are COMMIT_GROUP_OFFSETS /
DELETE_GROUP_OFFSETS entries (sink/state/offset_command.py) proposed by the leader;
a write is answered only once its entry is committed and applied here, so an
acknowledged commit survives any later leader change. Reads come from the applied
table (SinkStateMachine.group_offsets), on the coordinator only (the handlers check).

Expiry: while this node is a ready leader, every retention_check_interval_ms it
computes which offsets are due (GroupOffsetTable.expired, with the coordinator's
view of each group) and proposes their deletion, each conditioned on the commit it
saw, so a commit racing the expiry survives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from raftlog.runtime import (
    BusyError,
    LeaderChangedError,
    NodeStoppedError,
    NotLeaderError,
    ProposalTimeoutError,
)
from sink.groups.membership import NO_GROUPS, GroupMembership
from sink.kafka.protocol.errors import ErrorCode
from sink.state import offset_command as oc
from sink.state.group_offsets import CommittedOffset, GroupOffsetTable

log = logging.getLogger("sink.groups")

Propose = Callable[[bytes], Awaitable[Any]]
"""Replicate an entry and apply it; returns the ApplyResult (its .result), raises the
raftlog.runtime errors (RaftNode.apply with a timeout)."""

OffsetFields = tuple[str, int, int, int, "str | None", int, int]
"""(topic, partition, offset, leader_epoch, metadata, commit_ms, expire_ms), as the
OffsetCommit handler sends them (commit_ms / expire_ms -1: not given)."""


@dataclass(frozen=True, slots=True)
class OffsetsOptions:
    retention_minutes: int = 10080
    """Committed offsets of a group without members expire this long after the group
    became empty (or, for a group only committing offsets, after their last commit);
    Kafka's offsets.retention.minutes (7 days). Expiry goes through the log."""
    retention_check_interval_ms: int = 600_000
    """How often the leader looks for expired offsets (Kafka's
    offsets.retention.check.interval.ms)."""
    metadata_max_bytes: int = 4096
    """Largest metadata string of a committed offset; a longer one is refused with
    OFFSET_METADATA_TOO_LARGE (Kafka's offset.metadata.max.bytes)."""
    expire_batch: int = 10_000
    """Most offsets one expiry entry deletes (the rest go in the next round)."""
    commit_batch_bytes: int = 1 << 20
    """OffsetCommit requests arriving together share one log entry up to this many
    bytes of offsets; 0: one entry per request."""

    def __post_init__(self) -> None:
        if self.retention_minutes < 1:
            raise ValueError(
                f"offsets.retention_minutes must be >= 1, got {self.retention_minutes}"
            )
        if self.retention_check_interval_ms < 1:
            raise ValueError(
                f"offsets.retention_check_interval_ms must be >= 1, got {self.retention_check_interval_ms}"
            )
        if self.metadata_max_bytes < 0:
            raise ValueError(
                f"offsets.metadata_max_bytes must be >= 0, got {self.metadata_max_bytes}"
            )
        if self.commit_batch_bytes < 0:
            raise ValueError(
                f"offsets.commit_batch_bytes must be >= 0, got {self.commit_batch_bytes}"
            )
        if self.expire_batch < 1:
            raise ValueError(f"offsets.expire_batch must be >= 1, got {self.expire_batch}")

    @property
    def retention_ms(self) -> int:
        return self.retention_minutes * 60_000


def wall_ms() -> int:
    return int(time.time() * 1000)


def write_error(exc: BaseException) -> ErrorCode:
    """A failed offset write as Kafka's coordinator answers it
    (GroupMetadataManager.storeOffsets): no longer the coordinator -> NOT_COORDINATOR
    (the client looks it up again); not committed in time or too busy ->
    COORDINATOR_NOT_AVAILABLE (retriable; the outcome of a timed-out commit is unknown,
    and committing the same offsets again is harmless)."""
    if isinstance(exc, NotLeaderError | LeaderChangedError | NodeStoppedError):
        return ErrorCode.not_coordinator
    if isinstance(exc, ProposalTimeoutError | BusyError | TimeoutError):
        return ErrorCode.coordinator_not_available
    log.error("groups.offset_write unexpected error %r", exc, exc_info=exc)
    return ErrorCode.unknown_server_error


class GroupOffsetService:
    """The GroupOffsets interface of sink.kafka.handlers.services over the log."""

    def __init__(
        self,
        table: Callable[[], GroupOffsetTable],
        propose: Propose,
        *,
        ready: Callable[[], bool],
        options: OffsetsOptions | None = None,
        membership: GroupMembership = NO_GROUPS,
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        """table() -> the applied table (read each time: a snapshot load replaces it);
        ready() -> this node is a leader whose own-term entry is applied."""
        self._table = table
        self._propose = propose
        self._ready = ready
        self.options = options or OffsetsOptions()
        self.membership = membership
        self._clock_ms = clock_ms
        self._task: asyncio.Task | None = None
        self.expired_total = 0  # offsets removed by this node's expiry entries
        # Commit batching: encoded blocks waiting for the end of this loop turn.
        self.max_batch_bytes = self.options.commit_batch_bytes
        self._pending: list[tuple[bytes, asyncio.Future, int]] = []
        self._pending_bytes = 0
        self._flush_scheduled = False
        self._tasks: set[asyncio.Task] = set()
        self.commit_requests = 0  # OffsetCommit requests proposed...
        self.commit_entries = 0  # ...in this many log entries

    @property
    def metadata_max_bytes(self) -> int:
        return self.options.metadata_max_bytes

    # ------------------------------------------------------------------ reads

    def committed_offset(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        return self._table().get(group, topic, partition)

    def committed_partitions(self, group: str) -> list[tuple[str, int]]:
        return self._table().partitions(group)

    def has_group(self, group: str) -> bool:
        return self._table().has_group(group)

    # ----------------------------------------------------------------- writes

    async def commit_offsets(
        self, group: str, items: Sequence[OffsetFields], retention_ms: int = -1
    ) -> list[ErrorCode] | ErrorCode:
        """Store offsets through the log -> one code per item (in order), or one code for
        all when the entry failed. Commit time is now unless the item gives one (v1);
        retention_ms >= 0 (v2-v4) sets an explicit expiry of now + retention_ms.

        Batching: the requests that arrive in one turn of the event loop share one entry
        (one block each, applied in arrival order), at most max_batch_bytes of blocks."""
        now = self._clock_ms()
        expire = now + retention_ms if retention_ms >= 0 else -1
        block = oc.encode_commit_block(
            group,
            [
                oc.OffsetCommitItem(
                    t,
                    p,
                    off,
                    epoch,
                    md,
                    commit if commit >= 0 else now,
                    exp if exp >= 0 else expire,
                )
                for t, p, off, epoch, md, commit, exp in items
            ],
        )
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        if self._pending and self._pending_bytes + len(block) > self.max_batch_bytes:
            self._flush()
        self._pending.append((block, fut, len(items)))
        self._pending_bytes += len(block)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._scheduled_flush)
        return await fut

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self._flush()

    def _flush(self) -> None:
        """Propose the pending blocks as one entry (proposal order = arrival order:
        tasks start in creation order and RaftNode.apply queues at its first step)."""
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        if not pending:
            return
        entry = oc.join_commit_blocks([block for block, _, _ in pending])
        self.commit_entries += 1
        self.commit_requests += len(pending)
        task = asyncio.get_running_loop().create_task(self._propose_commits(entry, pending))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _propose_commits(self, entry: bytes, pending: list) -> None:
        try:
            res = await self._propose(entry)
        except Exception as exc:
            err = write_error(exc)
            for _, fut, _ in pending:
                if not fut.done():
                    fut.set_result(err)
            return
        results = res.result
        for i, (_, fut, n) in enumerate(pending):
            if fut.done():  # the request went away (its connection closed)
                continue
            codes = results[i] if i < len(results) else None
            # unreadable at apply: a bug in the encoder
            fut.set_result(
                codes if codes is not None and len(codes) == n else ErrorCode.unknown_server_error
            )

    async def delete_offsets(self, group: str, partitions: Sequence[tuple[str, int]]) -> ErrorCode:
        """OffsetDelete: remove the group's offsets of these partitions through the log."""
        entry = oc.encode_delete_group_offsets(
            oc.REASON_DELETE, {group: [(t, p, -1) for t, p in partitions]}
        )
        # Commits that arrived before this request reach the log first: flush them, then
        # propose from a task created after theirs (tasks start in creation order).
        self._flush()
        try:
            await asyncio.get_running_loop().create_task(self._propose(entry))
        except Exception as exc:
            return write_error(exc)
        return ErrorCode.none

    # ----------------------------------------------------------------- expiry

    async def expire_once(self) -> int:
        """One expiry round (leader only): propose the deletion of every offset due now
        (at most options.expire_batch) -> how many the entry removed."""
        if not self._ready():
            return 0
        due = self._table().expired(
            self._clock_ms(),
            self.options.retention_ms,
            self.membership.status,
            self.options.expire_batch,
        )
        if not due:
            return 0
        entry = oc.encode_delete_group_offsets(oc.REASON_EXPIRE, due)
        try:
            res = await self._propose(entry)
        except Exception as exc:  # not leader any more, or slow: the next round retries
            log.info("groups.expire not applied: %r", exc)
            return 0
        removed = int(res.result)
        self.expired_total += removed
        log.info("groups.expire removed=%d groups=%d", removed, len(due))
        return removed

    def start(self) -> None:
        """Run expiry rounds every retention_check_interval_ms until stop()."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._expiry_loop())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _expiry_loop(self) -> None:
        interval = self.options.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                while await self.expire_once() >= self.options.expire_batch:
                    pass  # a full batch: more may be due
            except Exception:  # never let a bug end expiry for the node's life
                log.exception("groups.expire failed")
