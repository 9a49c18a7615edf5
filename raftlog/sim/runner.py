"""One simulation run per seed: a chaos phase, then a fault-free liveness phase.

Chaos phase (`steps` ticks): random client requests and faults drawn from the
seed. Liveness phase: the network heals, every crashed node restarts, drops and
duplicates stop; within `LIVENESS_TICKS` ticks a leader must be elected and a
marker entry proposed in its term must be applied by every member of the
cluster. Any invariant violation, exception or liveness timeout raises
`SimFailure` whose message names the seed, the replay command and the trace tail.

With `groups` > 1 (G Raft groups over the same nodes): faults hit nodes (every
group on them), client actions pick groups at random (1 + G // 16 proposals per
propose action, so a 64-group run carries traffic in many groups), and liveness
(I4) holds per group: every group, each with its own marker, must commit and
apply it on all its members within `LIVENESS_TICKS` ticks of the heal; the
multi-group check runs once per tick (with one group after every event, as
before, which keeps one-group seeds' traces unchanged).

With quiescence (`quiesce_ticks` > 0) an idle phase comes first: after the heal,
`IDLE_TICKS` ticks without client requests, in which groups elect, catch up and
quiesce on their own; then no group may stay quiesced while one of its live
members lacks its leader's log or its admission (a replacement) (checked twice, 3T ticks apart: a quiesced group
changes only when something wakes it, so a lag seen at both is one nothing
will repair until the next write). Then the markers, as above: every group,
quiesced or not, must elect and commit again.
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace

from raftlog.sim.cluster import TICK, SimCluster, SimParams
from raftlog.sim.group import SimGroup

DEFAULT_STEPS = 200
LIVENESS_TICKS = 400
IDLE_TICKS = 150


class SimFailure(AssertionError):
    pass


@dataclass
class SimResult:
    seed: int
    params: SimParams
    end_time: int
    committed: int
    terms: int
    liveness_ticks: int
    """Ticks from the heal until every group was live (I4)."""
    groups: int = 1
    unknown_group_drops: int = 0
    """I8: messages and beat rows for groups their node does not host, dropped."""
    misrouted: int = 0
    """I8 faults injected (messages sent to a non-hosting node, rows added)."""
    beats_sent: int = 0
    """Coalesced heartbeat messages (Beats + BeatsResponse) sent."""
    beat_rows_sent: int = 0
    """Heartbeats and responses they carried."""
    disk_rounds: int = 0
    """Node disk rounds (one fsync each, covering every group's pending Ready)."""
    losses: int = 0
    """Storage losses injected (SimCluster.lose_storage calls that damaged a node)."""
    quiesced_after_idle: int = 0
    """With quiescence: groups whose leader was quiesced at the end of the idle phase."""
    liveness_wakes: int = 0
    """With quiescence: quiesced replicas woken by node liveness."""
    peers_declared_down: int = 0


def params_for(seed: int, groups: int = 1) -> SimParams:
    r = random.Random(f"params-{seed}")
    voters = r.choice([3, 3, 3, 3, 5, 5, 1])
    p = SimParams(
        voters=voters,
        spares=r.choice([0, 0, 1, 2]),
        pre_vote=r.random() < 0.85,
        check_quorum=r.random() < 0.85,
        max_msg_bytes=r.choice([20, 64, 512]),
        max_inflight_msgs=r.choice([1, 2, 8]),
        max_inflight_bytes=r.choice([64, 4096]),
        snapshot_chunk_bytes=r.choice([8, 24, 1000]),
        drop=r.choice([0.0, 0.02, 0.1, 0.2]),
        dup=r.choice([0.0, 0.05, 0.2]),
        spike=r.choice([0.0, 0.02, 0.1]),
        max_delay=r.choice([2, 6, 12]),
        fsync_max=r.choice([0, 2, 8, 30]),
        crash_weight=r.choice([3, 3, 12]),
        leader_bias=r.choice([0.0, 0.5, 0.9]),
        identity=(identity := r.random() < 0.8),
        # storage loss is only survivable with node identity (the mutation test
        # in tests/sim/test_sim_storage_loss.py turns it on without)
        storage_loss_weight=r.choice([0, 2, 6]) if identity else 0,
    )
    if groups > 1:
        # drawn after every one-group parameter, so those stay what they were
        p = replace(
            p,
            groups=groups,
            extra_nodes=r.choice([0, 1, 2, 3]),
            misroute=r.choice([0.0, 0.01, 0.05]),
        )
    return p


ACTIONS = (
    ("propose", 40),
    ("read", 8),
    ("compact", 6),
    ("partition", 3),
    ("heal", 4),
    ("crash", 3),
    ("restart", 5),
    ("transfer", 2),
    ("reconfigure", 3),
    ("lose_storage", 0),
)


def _chaos_action(c: SimCluster, r: random.Random) -> None:
    names = [a for a, _ in ACTIONS]
    weights = [w for _, w in ACTIONS]
    weights[names.index("crash")] = c.p.crash_weight
    weights[names.index("restart")] = c.p.crash_weight + 2
    weights[names.index("lose_storage")] = c.p.storage_loss_weight
    action = r.choices(names, weights)[0]
    if action == "crash":
        live = c.live()
        ld = c.leader_host()
        if ld is not None and r.random() < c.p.leader_bias:
            c.crash(ld.id)
        elif live:
            c.crash(r.choice(live).id)
    elif action == "partition" and r.random() < c.p.leader_bias:
        c.isolate_leader()
    elif action == "lose_storage":
        c.lose_storage(r.choice(list(c.hosts)), r.choice(c.p.loss_kinds))
    elif action == "restart":
        down = [h for h in c.hosts.values() if not h.up]
        if down:
            c.restart(r.choice(down).id)
    elif action == "propose" and c.multi:
        for _ in range(1 + c.p.groups // 16):
            c.propose()
    else:
        getattr(c, action)()


def run_seed(
    seed: int,
    steps: int = DEFAULT_STEPS,
    verbose: bool = False,
    groups: int = 1,
    **overrides: object,
) -> SimResult:
    """One run with `groups` Raft groups; `overrides` replace fields of the seed's
    SimParams (tests)."""
    params = replace(params_for(seed, groups), **overrides)  # type: ignore[arg-type]
    c: SimCluster | None = None
    try:
        c = SimCluster(seed, params)
        c.verbose = verbose
        c.log(f"seed={seed} params={params}")
        r = random.Random(f"chaos-{seed}")
        # chaos phase: a client/nemesis action every 1..3 ticks
        t = 0
        end = steps * TICK
        while True:
            t += r.randint(1, 3 * TICK)
            if t >= end:
                break
            c.schedule(t, "call", lambda: _chaos_action(c, r))  # type: ignore[arg-type]
        c.run_until(end)
        # liveness phase
        c.log("QUIET: heal, restart all, no more faults")
        c.heal()
        for h in list(c.hosts.values()):
            if not h.up:
                c.restart(h.id)
        params.drop = params.dup = params.spike = params.misroute = 0.0
        params.max_delay = min(params.max_delay, 6)
        quiesced = 0
        if params.quiesce_ticks:
            quiesced = _idle_phase(c)
        start = c.now
        markers = [Marker(c, g) for g in c.gs]
        if c.multi:
            ok = c.run_until(start + LIVENESS_TICKS * TICK, _every_tick(c, markers))
        else:
            ok = c.run_until(start + LIVENESS_TICKS * TICK, markers[0].done)
        if not ok:
            late = [mk.g.gid for mk in markers if mk.at is None]
            which = f"groups {late[:20]} of {len(markers)}: " if c.multi else ""
            raise SimFailure(
                f"liveness: {which}no leader/commit on all members within {LIVENESS_TICKS} "
                f"ticks after healing\n{c.state()}"
            )
        # group 0's leader's figures (the only group's with one group); with many
        # groups group 0 may have lost its leader since it was seen live: then the
        # highest of its replicas'
        ld = c.leader()
        nodes = [ld.node] if ld is not None else [sn.node for sn in c.gs[0].nodes.values()]
        live0 = [n for n in nodes if n is not None]
        return SimResult(
            seed=seed,
            params=params,
            end_time=c.now,
            committed=max(n.log.committed for n in live0),
            terms=max(n.term for n in live0),
            liveness_ticks=(c.now - start) // TICK,
            groups=params.groups,
            unknown_group_drops=c.unknown_group_msgs + c.unknown_group_rows,
            misrouted=c.misrouted,
            beats_sent=c.beats_sent,
            beat_rows_sent=c.beat_rows_sent,
            disk_rounds=c.disk_rounds,
            losses=c.losses,
            quiesced_after_idle=quiesced,
            liveness_wakes=c.liveness_wakes,
            peers_declared_down=c.peers_declared_down,
        )
    except SimFailure as e:
        raise SimFailure(_report(seed, steps, c, str(e))) from None
    except Exception as e:
        tb = traceback.format_exc(limit=6)
        raise SimFailure(_report(seed, steps, c, f"{type(e).__name__}: {e}\n{tb}")) from e


def _holds(node: object, index: int, term: int) -> bool:
    log = node.log  # type: ignore[attr-defined]
    if log.last_index() < index:
        return False
    try:
        return log.term_at(index) == term
    except Exception:  # compacted past it: it was committed and applied here
        return True


def _quiesced_lagging(c: SimCluster) -> set[tuple[int, int, int, int]]:
    """(group, leader, member, term) for each quiesced leader with a live member
    whose log lacks the leader's last entry, or that is a replacement not yet
    admitted (it may not vote until the leader heartbeats it)."""
    out = set()
    for g in c.gs:
        ld = g.leader()
        if ld is None or ld.node is None or not ld.node.quiesced:
            continue
        node = ld.node
        last = node.log.last_index()
        term = node.log.term_at(last)
        for m in node.membership.members():
            sn = g.nodes.get(m)
            if (
                m != ld.id
                and sn is not None
                and sn.node is not None
                and (not _holds(sn.node, last, term) or sn.node.is_replacement())
            ):
                out.add((g.gid, ld.id, m, node.term))
    return out


def _idle_phase(c: SimCluster) -> int:
    """No requests for IDLE_TICKS: then no group may be quiesced while a live member
    lacks its log (the same lag seen twice, 3T ticks apart). Returns how many
    groups' leaders were quiesced at the end."""
    c.log("IDLE: no requests")
    c.run_until(c.now + IDLE_TICKS * TICK)
    first = _quiesced_lagging(c)
    c.run_until(c.now + 3 * c.p.election_tick * TICK)
    stuck = first & _quiesced_lagging(c)
    if stuck:
        raise SimFailure(
            "quiesced while a member lacks the log: (group, leader, member, term) "
            f"{sorted(stuck)[:10]}\n{c.state()}"
        )
    return sum(
        1
        for g in c.gs
        if (ld := g.leader()) is not None and ld.node is not None and ld.node.quiesced
    )


class Marker:
    """I4 for one group: its leader proposes a marker in its term, and the group is
    live once that marker is committed and applied by every member."""

    def __init__(self, c: SimCluster, g: SimGroup) -> None:
        self.c = c
        self.g = g
        self.by_term: dict[int, tuple[int, int]] = {}
        self.at: int | None = None
        """Time the group was first seen live (None: not yet)."""

    def done(self) -> bool:
        c, g = self.c, self.g
        ld = g.leader()
        if ld is None or ld.node is None:
            return False
        node = ld.node
        if node.term not in self.by_term:
            try:
                idx = node.propose(g.tag + f"marker-{node.term}".encode())
            except Exception:
                return False
            self.by_term[node.term] = idx
            c.after_local_call(ld)
            return False
        index, term = self.by_term[node.term]
        if node.log.term_at(index) != term or node.log.committed < index:
            return False
        members = node.membership.members()
        if all(g.nodes[m].alive and g.nodes[m].applied >= index for m in members):
            self.at = c.now
            return True
        return False


def _every_tick(c: SimCluster, markers: list[Marker]) -> Callable[[], bool]:
    """A stop condition checking the groups not yet live once per simulated tick
    (checking G groups after every event would cost G times the events)."""
    last = [-1]

    def stop() -> bool:
        tick = c.now // TICK
        if tick == last[0]:
            return False
        last[0] = tick
        pending = False
        for mk in markers:
            if mk.at is None and not mk.done():
                pending = True
        return not pending

    return stop


def replay_command(seed: int, steps: int, groups: int = 1, quiesce_ticks: int = 0) -> str:
    g = f" --groups {groups}" if groups > 1 else ""
    q = f" --quiesce-ticks {quiesce_ticks}" if quiesce_ticks else ""
    return f"python -m raftlog.sim --seed {seed} --steps {steps}{g}{q} --verbose"


def _report(seed: int, steps: int, c: SimCluster | None, why: str) -> str:
    tail = "\n".join(c.trace) if c is not None else ""
    groups = c.p.groups if c is not None else 1
    quiesce = c.p.quiesce_ticks if c is not None else 0
    return (
        f"simulation failed for seed={seed}: {why}\n"
        f"replay: {replay_command(seed, steps, groups, quiesce)}\n"
        f"trace tail:\n{tail}"
    )
