"""The leader balancer's planner: which leadership transfers to start now.

Sans-I/O, after etcd-raft's style: the driver passes what it knows (each group's
replicas in preferred order, leader, term, and since when each replica has been live and
caught up; the live nodes; `now`), the planner answers with transfers to start and keeps
only its own state (transfers in flight, muted groups). It never sleeps, reads a clock
or touches Raft; the same inputs and state give the same answer.

Rules (Redpanda's leader_balancer, Kafka's preferred-leader election):
- leadership moves only by transfer (the driver calls the group's transfer_leader),
  never by forcing an election; a group without a live leader is Raft's business;
- a target must have been live and caught up for >= return_delay_s;
- at most max_in_flight transfers outstanding; a transfer is done when its target
  leads, failed when the group's term moved on under another leader, when it has not
  happened within transfer_timeout_s, or when the driver reports an error; a failed
  group is muted for mute_s;
- goal: leaders per live node <= ceil(G / N) (G groups, N live nodes hosting
  replicas), one more tolerated where no better move exists, preferring each group's
  preferred replica (striped placement makes the preferred state the balanced one);
- switchable: disabled, it starts nothing.

Moves, in order, each re-checked against counts that include the moves already chosen
(a transfer in flight counts for its target):
1. back to the preferred replica, if that node then leads <= goal, or goal + 1 when
   the current leader would lead more or the preferred node leads some group it does
   not prefer (which move 2 then sheds: a swap in two steps, so a balanced cluster
   still drifts back to the preferred replicas);
2. off a node leading more than the goal, to a replica leading <= goal and at least two
   fewer, groups whose target is preferred first, then groups not preferring the source.
3. from a node leading >= goal + 2 that move 2 cannot relieve: a chain of transfers
   through nodes that each give one group and take one, ending at a node <= goal (a
   chain longer than the free in-flight slots starts with its last steps).
Moves 2 and 3 take a group away from its preferred leader only to cut a node leading
>= goal + 2 (move 3's inner nodes keep their counts).
So every move makes progress in one well-founded order, (leaders above goal + 1 summed,
then fewer groups away from their preferred replica, then the sum of squared leader
counts): move 1 never adds excess above goal + 1 and brings one group home; move 2
either cuts that excess or keeps it, keeps or raises the groups at home and lowers the
sum of squares; move 3 cuts the excess. No group moves back and forth: on stable inputs plan() reaches a state
where it returns nothing (the simulated cluster in tests/unit/placement checks it).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from sink.placement.options import BalancerOptions

PREFERRED = "preferred"
BALANCE = "balance"


@dataclass(frozen=True, slots=True)
class GroupView:
    """One group as the driver sees it now."""

    group: int
    replicas: tuple[int, ...]
    """Voters in preferred order: replicas[0] is the preferred leader."""
    leader: int | None
    """The current leader; None: none known (an election is running)."""
    term: int
    ready_since: Mapping[int, float] = field(default_factory=dict)
    """Replica -> the time since which it has been live and caught up without a break;
    absent: not live or not caught up now."""

    def __post_init__(self) -> None:
        if not self.replicas:
            raise ValueError(f"GroupView.replicas of group {self.group} must not be empty")
        if len(set(self.replicas)) != len(self.replicas):
            raise ValueError(f"GroupView.replicas of group {self.group} repeat a node")
        if self.leader is not None and self.leader not in self.replicas:
            raise ValueError(f"GroupView.leader {self.leader} of group {self.group} is no replica")
        if self.term < 0:
            raise ValueError(f"GroupView.term of group {self.group} must be >= 0")
        stray = sorted(set(self.ready_since) - set(self.replicas))
        if stray:
            raise ValueError(
                f"GroupView.ready_since of group {self.group} names non-replicas {stray}"
            )

    @property
    def preferred(self) -> int:
        return self.replicas[0]


@dataclass(frozen=True, slots=True)
class Transfer:
    """Ask `source` (the group's leader at `term`) to transfer leadership to `target`."""

    group: int
    source: int
    target: int
    term: int
    reason: str
    """PREFERRED (back to the preferred replica) or BALANCE (off an overloaded node)."""
    started: float


def leader_goal(groups: int, nodes: int) -> int:
    """ceil(G / N): the most groups one node should lead."""
    return math.ceil(groups / nodes) if nodes else 0


class LeaderBalancer:
    """The planner and its state. One instance per running balancer; reset() when the
    instance stops being the one that balances (e.g. it lost the controller's lead)."""

    def __init__(self, options: BalancerOptions | None = None) -> None:
        self.options = options or BalancerOptions()
        self._in_flight: dict[int, Transfer] = {}
        self._muted: dict[int, float] = {}
        self.failures = 0
        """Transfers that failed or timed out since start (for metrics)."""

    @property
    def in_flight(self) -> Mapping[int, Transfer]:
        return dict(self._in_flight)

    @property
    def muted(self) -> Mapping[int, float]:
        """Group -> the time its mute ends."""
        return dict(self._muted)

    def reset(self) -> None:
        self._in_flight.clear()
        self._muted.clear()

    def transfer_failed(self, group: int, now: float) -> None:
        """The driver's transfer_leader call failed: forget it and mute the group."""
        if self._in_flight.pop(group, None) is not None:
            self._mute(group, now)

    def _mute(self, group: int, now: float) -> None:
        self.failures += 1
        self._muted[group] = now + self.options.mute_s

    def _reconcile(self, views: Mapping[int, GroupView], now: float) -> None:
        for group, t in sorted(self._in_flight.items()):
            view = views.get(group)
            if view is None or view.leader == t.target:  # gone (topic deleted) or done
                del self._in_flight[group]
            elif now >= t.started + self.options.transfer_timeout_s or (
                view.term > t.term and view.leader is not None
            ):
                del self._in_flight[group]
                self._mute(group, now)
        for group, until in sorted(self._muted.items()):
            if until <= now or group not in views:
                del self._muted[group]

    def plan(
        self,
        groups: Iterable[GroupView],
        live: Iterable[int],
        now: float,
        sources: Collection[int] | None = None,
    ) -> list[Transfer]:
        """Transfers to start now (recorded as in flight: the driver starts each one).

        sources: only groups led by these nodes may move (None: any group). A driver
        running in every node passes its own id: it can call transfer_leader only on the
        groups it leads, while the counts still cover every group it knows. Move 3's
        chains then shrink to one step (their inner groups are other nodes' to move), and
        the swap of move 1 is not seen (it needs the preferred node's own groups)."""
        views = {v.group: v for v in groups}
        self._reconcile(views, now)
        if not self.options.enabled:
            return []
        live_set = set(live)
        hosting = sorted({n for v in views.values() for n in v.replicas} & live_set)
        goal = leader_goal(len(views), len(hosting))
        counts = dict.fromkeys(hosting, 0)
        for v in views.values():
            t = self._in_flight.get(v.group)
            lead = t.target if t is not None else v.leader
            if lead in counts:
                counts[lead] += 1
        slots = self.options.max_in_flight - len(self._in_flight)
        ready_by = now - self.options.return_delay_s

        def movable(v: GroupView) -> bool:
            return (
                v.leader is not None
                and v.leader in live_set
                and v.group not in self._in_flight
                and v.group not in self._muted
                and (sources is None or v.leader in sources)
            )

        def ready(v: GroupView, node: int) -> bool:
            since = v.ready_since.get(node)
            return node != v.leader and node in live_set and since is not None and since <= ready_by

        candidates = [views[g] for g in sorted(views) if movable(views[g])]
        led_by: dict[int, list[GroupView]] = {}
        for v in candidates:
            assert v.leader is not None
            led_by.setdefault(v.leader, []).append(v)

        def swap_possible(v: GroupView) -> bool:
            # Were v moved to its preferred node p (p then at goal + 1), could move 2 shed
            # a group p leads but does not prefer? Then the two moves are a swap that
            # brings a group home without overloading anyone (on a cluster balanced at
            # exactly the goal, this is the only way home).
            assert v.leader is not None
            p = v.preferred
            counts[v.leader] -= 1
            counts[p] += 1
            try:
                return any(
                    w.preferred != p
                    and w.group not in self._in_flight
                    and any(
                        ready(w, t) and counts[t] <= goal and counts[t] < counts[p] - 1
                        for t in w.replicas
                    )
                    for w in led_by.get(p, ())
                )
            finally:
                counts[v.leader] += 1
                counts[p] -= 1

        out: list[Transfer] = []

        def chain(source: int) -> list[tuple[GroupView, int]] | None:
            came: dict[int, tuple[int, GroupView] | None] = {source: None}
            queue = deque([source])
            while queue:
                node = queue.popleft()
                for v in led_by.get(node, ()):
                    if v.group in self._in_flight:
                        continue
                    for t in v.replicas:
                        if t in came or not ready(v, t):
                            continue
                        came[t] = (node, v)
                        if counts[t] <= goal:
                            path: list[tuple[GroupView, int]] = []
                            while (step := came[t]) is not None:
                                path.append((step[1], t))
                                t = step[0]
                            return path[::-1]
                        queue.append(t)
            return None

        def start(v: GroupView, target: int, reason: str) -> None:
            assert v.leader is not None
            t = Transfer(v.group, v.leader, target, v.term, reason, now)
            self._in_flight[v.group] = t
            counts[v.leader] -= 1
            counts[target] += 1
            out.append(t)

        # 1. Back to the preferred replica, most loaded current leaders first.
        while len(out) < slots:
            home = sorted(
                (-counts[v.leader], v.group, v)  # type: ignore[index]
                for v in candidates
                if v.group not in self._in_flight
                and v.leader != v.preferred
                and ready(v, v.preferred)
                and counts[v.preferred] + 1 <= goal + 1
            )
            chosen = next(
                (
                    v
                    for minus_source, _, v in home
                    if counts[v.preferred] + 1 <= goal
                    or counts[v.preferred] + 1 < -minus_source
                    or swap_possible(v)
                ),
                None,
            )
            if chosen is None:
                break
            start(chosen, chosen.preferred, PREFERRED)

        # 2. Off nodes above the goal, most loaded first.
        while len(out) < slots:
            best = None
            for v in candidates:
                if v.group in self._in_flight:
                    continue
                assert v.leader is not None
                source = counts[v.leader]
                if source <= goal or (v.leader == v.preferred and source <= goal + 1):
                    # Within the tolerated band a node keeps the groups preferring it:
                    # move 1 would bring them back (no back and forth).
                    continue
                for target in v.replicas:
                    if not ready(v, target):
                        continue
                    if counts[target] <= goal and counts[target] < source - 1:
                        key = (
                            -source,
                            target != v.preferred,
                            v.leader == v.preferred,
                            counts[target],
                            v.group,
                            target,
                        )
                        if best is None or key < best[0]:
                            best = (key, v, target)
            if best is None:
                break
            start(best[1], best[2], BALANCE)

        # 3. A node still at goal + 2 or more whose groups' other replicas all lead too
        # many: a chain L -> a -> ... -> T (T <= goal) through groups that can move
        # (breadth first, so the shortest); every inner node keeps its count.
        while len(out) < slots:
            over = sorted(
                (n for n in counts if counts[n] >= goal + 2), key=lambda n: (-counts[n], n)
            )
            path = next((p for n in over if (p := chain(n))), None)
            if path is None:
                break
            # A chain longer than the free slots (max_in_flight 1 allows no chain at all)
            # starts from its end: each tail step takes a group from an inner node leading
            # more than the goal to one at or below it, so the rest of the chain, or
            # move 2, follows in later rounds.
            for v, target in path[-(slots - len(out)) :]:
                start(v, target, BALANCE)
        return out
