"""The leader balancer's driver: runs sink.placement's planner on a node's event loop.

Every `interval_s` (with jitter) it reads the groups this node knows through a small
Protocol (`BalanceSource`: group -> replicas in preferred order, leader, term, which
replicas are live and caught up now), asks `LeaderBalancer.plan` for transfers, and
starts each one with the group's own `transfer_leader(target)`: leadership moves only
by transfer, never by forcing an election.

One driver runs in every node and moves only the groups this node leads (the planner's
`sources`): transfer_leader is a call on the leader's RaftGroup, so no RPC between nodes
is needed, and two nodes never move the same group. Its counts still cover every group
the node knows, so it sheds what it leads above ceil(G/N) and hands groups back to their
preferred replicas. Two nodes may pick the same target in one round (neither sees the
other's transfers in flight); the target's own driver sheds the excess a round later
(move 2), so the bound is ceil(G/N) + 1 once the rounds settle.

Invariants:
- at most `max_in_flight` transfers of this node outstanding (the planner counts them;
  a transfer stays in flight until its target leads, it fails, or it times out);
- a transfer whose call raised, or that timed out, mutes its group for `mute_s`;
- switched off (`enabled = False`), it starts no transfer: start() runs no loop and
  run_once() plans nothing (options are fixed per driver; a new setting, a new driver);
- `ready_since[(group, replica)]` is the first round since which the replica was seen
  ready without a break: the return delay is measured from there, so a replica that
  restarts (leaves the ready set) starts its delay again.

Metrics (`stats()`, `BalancerCollector`): transfers started / succeeded / failed,
rounds, groups this node leads and how many of those are off their preferred replica
(summed over nodes: the cluster's groups away from home, each counted once, by its
leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from raftlog.runtime import RaftHost
from sink.placement import BalancerOptions, GroupView, LeaderBalancer, Transfer

log = logging.getLogger("sink.balance")


@dataclass(frozen=True, slots=True)
class GroupState:
    """One group as a node sees it now."""

    group: int
    replicas: tuple[int, ...]
    """Voters in preferred order: replicas[0] is the preferred leader."""
    leader: int | None
    """None: no leader known now."""
    term: int
    ready: frozenset[int]
    """Replicas live and caught up now, as this node sees it (the leader knows its
    followers' progress; a follower may report nothing)."""


class BalanceSource(Protocol):
    """What the driver reads and calls; a RaftHost (RaftHostSource) or a test's fake."""

    node_id: int

    def groups(self) -> Iterable[GroupState]: ...

    def live_nodes(self) -> Iterable[int]: ...

    async def transfer_leader(self, group: int, target: int, timeout: float) -> None:
        """Returns once target leads `group`; raises when it cannot (not leader, timeout)."""
        ...


@dataclass
class BalanceStats:
    rounds: int = 0
    transfers_started: int = 0
    transfers_succeeded: int = 0
    transfers_failed: int = 0
    groups_led: int = 0
    led_off_preferred: int = 0
    in_flight: int = 0
    muted: int = 0


class LeaderBalanceDriver:
    def __init__(
        self,
        source: BalanceSource,
        options: BalancerOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.source = source
        self.options = options or BalancerOptions()
        self.planner = LeaderBalancer(self.options)
        self.clock = clock
        self.rng = rng or random.Random()
        self._stats = BalanceStats()
        self._ready_since: dict[tuple[int, int], float] = {}
        self._calls: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the periodic loop (nothing when the balancer is switched off)."""
        if self.options.enabled and self._task is None:
            self._task = asyncio.create_task(self._loop(), name="leader-balance")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._calls) if t is not None]
        self._task = None
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._calls.clear()
        self.planner.reset()

    async def _loop(self) -> None:
        while True:
            # Jitter (+-20 %): the drivers of a cluster do not plan in lock step, so one
            # node's transfers are usually visible to the next node's round.
            await asyncio.sleep(self.options.interval_s * self.rng.uniform(0.8, 1.2))
            try:
                self.run_once()
            except Exception:  # a bad round must not end balancing for good
                log.exception("leader_balance.round_failed node=%d", self.source.node_id)

    # ------------------------------------------------------------------ one round

    def run_once(self) -> list[Transfer]:
        """Read, plan, start the planned transfers (as tasks); returns them."""
        now = self.clock()
        me = self.source.node_id
        states = list(self.source.groups())
        views = []
        seen: set[tuple[int, int]] = set()
        led = off = 0
        for s in states:
            ready_since = {}
            for r in s.ready:
                key = (s.group, r)
                seen.add(key)
                ready_since[r] = self._ready_since.setdefault(key, now)
            views.append(GroupView(s.group, s.replicas, s.leader, s.term, ready_since))
            if s.leader == me:
                led += 1
                off += s.leader != s.replicas[0]
        for key in [k for k in self._ready_since if k not in seen]:
            del self._ready_since[key]  # a break: the return delay starts again
        self._stats.rounds += 1
        self._stats.groups_led, self._stats.led_off_preferred = led, off
        plan = self.planner.plan(views, self.source.live_nodes(), now, sources=(me,))
        for t in plan:
            self._stats.transfers_started += 1
            log.info(
                "leader_balance.transfer node=%d group=%d target=%d term=%d reason=%s",
                me,
                t.group,
                t.target,
                t.term,
                t.reason,
            )
            task = asyncio.create_task(self._transfer(t), name=f"leader-transfer-{t.group}")
            self._calls.add(task)
            task.add_done_callback(self._calls.discard)
        self._stats.in_flight = len(self.planner.in_flight)
        self._stats.muted = len(self.planner.muted)
        return plan

    async def _transfer(self, t: Transfer) -> None:
        try:
            await self.source.transfer_leader(t.group, t.target, self.options.transfer_timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Not leader any more, the target never took over in time, the group
            # stopped: forget the transfer and leave the group alone for mute_s.
            log.info(
                "leader_balance.transfer_failed node=%d group=%d target=%d error=%r",
                self.source.node_id,
                t.group,
                t.target,
                exc,
            )
            self.planner.transfer_failed(t.group, self.clock())
        else:
            self._stats.transfers_succeeded += 1

    def stats(self) -> dict[str, int]:
        st = self._stats
        # The planner counts every failure: calls that raised and transfers it saw
        # time out or lose to another leader.
        st.transfers_failed = self.planner.failures
        return {
            "rounds": st.rounds,
            "transfers_started": st.transfers_started,
            "transfers_succeeded": st.transfers_succeeded,
            "transfers_failed": st.transfers_failed,
            "groups_led": st.groups_led,
            "led_off_preferred": st.led_off_preferred,
            "in_flight": st.in_flight,
            "muted": st.muted,
        }


class RaftHostSource:
    """BalanceSource over a RaftHost: every group the host runs.

    replicas(group) gives the preferred order (the controller's placement record);
    None, or a group it does not know: the voters in id order. Voters missing from the
    placement are appended (a move in progress), placement nodes that are no voters
    dropped. A replica is ready when this node leads the group, the host does not hold
    the replica's process for down (node liveness: `peers_down`), and its match index
    has reached the commit index; this node itself is ready as the leader.
    """

    def __init__(
        self,
        host: RaftHost,
        replicas: Callable[[int], Sequence[int] | None] | None = None,
        exclude: frozenset[int] = frozenset(),
    ) -> None:
        self.host = host
        self.node_id = host.node_id
        self.replicas = replicas
        # Groups left where elections put them (the sink's controller, group 0: moving
        # it costs every client a NOT_CONTROLLER round and balances no data).
        self.exclude = exclude

    def _order(self, group: int, voters: list[int]) -> tuple[int, ...]:
        placed = list(self.replicas(group) or ()) if self.replicas else []
        order = [n for n in placed if n in voters]
        return tuple(order + [v for v in voters if v not in order])

    def live_nodes(self) -> Iterable[int]:
        down = set(self.host.status()["peers_down"])
        peers = {v for g in self.host.groups.values() for v in g.membership()["voters"]}
        return sorted((peers | {self.node_id}) - down)

    def groups(self) -> Iterator[GroupState]:
        down = set(self.host.status()["peers_down"])
        for gid, g in sorted(self.host.groups.items()):
            if g.fatal_error is not None or gid in self.exclude:
                continue
            voters = g.membership()["voters"]
            if not voters:
                continue
            ready: frozenset[int] = frozenset()
            if g.is_leader():
                st = g.status()
                ready = frozenset(
                    [self.node_id]
                    + [
                        pid
                        for pid, f in st["followers"].items()
                        if pid in voters and pid not in down and f["match"] >= st["commit"]
                    ]
                )
            leader = g.leader_id if g.leader_id in voters else None
            yield GroupState(gid, self._order(gid, voters), leader, g.term, ready)

    async def transfer_leader(self, group: int, target: int, timeout: float) -> None:
        g = self.host.groups.get(group)
        if g is None:
            raise KeyError(f"group {group} is not hosted here")
        await g.transfer_leader(target, timeout=timeout)


class BalancerCollector(Collector):
    """raftsink_leader_balance_* from the driver's stats() at each scrape: counters
    rounds, transfers_{started,succeeded,failed}; gauges groups_led, led_off_preferred,
    in_flight, muted."""

    COUNTERS = ("rounds", "transfers_started", "transfers_succeeded", "transfers_failed")
    GAUGES = ("groups_led", "led_off_preferred", "in_flight", "muted")

    def __init__(self, node_id: int, stats: Callable[[], dict[str, int]]) -> None:
        self.node = str(node_id)
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        st = self.stats()
        for name in self.COUNTERS:
            c = CounterMetricFamily(
                f"raftsink_leader_balance_{name}", name.replace("_", " "), labels=["node"]
            )
            c.add_metric([self.node], st.get(name, 0))
            yield c
        for name in self.GAUGES:
            g = GaugeMetricFamily(
                f"raftsink_leader_balance_{name}", name.replace("_", " "), labels=["node"]
            )
            g.add_metric([self.node], st.get(name, 0))
            yield g
