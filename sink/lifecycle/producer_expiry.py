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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

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


class ProducerExpiry:
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
        """How often to scan: a quarter of the expiry time, at most a minute."""
        return min(max(self.expiration_s / 4, 0.05), 60.0)

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

    def start(self) -> None:
        if self.expiration_s > 0 and self._task is None:
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
            except Exception as exc:  # not leader any more, timeout: try next period
                log.warning("sink.producer_expiry proposal failed: %r", exc)
