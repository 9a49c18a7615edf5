"""RetentionWorker: applies topic retention on this node and tells the Raft log how far
it may compact.

Every `topics.retention_check_ms`, or more often for short retention (`interval()`), and
at once through `compact_now` (which the disk guard calls when it starts refusing
produce), it runs `SinkStateMachine.apply_retention`
with this node's clock: partitions' log starts move, and the highest log index no
partition retains becomes `limit`, which the node's compaction limit reads when a
snapshot is stored (sink.node.assemble). compact_now also takes a snapshot at once, so
the space comes back without waiting for `retention.snapshot_every_entries` new entries
(which never come while produce is refused).

Invariant: `limit` only covers log indices that were applied when it was computed and
that no partition retained then; retention only moves forward, so a stale limit is
never too high.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

log = logging.getLogger("sink.retention")

CHECKS_PER_RETENTION_WINDOW = 32
"""The worker checks at least this often per shortest retention.ms it applies (but never
more often than once a second unless `topics.retention_check_ms` asks to). Retention
moves the compaction limit only when it runs, so the data directory holds up to one
check interval of records beyond the window: with 30 s checks and a 3-minute topic that
was a sawtooth of a sixth of the retained volume (the session-19 soak: teeth of about
40 MB per group), with 32 checks per window it is a thirty-second."""

MIN_ADAPTIVE_INTERVAL_S = 1.0


def snapshot_now(node: Any) -> bool:
    """Ask the Raft node for a snapshot now (`RaftGroup.snapshot_now`: it compacts behind
    it as far as the compaction limit allows); False when there was nothing new to cover
    or the node cannot (a test double without the call)."""
    take = getattr(node, "snapshot_now", None)
    return bool(take()) if callable(take) else False


class RetentionWorker:
    def __init__(self, fsm: Any, node: Any, interval_s: float) -> None:
        self.fsm = fsm
        self.node = node
        self.interval_s = interval_s
        self.limit = 0
        """Highest Raft log index retention lets the log compact (0: nothing yet)."""
        self.runs = 0
        self.removed_batches = 0
        self.forced_snapshots = 0
        self._task: asyncio.Task | None = None

    def run_once(self) -> int:
        """Apply retention now -> the new compaction limit."""
        applied = self.node.applied
        limit, removed = self.fsm.apply_retention(int(time.time() * 1000))
        self.limit = max(self.limit, applied if limit is None else min(limit, applied))
        self.runs += 1
        self.removed_batches += removed
        return self.limit

    def compact_now(self) -> None:
        """The disk guard refuses produce: run retention and snapshot at once."""
        self.run_once()
        if snapshot_now(self.node):
            self.forced_snapshots += 1
            log.warning("retention.compact_now node snapshot taken, limit=%d", self.limit)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    def interval(self) -> float:
        """Seconds to the next check: interval_s, shortened to a
        CHECKS_PER_RETENTION_WINDOW-th of the shortest retention.ms applied here."""
        ms = self.fsm.shortest_retention_ms()
        if ms is None:
            return self.interval_s
        adaptive = max(MIN_ADAPTIVE_INTERVAL_S, ms / 1000 / CHECKS_PER_RETENTION_WINDOW)
        return min(self.interval_s, adaptive)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval())
            try:
                self.run_once()
            except Exception:  # a bug here must not stop retention for good
                log.exception("retention.run failed")

    def counters(self) -> dict[str, float]:
        return {
            "retention_runs": self.runs,
            "retention_removed_batches": self.removed_batches,
            "retention_forced_snapshots": self.forced_snapshots,
            "retention_compaction_limit": self.limit,
        }
