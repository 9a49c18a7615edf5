"""The leaders table: who leads the data groups this node does not host.

A node that holds no replica of a partition's group still answers Metadata for it
and must send producers to the right node (NOT_LEADER_OR_FOLLOWER naming the current
leader). Only the group's replicas know its leader, so every node polls its peers'
read API `Partitions` (each PartitionInfo carries leader, epoch and replicas, fields
5-7) once a second, backing off to every MAX_INTERVAL_S while every answer is
"unchanged", and at once (rate-limited) when asked about a partition whose leader it
does not know or whose known leader is down here.

The choice and its cost: one unary gRPC call per peer per second for the partitions
of the topics this node does not host wholly: N*(N-1) calls a second cluster-wide. A
call names the fingerprint of the peer's last full answer (`roles_since`; the peer's
PartitionRouting.roles_version: its placement, brokers, hosted groups' terms, leaders
and members, and its own leaders table); while that is still current the peer answers
"unchanged" with no rows, so a steady cluster sends no rows at all (building and
learning them held most of the polls' samples in a py-spy profile of an idle 7-node
cluster). Every FULL_EVERY-th poll asks in full anyway, a bound on how long anything
the fingerprint missed could stay stale. A node that hosts a replica of every group
(replication factor = nodes, the common 3-node case) needs no row and makes no call.

A row counts only when the answering node is one of the partition's replicas (it hosts
the group, so its answer is first hand) and names a leader; the highest epoch wins, so
an old answer never replaces a newer one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

log = logging.getLogger("sink.leaders")

FULL_EVERY = 10
"""Every this many polls a peer is asked in full, whatever its fingerprint says."""

MAX_INTERVAL_S = 4.0
"""While every peer answers "unchanged", the gap between polls doubles from the
poller's interval up to this. A poll is a unary gRPC call per peer (both ends about a
few hundred us of CPU here): at 7 node processes the steady polls were about 40 % of an
idle process's CPU. Anything new (a changed answer, a failed call, a lookup without a
known leader or with a leader that is down) polls at the base interval again."""


class Known(NamedTuple):
    leader: int
    epoch: int
    at: float  # monotonic time it was learnt
    isr: tuple[int, ...] = ()  # the hosting node's ISR; () from a node that sends none


class LeadersTable:
    """(topic, partition) -> the leader and epoch learnt from a hosting node (pure)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], Known] = {}
        self.changes = 0  # rises whenever a row is added, changed or removed

    def learn(
        self,
        topic: str,
        partition: int,
        leader: int,
        epoch: int,
        now: float,
        isr: tuple[int, ...] = (),
    ) -> bool:
        """Keep the answer if its epoch is not older than the known one -> changed."""
        key = (topic, partition)
        old = self.rows.get(key)
        if old is not None and epoch < old.epoch:
            return False
        self.rows[key] = Known(leader, epoch, now, isr)
        changed = old is None or old.leader != leader or old.epoch != epoch or old.isr != isr
        self.changes += changed
        return changed

    def learn_reply(self, answering: int, infos: Iterable[Any], now: float) -> int:
        """Rows of a PartitionsReply from node `answering` -> how many changed."""
        changed = 0
        for info in infos:
            replicas = {r.node_id for r in info.replicas}
            if answering in replicas and info.leader_id > 0:
                changed += self.learn(
                    info.topic,
                    info.partition,
                    info.leader_id,
                    info.leader_epoch,
                    now,
                    tuple(info.isr),
                )
        return changed

    def get(self, topic: str, partition: int) -> Known | None:
        return self.rows.get((topic, partition))

    def forget_missing(self, exists: Callable[[str, int], bool]) -> None:
        for key in [k for k in self.rows if not exists(*k)]:
            del self.rows[key]
            self.changes += 1


class LeaderPoller:
    """Polls peers' read API into a LeadersTable (interval_s; poke() for now)."""

    def __init__(
        self,
        node_id: int,
        table: LeadersTable,
        peers: Callable[[], dict[int, str]],
        client_factory: Callable[[str], Any],
        interval_s: float = 1.0,
        min_gap_s: float = 0.2,
        topics: Callable[[], list[str] | None] = lambda: None,
        max_interval_s: float = MAX_INTERVAL_S,
    ) -> None:
        """peers() -> node id -> read API address of every other node;
        client_factory(address) -> a ReadApiClient; topics() -> the topics whose
        leaders this node needs (those with a partition it does not host; [] none: no
        poll; None: every topic)."""
        self.topics = topics
        self.skipped = 0
        self.node_id = node_id
        self.table = table
        self.peers = peers
        self.client_factory = client_factory
        self.interval_s = interval_s
        self.max_interval_s = max(interval_s, max_interval_s)
        self.wait_s = interval_s
        """The gap before the next poll (interval_s, doubling while nothing changes)."""
        self.min_gap_s = min_gap_s
        self.polls = 0
        self.failures = 0
        self.unchanged = 0  # answers with no rows (the peer's fingerprint was current)
        self._clients: dict[str, Any] = {}
        # address -> (the topics asked, the fingerprint of that peer's last full answer)
        self._seen: dict[str, tuple[tuple[str, ...] | None, int]] = {}
        self._task: asyncio.Task | None = None
        self._poke = asyncio.Event()
        self._last = 0.0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"leaders-{self.node_id}")

    def poke(self) -> None:
        """A lookup found no leader (or a leader that is down): poll soon (at most
        every min_gap_s), and at the base interval from then on."""
        self._poke.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for c in self._clients.values():
            with contextlib.suppress(Exception):
                await c.close()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), self.wait_s)
            gap = self.min_gap_s - (time.monotonic() - self._last)
            if gap > 0:
                await asyncio.sleep(gap)
            poked = self._poke.is_set()
            self._poke.clear()
            self._last = time.monotonic()
            steady = False
            try:
                steady = await self.poll_once()
            except Exception:  # a bug here must not stop the table for good
                log.exception("sink.leaders poll failed")
            self.wait_s = self.next_wait(steady and not poked)

    def next_wait(self, steady: bool) -> float:
        """The gap before the next poll: doubled (up to max_interval_s) after a round
        that learnt nothing new and was not asked for, else the base interval."""
        return min(self.wait_s * 2, self.max_interval_s) if steady else self.interval_s

    async def poll_once(self) -> bool:
        """One round over the peers -> True when it learnt nothing new (every peer
        answered "unchanged", or no poll was needed)."""
        wanted = self.topics()
        if wanted is not None and not wanted:
            self.skipped += 1  # every group has a replica here: it knows its leaders
            return True
        peers = {n: a for n, a in self.peers().items() if n != self.node_id and a}
        full = self.polls % FULL_EVERY == 0
        answers = await asyncio.gather(*(self._ask(n, a, wanted, full) for n, a in peers.items()))
        self.polls += 1
        return all(answers)

    async def _ask(
        self, node: int, address: str, topics: list[str] | None = None, full: bool = True
    ) -> bool:
        """Ask one peer -> True when its answer said nothing new (unchanged, or a
        full answer with the fingerprint it had before)."""
        client = self._clients.get(address)
        if client is None:
            client = self._clients[address] = self.client_factory(address)
        asked = tuple(topics) if topics is not None else None
        seen = self._seen.get(address)
        since = seen[1] if seen is not None and seen[0] == asked and not full else 0
        try:
            reply = await client.partitions(
                topics, timeout=min(2.0, self.interval_s * 2), roles_since=since
            )
        except Exception as exc:  # a dead or slow peer: its answer simply does not come
            self.failures += 1
            self._seen.pop(address, None)  # a restarted peer: ask it in full
            log.debug("sink.leaders node %d at %s: %r", node, address, exc)
            return False
        if since and reply.unchanged:
            self.unchanged += 1
            return True
        self.table.learn_reply(node, reply.partitions, time.monotonic())
        self._seen[address] = (asked, reply.roles_version)
        return seen == (asked, reply.roles_version)
