"""Faults, scheduled from a seed.

The schedule (`make_schedule`) is a pure function of the seed and the options:
the fault kinds (dealt from shuffled decks so every kind comes up evenly), their
start times, durations, and target choices ("the leader", or a node id; which
links a partition cuts). Only what "the leader" resolves to depends on the run
(whoever leads at that moment); with no known leader, a seeded node is used.

Kinds (one fault at a time, then healed, then a quiet gap):
    kill        kill -9 the target, restart it when the window ends
    pause       SIGSTOP the target, SIGCONT when the window ends
    partition   cut Raft links through the proxy, heal when the window ends:
                  isolate-leader   leader | the other two
                  isolate-node     a random node | the other two
                  bridge           a - b - c: a and c cannot talk, b reaches both
                                   (5 nodes: only the a-c links are cut)
                  one-way-leader   the leader's outgoing links only (it hears
                                   the others but cannot send to them)
    membership  remove the target and re-add it, or replace it (kill, remove, wipe
                its data, start it empty, add it back) (chaos.membership)
    move        (partition groups only) a partition's data group moves off the target
                (or onto a node without a replica, where there is one) and back when
                the window ends: the node rejoins empty (chaos.moves)
    disk        the target's fsyncs block ("stall") or take 0.3 s each ("slow"),
                or the target's and others' block, a majority in all ("stall-majority":
                no commit is possible) until the window ends (chaos.node hook)

With partition groups (`partition_groups=True`), "the leader" is the node leading the
most data groups (current_leader), and `move` runs only there (GROUPS_ONLY). Its
`membership` removals drain the node's data groups first (sink/members/drain.py), so
they need a node to drain onto: on 3 nodes at replication factor 3 the removal is
refused ("add a node first", in the fault's description) and the fault changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.fault_cluster import ChaosCluster, link
from chaos.history import History

KINDS = ("kill", "pause", "partition", "disk", "wipe", "corrupt", "membership", "move")
ONE_GROUP_KINDS = KINDS[:-1]
"""Every kind but `move` (partition groups only): one-group schedules deal from these, as
before `move` existed, so a seed's schedule is unchanged."""
ADMIT_TIMEOUT_S = 90.0
"""How long a wiped or corrupted node may take to be a voting member again before
the next fault (one replacement at a time: a second before the first is admitted
could leave no majority that vouches for the data, which stalls the cluster)."""
PARTITION_MODES = ("isolate-leader", "isolate-node", "bridge", "one-way-leader")
DISK_MODES = ("stall", "slow", "stall-majority")
MEMBERSHIP_MODES = ("remove-readd", "replace")  # chaos.membership.MODES


@dataclass
class Fault:
    kind: str
    start: float
    duration: float
    target: str  # "leader" or a node id as text
    mode: str = ""  # partition mode, disk mode
    order: list[int] = field(default_factory=list)  # seeded node permutation

    def describe(self) -> str:
        what = f"{self.kind} {self.mode}".strip()
        return f"{what} target={self.target}"


@dataclass(frozen=True)
class ScheduleOptions:
    duration_s: float
    kinds: tuple[str, ...] = ONE_GROUP_KINDS
    warmup_s: float = 5.0
    cooldown_s: float = 3.0
    fault_min_s: float = 3.0
    fault_max_s: float = 8.0
    gap_min_s: float = 2.0
    gap_max_s: float = 5.0
    nodes: int = 3
    partition_groups: bool = False


GROUPS_UNSUPPORTED: dict[str, str] = {}
"""Kinds a campaign with partition groups refuses, and why (none since membership
changes drain the node's data groups first)."""

GROUPS_ONLY = {
    "move": "it moves a partition's data group (raftsink partitions move), which needs "
    "--partition-groups",
}
"""Kinds only a campaign with partition groups runs, and why."""


def check_kinds(kinds: tuple[str, ...] | list[str], partition_groups: bool) -> None:
    """ValueError naming the first kind the campaign cannot run (unknown, or not supported
    with partition groups and why)."""
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"unknown nemesis {k!r}; known: {', '.join(KINDS)}")
        if partition_groups and k in GROUPS_UNSUPPORTED:
            raise ValueError(
                f"nemesis {k!r} is not supported with partition groups: {GROUPS_UNSUPPORTED[k]}"
            )
        if not partition_groups and k in GROUPS_ONLY:
            raise ValueError(f"nemesis {k!r} is not supported on one group: {GROUPS_ONLY[k]}")


def default_kinds(partition_groups: bool) -> tuple[str, ...]:
    """Every kind the campaign supports on this kind of cluster."""
    refused = GROUPS_UNSUPPORTED if partition_groups else GROUPS_ONLY
    return tuple(k for k in KINDS if k not in refused)


def make_schedule(seed: int, opts: ScheduleOptions) -> list[Fault]:
    rng = random.Random(f"nemesis-{seed}")
    check_kinds(opts.kinds, opts.partition_groups)
    out: list[Fault] = []
    deck: list[str] = []
    t = opts.warmup_s
    ids = list(range(1, opts.nodes + 1))
    while True:
        duration = round(rng.uniform(opts.fault_min_s, opts.fault_max_s), 2)
        if t + duration > opts.duration_s - opts.cooldown_s:
            break
        if not deck:
            deck = list(opts.kinds)
            rng.shuffle(deck)
        kind = deck.pop()
        order = ids[:]
        rng.shuffle(order)
        target = "leader" if rng.random() < 0.5 else str(order[0])
        mode = ""
        if kind == "partition":
            mode = rng.choice(PARTITION_MODES)
            target = "leader" if mode in ("isolate-leader", "one-way-leader") else str(order[0])
        elif kind == "disk":
            mode = rng.choice(DISK_MODES)
        elif kind == "membership":
            mode = rng.choice(MEMBERSHIP_MODES)
        out.append(Fault(kind, round(t, 2), duration, target, mode, order))
        t += duration + rng.uniform(opts.gap_min_s, opts.gap_max_s)
    return out


async def current_leader(cluster: ChaosCluster) -> int:
    """The node that says it leads with the highest term (0 if none answers).

    With partition groups, "the leader" is the node leading the most data groups (its
    status' `data_groups.leading`), so a kill or pause hits the leaders of many groups;
    ties go to the controller's leader, then to the lowest id. 0 if no node leads any."""
    return (await leader_and_groups(cluster))[0]


async def leader_and_groups(cluster: ChaosCluster) -> tuple[int, dict[int, int]]:
    """current_leader, and with partition groups how many data groups each answering
    node leads (the report shows what a fault on "the leader" hit)."""
    sts = {}
    for i in cluster.alive():
        if i in cluster.paused:
            continue
        st = await cluster.status(i, timeout=1.0)
        if st:
            sts[i] = st
    led = {
        i: int((st.get("data_groups") or {}).get("leading", 0))
        for i, st in sts.items()
        if cluster.partition_groups
    }
    return pick_leader(sts, cluster.partition_groups), led


def pick_leader(sts: dict[int, dict[str, Any]], partition_groups: bool) -> int:
    """current_leader's choice from the nodes' status (node id -> status dict)."""
    best: tuple[int, int, int] = (0, 0, 0)  # (groups led, term if controller leader, -id)
    leader = 0
    for i, st in sorted(sts.items()):
        is_leader = st.get("role") == "leader"
        term = int(st.get("term", 0)) if is_leader else -1
        if partition_groups:
            led = int((st.get("data_groups") or {}).get("leading", 0))
            if led == 0:
                continue
            key = (led, 1 if is_leader else 0, -i)
        else:
            if not is_leader:
                continue
            key = (0, term, -i)
        if leader == 0 or key > best:
            best, leader = key, i
    return leader


async def wait_admitted(cluster: ChaosCluster, node: int) -> float | None:
    """Wait until `node` may vote again (re-admitted under its storage's incarnation),
    repairing it first if it stopped on damage; seconds taken, None on timeout."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while loop.time() - start < ADMIT_TIMEOUT_S:
        cluster.repair_if_stopped(node)
        st = await cluster.status(node, timeout=1.0)
        if admitted(st):
            return round(loop.time() - start, 2)
        await asyncio.sleep(0.2)
    return None


def admitted(st: dict[str, Any] | None) -> bool:
    """A node's status says it may vote again: its controller storage is the
    incarnation the membership records and, with partition groups, every data group it
    hosts may vote too (a wiped node's groups, or the group a corrupt repaired, are
    replacements until their leaders admit them: without this the next storage fault
    could hit a second replica of such a group while the first one cannot vouch yet)."""
    ident = (st or {}).get("identity") or {}
    if not (ident.get("may_vote") and ident.get("recorded") == ident.get("incarnation")):
        return False
    rows = ((st or {}).get("data_groups") or {}).get("groups") or []
    return all(row.get("may_vote", True) for row in rows)


class Nemesis:
    def __init__(self, cluster: ChaosCluster, history: History, schedule: list[Fault]) -> None:
        self.cluster = cluster
        self.history = history
        self.schedule = schedule
        self.done: list[dict[str, Any]] = []  # executed faults with resolved targets and times
        self.counts: dict[str, int] = {}
        self.groups_led: dict[int, int] = {}

    async def _resolve(self, f: Fault) -> tuple[int, int]:
        """(target node, leader at this moment or 0); with partition groups the data
        groups each node leads are kept in self.groups_led for the fault's record."""
        leader, self.groups_led = await leader_and_groups(self.cluster)
        if f.target == "leader":
            return leader or f.order[0], leader
        return int(f.target), leader

    async def run(self, stop: asyncio.Event) -> None:
        for f in self.schedule:
            delay = f.start - self.history.now()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                    return
                except TimeoutError:
                    pass
            if stop.is_set():
                return
            await self.inject(f, stop)

    async def inject(self, f: Fault, stop: asyncio.Event | None = None) -> None:
        c = self.cluster
        node, leader = await self._resolve(f)
        others = [j for j in f.order if j != node]
        desc: dict[str, Any] = {
            "fault": f.describe(),
            "kind": f.kind,
            "mode": f.mode,
            "target": f.target,
            "node": node,
            "leader": leader,
        }
        if self.groups_led:
            desc["groups_led"] = {str(i): n for i, n in sorted(self.groups_led.items())}
        undo = None
        if f.kind == "kill":
            await asyncio.to_thread(c.kill, node)

            def undo() -> None:
                c.start(node)
        elif f.kind == "pause":
            c.pause(node)

            def undo() -> None:
                c.resume(node)
        elif f.kind == "disk":
            # stall-majority: the target and enough others to leave no majority with a
            # working disk (1 other of 3 nodes, 2 others of 5)
            n_others = len(f.order) // 2 if f.mode == "stall-majority" else 0
            stalled = [node, *others[:n_others]]
            for j in stalled:
                c.stall_disk(j, "0.3" if f.mode == "slow" else "stall")
            desc["nodes"] = stalled

            def undo() -> None:
                for j in stalled:
                    c.clear_disk(j)
        elif f.kind in ("wipe", "corrupt"):
            # one damaged node at a time: the others must vote (else a second loss
            # could leave no majority that vouches for the data, which by design
            # stalls the cluster, and a third would found a new, empty one)
            others_ok = [await wait_admitted(c, j) for j in others]
            desc["others_admitted"] = others_ok
            if any(t is None for t in others_ok):
                desc["skipped"] = "another node is not admitted"
            elif f.kind == "wipe":
                await asyncio.to_thread(c.wipe, node)
            else:
                desc["file"] = await asyncio.to_thread(c.corrupt, node)

            def undo() -> None:
                if "skipped" in desc:
                    return
                desc["admitted_s"] = asyncio.run(wait_admitted(c, node))
                if f.kind == "corrupt":
                    # damage the node has not read yet would surface later, overlapping
                    # the next faults: check it now as an operator would (raftsink
                    # verify while it is down) and repair it if verify finds it
                    desc["verify"] = c.verify_and_repair(node)
                    desc["admitted_after_verify_s"] = asyncio.run(wait_admitted(c, node))
        elif f.kind == "partition":
            if f.mode in ("isolate-leader", "isolate-node"):
                links = [link(node, j) for j in others] + [link(j, node) for j in others]
                desc["groups"] = [[node], sorted(others)]
            elif f.mode == "bridge":
                a, b = others[0], others[1]
                links = [link(a, b), link(b, a)]
                desc["bridge"] = node
                desc["cut"] = [a, b]
            else:  # one-way-leader
                links = [link(node, j) for j in others]
                desc["cut_outgoing_of"] = node
            assert c.proxy is not None
            c.proxy.block(links)
            desc["links"] = links

            def undo() -> None:
                assert c.proxy is not None
                c.proxy.heal(links)
        elif f.kind == "membership":
            from chaos import membership

            undo = await membership.inject(c, node, f.mode, desc)
        elif f.kind == "move":
            from chaos import moves

            undo = await moves.inject(c, node, f.order, desc)
        else:
            raise ValueError(f.kind)
        op = self.history.invoke("nemesis", "nemesis", value=desc)
        start = self.history.now()
        try:
            if stop is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), f.duration)
            else:
                await asyncio.sleep(f.duration)
        finally:
            await asyncio.to_thread(undo)
            end = self.history.now()
            self.history.complete(op, "info", "nemesis", "nemesis", value=desc)
            self.done.append({**desc, "start": round(start, 3), "end": round(end, 3)})
            self.counts[f.kind] = self.counts.get(f.kind, 0) + 1


def schedule_json(schedule: list[Fault]) -> list[dict[str, Any]]:
    return [asdict(f) for f in schedule]
