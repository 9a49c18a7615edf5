"""Producer-state expiry: idle producer ids are forgotten through the log.

Kafka's `producer.id.expiration.ms` (default one day): the idempotent-producer table
(sink/state/producers.py) would otherwise keep an entry for every producer that
ever wrote, forever. Expiry must be a pure function of the log, so the leader
decides and proposes EXPIRE_PRODUCERS (tag "X") with each idle producer's last log
index; the state machine drops a producer only if it has not appended since that
index (it may have come back while the command was in flight).

Idleness is measured on each node's own monotonic clock: every scan notes, per
producer id, when its last log index was first seen to be what it is now. A node
that restarts or becomes leader starts its clocks then, so expiry can come late,
never early. A producer that returns after expiry is accepted as a new one (Kafka
2.5+ / KIP-360 does the same for an unknown producer id: its sequence is not
checked), so librdkafka and the Java client go on without an error; only
deduplication of a retry across the expiry is lost, as in Kafka.

With partition groups (`cluster.partition_groups`) idempotent-producer state lives in
each data group (DataGroupMachine's PartitionData.producers; the controller's table
stays empty), and the last log index a producer's state records is an index of THAT
group's log. So expiry runs per data group: GroupsProducerExpiry keeps one
ProducerExpiry per hosted group (its own idle clocks, on every replica, so a new leader
has been watching since it started hosting), scans them all in one task, and proposes
each group's EXPIRE_PRODUCERS into that group on that group's leader; the
DataGroupMachine applies it against its own indexes. The controller's ProducerExpiry
still runs (it finds nothing to expire there).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from sink.state import admin_commands as acmd

log = logging.getLogger("sink.topics")

MAX_PER_ENTRY = 10_000  # producer ids per EXPIRE_PRODUCERS entry (80 KiB)


@dataclass(frozen=True, slots=True)
class ProducerExpiryOptions:
    id_expiration_ms: int = 86_400_000
    """Idempotent-producer state of a producer id that wrote nothing for this long is
    forgotten (through the log), as Kafka's producer.id.expiration.ms (default one day);
    0: never. A producer that returns later is accepted as a new one."""

    def __post_init__(self) -> None:
        if self.id_expiration_ms < 0:
            raise ValueError(
                f"producers.id_expiration_ms must be >= 0, got {self.id_expiration_ms}"
            )


def scan_interval_s(expiration_s: float) -> float:
    """How often to scan: a quarter of the expiry time, at most a minute."""
    return min(max(expiration_s / 4, 0.05), 60.0)


class _Rounds:
    """A round of expiry every `interval_s` in a task of its own while `enabled`; a
    round that raises is logged (`_failed`) and the next one runs (not leader any more,
    a timeout: expiry is retried, never ended by one failure)."""

    _task: asyncio.Task | None
    interval_s: float

    @property
    def enabled(self) -> bool:
        raise NotImplementedError

    async def expire_once(self) -> int:
        raise NotImplementedError

    def _failed(self, exc: Exception) -> None:
        log.warning("sink.producer_expiry round failed: %r", exc)

    def start(self) -> None:
        if self.enabled and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)  # a period, not a synchronisation
            try:
                await self.expire_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed(exc)


class ProducerExpiry(_Rounds):
    def __init__(
        self,
        fsm: Any,
        propose: Callable[[bytes], Awaitable[Any]],
        is_leader: Callable[[], bool],
        expiration_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fsm = fsm
        self._propose = propose
        self._is_leader = is_leader
        self.expiration_s = expiration_ms / 1000
        self._clock = clock
        self._seen: dict[int, tuple[int, float]] = {}  # pid -> (last index, since)
        self.expired_total = 0
        self._task: asyncio.Task | None = None

    @property
    def interval_s(self) -> float:
        return scan_interval_s(self.expiration_s)

    def idle(self) -> list[tuple[int, int]]:
        """Update the clocks; (pid, last index) of every producer idle for the expiry time."""
        now = self._clock()
        current = self.fsm.producers.last_indexes()
        seen = self._seen
        for pid in [p for p in seen if p not in current]:
            del seen[pid]
        out = []
        for pid, index in current.items():
            was = seen.get(pid)
            if was is None or was[0] != index:
                seen[pid] = (index, now)
            elif now - was[1] >= self.expiration_s:
                out.append((pid, index))
        return out

    async def expire_once(self) -> int:
        """One scan; on the leader, propose what is idle. Returns the entries removed."""
        idle = self.idle()
        if not idle or not self._is_leader():
            return 0
        removed = 0
        for i in range(0, len(idle), MAX_PER_ENTRY):
            removed += await self._propose(
                acmd.encode_expire_producers(idle[i : i + MAX_PER_ENTRY])
            )
        self.expired_total += removed
        log.info("sink.producer_expiry expired %d producer ids (%d entries)", len(idle), removed)
        return removed

    @property
    def enabled(self) -> bool:
        return self.expiration_s > 0


class ExpiryTarget(NamedTuple):
    """One data group's side of expiry: its producer table's owner (an object with
    `.producers`, e.g. PartitionData), propose(data) -> the applied result in that
    group, and whether this node leads that group now."""

    fsm: Any
    propose: Callable[[bytes], Awaitable[Any]]
    is_leader: Callable[[], bool]


class GroupsProducerExpiry(_Rounds):
    """Producer-state expiry per data group, one task for all of a node's groups.

    targets() -> group id -> ExpiryTarget of every group hosted here now. A group that
    appears gets a ProducerExpiry (its clocks start then: expiry can come late, never
    early); one that is gone is forgotten. Each round scans every group and proposes
    only where this node leads; a group's failed proposal is logged and retried next
    round without holding up the other groups."""

    def __init__(
        self,
        targets: Callable[[], dict[int, ExpiryTarget]],
        expiration_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._targets = targets
        self.expiration_ms = expiration_ms
        self._clock = clock
        self.per_group: dict[int, ProducerExpiry] = {}
        self.expired_total = 0
        self.failed_rounds = 0  # group proposals that raised
        self._task: asyncio.Task | None = None

    @property
    def interval_s(self) -> float:
        return scan_interval_s(self.expiration_ms / 1000)

    def _sync(self) -> dict[int, ProducerExpiry]:
        targets = self._targets()
        for gid in [g for g in self.per_group if g not in targets]:
            del self.per_group[gid]
        for gid, t in targets.items():
            e = self.per_group.get(gid)
            if e is None or e.fsm is not t.fsm:  # new, or the group was restarted
                e = ProducerExpiry(t.fsm, t.propose, t.is_leader, self.expiration_ms, self._clock)
                self.per_group[gid] = e
        return self.per_group

    async def expire_once(self) -> int:
        """One round over every hosted group -> producer-state entries removed."""
        removed = 0
        for gid, e in list(self._sync().items()):
            try:
                n = await e.expire_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # not leader any more, timeout: next round
                self.failed_rounds += 1
                log.warning("sink.producer_expiry group=%d proposal failed: %r", gid, exc)
                continue
            removed += n
        self.expired_total += removed
        return removed

    @property
    def enabled(self) -> bool:
        return self.expiration_ms > 0

    def _failed(self, exc: Exception) -> None:  # a bug here must not end expiry for good
        log.exception("sink.producer_expiry round failed", exc_info=exc)
