"""DiskWatch: what a node does about its free-space reserve (raftlog.storage.DiskGuard).

    periodic statvfs (storage.space_check_ms) + produce's byte estimate -> level
    OK               everything as usual
    WRITES_REFUSED   produce answers KAFKA_STORAGE_ERROR (retriable: librdkafka, the
                     Java client and KafkaJS retry it); Fetch, the read API and Raft
                     traffic go on; a leader hands leadership to a follower (which may
                     have room) and this node accepts no leadership transfer
    APPENDS_REFUSED  also: inbound AppendEntries carrying entries are dropped (as if
                     lost), so this node stops acknowledging and the leader commits with
                     the other majority; heartbeats, votes and commit indexes still flow
Leaving a level needs no restart: the next reading above the threshold (plus the
guard's margin) clears it, and the leader re-sends what a follower dropped.

Every level change is one WARNING line naming the volume and what to do; the level,
free bytes and reserve per volume are on /metrics and in `raftsink status`.

Invariant: this module only advises (returns booleans); the gates that act on them are
SinkService.produce (write gate) and raftlog's GatedTransport (append and leadership
gates, wired in sink.node.assemble).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from raftlog.storage import DiskGuard, DiskLevel

log = logging.getLogger("sink.disk")

_WHAT_TO_DO = (
    "free space on that volume (retention: shorten topics' retention.ms / retention.bytes, "
    "or set retention.hard_max_entries; remove other files; grow the volume); "
    "writes resume by themselves, no restart"
)


HANDOFF_MAX_S = 30.0
"""Longest wait between two leadership hand-off attempts while below the reserve."""


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f}MB"


class DiskWatch:
    """The node's disk level, read every interval_s. node: the RaftNode (one group) or
    the controller's group; groups_of: every Raft group of the node's host (partition
    groups: the controller and each data group), all sharing this disk. A node below
    the reserve hands off the leadership of every group it leads. Both None in tests of
    the gates alone."""

    def __init__(
        self,
        guard: DiskGuard,
        node_id: int,
        *,
        interval_s: float,
        node: Any | None = None,
        handoff_every_s: float = 2.0,
    ) -> None:
        self.guard = guard
        self.node_id = node_id
        self.node = node
        self.groups_of: Callable[[], Iterable[Any]] | None = None
        self.interval_s = interval_s
        self.handoff_every_s = handoff_every_s
        self.level = guard.check()
        self.refused_writes = 0
        """Produce requests (topic-partitions) refused below the reserve."""
        self.handoffs = 0
        self._task: asyncio.Task | None = None
        # Per group id: the hand-off in flight, when the last one began, which follower
        # is next, and the wait before the next one (doubles after each refused hand-off:
        # every node full, and a transfer attempt blocks the group's proposals for an
        # election timeout; up to HANDOFF_MAX_S).
        self._handoffs: dict[int, asyncio.Task] = {}
        self._last_handoff: dict[int, float] = {}
        self._handoff_round: dict[int, int] = {}
        self._handoff_wait: dict[int, float] = {}
        self.on_refuse: Any = None
        """Called (no arguments) on every check while produce is refused: the node's
        retention runs at once and compacts (sink.topics.worker.RetentionWorker.compact_now)."""
        if self.level is not DiskLevel.OK:
            self._log_change(DiskLevel.OK, self.level)

    # ------------------------------------------------------------------ gates

    def admit_write(self, nbytes: int) -> bool:
        """Produce asks to take nbytes of new data: False below the reserve."""
        if self.level is not DiskLevel.OK:
            self.refused_writes += 1
            return False
        self._set(self.guard.note_written(nbytes))
        return True

    def appends_allowed(self) -> bool:
        return self.level < DiskLevel.APPENDS_REFUSED

    def accepts_leadership(self) -> bool:
        return self.level is DiskLevel.OK

    # ------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"disk-watch-{self.node_id}")

    async def stop(self) -> None:
        for task in (self._task, *self._handoffs.values()):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self._set(self.guard.check())
            if self.level is not DiskLevel.OK:
                if self.on_refuse is not None:
                    try:
                        self.on_refuse()
                    except Exception:  # the guard keeps guarding
                        log.exception("disk.compact_now failed")
                self._maybe_hand_off()

    def _set(self, level: DiskLevel) -> None:
        if level is not self.level:
            old, self.level = self.level, level
            self._log_change(old, level)
            if level is DiskLevel.OK:
                # back to normal: forget every group's hand-off state (groups come and go)
                self._handoff_wait.clear()
                self._last_handoff.clear()
                self._handoff_round.clear()
                self._handoffs = {g: t for g, t in self._handoffs.items() if not t.done()}

    def _log_change(self, old: DiskLevel, new: DiskLevel) -> None:
        vol = self.guard.worst()
        where = (
            f"node={self.node_id} dir={vol.path} free={_mb(vol.free_bytes)} "
            f"reserve={_mb(vol.reserve_bytes)}"
        )
        if new is DiskLevel.OK:
            log.warning("disk.space_returned %s: produce accepted again", where)
        elif new is DiskLevel.WRITES_REFUSED and old is DiskLevel.OK:
            log.warning(
                "disk.reserve_reached %s: produce refused (KAFKA_STORAGE_ERROR, clients "
                "retry), reads and replication go on; %s",
                where,
                _WHAT_TO_DO,
            )
        elif new is DiskLevel.APPENDS_REFUSED:
            log.warning(
                "disk.appends_refused %s (under half the reserve): this node stops "
                "appending replicated entries, the others commit without it; %s",
                where,
                _WHAT_TO_DO,
            )
        else:
            log.warning("disk.appends_resumed %s: produce still refused", where)

    # ------------------------------------------------------ leadership hand-off

    def _led_here(self) -> list[Any]:
        groups = list(self.groups_of()) if self.groups_of is not None else [self.node]
        return [g for g in groups if g is not None and g.is_leader()]

    def _maybe_hand_off(self) -> None:
        """A leader that may not take new data hands leadership to a follower, which
        may have room (a follower without room refuses the TimeoutNow; then the next
        one is tried handoff_every_s later, and a leader keeps leading meanwhile:
        reads are served either way). Every group led here, each on its own clock:
        with partition groups a data group left led by a full node takes no record."""
        now = time.monotonic()
        for group in self._led_here():
            gid = getattr(group, "group_id", 0)
            task = self._handoffs.get(gid)
            if task is not None and not task.done():
                continue
            wait = self._handoff_wait.get(gid, self.handoff_every_s)
            if now - self._last_handoff.get(gid, float("-inf")) < wait:
                continue
            followers = group.status().get("followers", {})
            if not followers:
                continue
            ranked = sorted(followers, key=lambda pid: (-followers[pid]["match"], pid))
            turn = self._handoff_round.get(gid, 0)
            target = ranked[turn % len(ranked)]
            self._handoff_round[gid] = turn + 1
            self._last_handoff[gid] = now
            self._handoffs[gid] = asyncio.create_task(self._transfer(group, gid, target))

    async def _transfer(self, group: Any, gid: int, target: int) -> None:
        opts = group.options
        timeout = 2 * opts.election_ticks * opts.tick_ms / 1000
        try:
            await group.transfer_leader(target, timeout=timeout)
        except Exception as exc:  # refused (no room there either) or leadership moved
            wait = self._handoff_wait.get(gid, self.handoff_every_s)
            self._handoff_wait[gid] = min(2 * wait, HANDOFF_MAX_S)
            log.info(
                "disk.leadership_handoff_refused node=%d group=%d to=%d (next try in %.0f s): %r",
                self.node_id,
                gid,
                target,
                self._handoff_wait[gid],
                exc,
            )
            return
        self.handoffs += 1
        log.warning(
            "disk.leadership_handed_off node=%d group=%d to=%d: below the disk reserve",
            self.node_id,
            gid,
            target,
        )

    # ------------------------------------------------------------ observation

    def status(self) -> dict[str, Any]:
        """For `raftsink status` (read API): level and every volume."""
        return {
            "level": self.level.name.lower(),
            "volumes": [v.as_dict() for v in self.guard.volumes],
            "refused_writes": self.refused_writes,
        }

    def gauges(self) -> list[tuple[str, str, dict[str, str], float]]:
        """(name, help, labels, value) for /metrics (sink.metrics)."""
        out: list[tuple[str, str, dict[str, str], float]] = []
        for v in self.guard.volumes:
            lab = {"dir": v.path}
            out.append(
                ("disk_free_bytes", "Free bytes of the volume (f_bavail)", lab, v.free_bytes)
            )
            out.append(
                ("disk_reserve_bytes", "Free-space reserve of the volume", lab, v.reserve_bytes)
            )
        out.append(
            (
                "disk_guard_tripped",
                "1 while produce is refused for lack of disk space",
                {},
                0 if self.level is DiskLevel.OK else 1,
            )
        )
        out.append(
            (
                "disk_appends_refused",
                "1 while this node refuses replicated appends (under half the reserve)",
                {},
                1 if self.level is DiskLevel.APPENDS_REFUSED else 0,
            )
        )
        return out

    def counters(self) -> dict[str, float]:
        return {
            "disk_refused_writes": self.refused_writes,
            "disk_leadership_handoffs": self.handoffs,
        }
