"""The apply side of a RaftGroup (a part of raftlog.runtime.group.RaftGroup: every
field is RaftGroup's, set in its __init__ or, for what needs the storage, its _open;
this class holds no state of its own).

The apply loop: committed entries and installed snapshots to the FSM in order
(serial calls, queued batches coalesced), proposal futures completed by index with
the term they were proposed in, on_leader_start at the leader's first entry of its
term; then the snapshots taken behind the applied index (Compaction).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from typing import Any

from raftlog.core import Role
from raftlog.core.log_reader import Snapshot
from raftlog.entry import EntryType, LogEntry
from raftlog.runtime.errors import LeaderChangedError
from raftlog.runtime.state_machine import ApplyResult


class GroupApply:
    """The apply loop and snapshots of RaftGroup (no state of its own)."""

    async def _apply_loop(self) -> None:
        try:
            while True:
                item = await self._apply_q.get()
                if isinstance(item, Snapshot):
                    self.fsm.on_snapshot_load(item.data)
                    self.applied = self._compaction.last_index = item.meta.index
                    self.queue.set_applied(self.applied)
                    continue
                entries: list[LogEntry] = list(item)
                while not self._apply_q.empty():  # coalesce queued batches
                    nxt = self._apply_q.get_nowait()
                    if isinstance(nxt, Snapshot):
                        await self._apply_entries(entries)
                        entries = []
                        self.fsm.on_snapshot_load(nxt.data)
                        self.applied = self._compaction.last_index = nxt.meta.index
                        self._unknown_below(nxt.meta.index)
                        self.queue.set_applied(self.applied)
                        continue
                    entries.extend(nxt)
                if entries:
                    await self._apply_entries(entries)
                self._maybe_snapshot()
        except Exception as exc:
            self._fail(exc)

    async def _apply_entries(self, entries: list[LogEntry]) -> None:
        data = [e for e in entries if e.type is EntryType.DATA]
        results: Sequence[Any] = ()
        if data:
            out = self.fsm.on_apply(data)
            results = await out if inspect.isawaitable(out) else out
            if len(results) != len(data):
                raise RuntimeError(
                    f"on_apply returned {len(results)} results for {len(data)} entries"
                )
        self.stats.apply_batches += 1
        self.stats.applied_entries += len(data)
        waiters = self._waiters
        if waiters:
            for e, r in zip(data, results, strict=False):
                w = waiters.pop(e.index, None)
                if w is None:
                    continue
                self._pending_count -= 1
                if w.future.done():
                    continue
                if w.term == e.term:
                    w.future.set_result(ApplyResult(e.index, e.term, r))
                else:
                    w.future.set_exception(
                        LeaderChangedError(f"entry {e.index} was replaced by a later leader")
                    )
            for e in entries:
                if e.type is not EntryType.DATA:
                    w = waiters.pop(e.index, None)
                    if w is None:
                        continue
                    self._pending_count -= 1
                    if w.future.done():
                        continue
                    if w.term == e.term:  # a membership change we proposed
                        w.future.set_result(ApplyResult(e.index, e.term, None))
                    else:
                        w.future.set_exception(
                            LeaderChangedError(f"entry {e.index} was replaced by a later leader")
                        )
        self.applied = entries[-1].index
        self.queue.set_applied(self.applied)
        for e in entries:
            if (
                e.type is EntryType.NOOP
                and self.role is Role.LEADER
                and e.term == self.core.term
                and self._leader_started_term != e.term
            ):
                self._leader_started_term = e.term
                self.fsm.on_leader_start(e.term)
        if self._applied_waiters:
            keep = []
            for index, fut in self._applied_waiters:
                if index <= self.applied:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    keep.append((index, fut))
            self._applied_waiters = keep

    def _unknown_below(self, index: int) -> None:
        """A snapshot covered proposals kept through a step-down: whether their
        entries made it is not known here, and never will be."""
        waiters = self._waiters
        for i in [i for i in waiters if i <= index]:
            w = waiters.pop(i)
            self._pending_count -= 1
            if not w.future.done():
                w.future.set_exception(
                    LeaderChangedError(f"entry {i} was covered by a snapshot; outcome unknown")
                )

    def _maybe_snapshot(self) -> None:
        if self._compaction.due(self.applied):
            self._take_snapshot()

    def snapshot_now(self) -> bool:
        """Snapshot the applied state now, whatever snapshot_every_entries says, so the
        log prefix can be given back at once (the sink calls it when the disk guard
        refuses writes). False when there is nothing new to cover or the applied
        entries are not durable here yet (the next apply's _maybe_snapshot retries)."""
        if self.applied <= self._compaction.last_index:
            return False
        return self._take_snapshot()

    def _take_snapshot(self) -> bool:
        snap = self._compaction.take(self.core, self.fsm, self.applied)
        if snap is None:
            return False
        self.stats.snapshots_taken += 1
        self._tasks.append(asyncio.create_task(self._store_snapshot(snap)))
        return True

    async def _store_snapshot(self, snap: Snapshot) -> None:
        """Store a snapshot and cut the log behind it (Compaction.store); a failure
        stops the group."""
        try:
            await self._compaction.store(snap, self.snapshots, self.queue)
        except Exception as exc:
            self._fail(exc)
