"""One simulation run per seed: a chaos phase, then a fault-free liveness phase.

Chaos phase (`steps` ticks): random client requests and faults drawn from the
seed. Liveness phase: the network heals, every crashed node restarts, drops and
duplicates stop; within `LIVENESS_TICKS` ticks a leader must be elected and a
marker entry proposed in its term must be applied by every member of the
cluster. Any invariant violation, exception or liveness timeout raises
`SimFailure` whose message names the seed, the replay command and the trace tail.
"""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass, replace

from raftlog.sim.cluster import TICK, SimCluster, SimParams

DEFAULT_STEPS = 200
LIVENESS_TICKS = 400


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


def params_for(seed: int) -> SimParams:
    r = random.Random(f"params-{seed}")
    voters = r.choice([3, 3, 3, 3, 5, 5, 1])
    return SimParams(
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
        ld = c.leader()
        if ld is not None and r.random() < c.p.leader_bias:
            c.crash(ld.id)
        elif live:
            c.crash(r.choice(live).id)
    elif action == "partition" and r.random() < c.p.leader_bias:
        c.isolate_leader()
    elif action == "lose_storage":
        c.lose_storage(r.choice(list(c.nodes)), r.choice(c.p.loss_kinds))
    elif action == "restart":
        down = [n for n in c.nodes.values() if not n.alive]
        if down:
            c.restart(r.choice(down).id)
    else:
        getattr(c, action)()


def run_seed(
    seed: int, steps: int = DEFAULT_STEPS, verbose: bool = False, **overrides: object
) -> SimResult:
    """One run; `overrides` replace fields of the seed's SimParams (tests)."""
    params = replace(params_for(seed), **overrides)  # type: ignore[arg-type]
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
        for n in list(c.nodes.values()):
            if not n.alive:
                c.restart(n.id)
        params.drop = params.dup = params.spike = 0.0
        params.max_delay = min(params.max_delay, 6)
        start = c.now
        marker: dict[int, tuple[int, int]] = {}

        def live_enough() -> bool:
            ld = c.leader()
            if ld is None or ld.node is None:
                return False
            node = ld.node
            if node.term not in marker:
                try:
                    idx = node.propose(f"marker-{node.term}".encode())
                except Exception:
                    return False
                marker[node.term] = idx
                c.after_local_call(ld)
                return False
            index, term = marker[node.term]
            if node.log.term_at(index) != term or node.log.committed < index:
                return False
            members = node.membership.members()
            return all(c.nodes[m].alive and c.nodes[m].applied >= index for m in members)

        ok = c.run_until(start + LIVENESS_TICKS * TICK, live_enough)
        if not ok:
            raise SimFailure(
                f"liveness: no leader/commit on all members within {LIVENESS_TICKS} ticks "
                f"after healing\n{c.state()}"
            )
        ld = c.leader()
        assert ld is not None and ld.node is not None
        return SimResult(
            seed=seed,
            params=params,
            end_time=c.now,
            committed=ld.node.log.committed,
            terms=ld.node.term,
            liveness_ticks=(c.now - start) // TICK,
        )
    except SimFailure as e:
        raise SimFailure(_report(seed, steps, c, str(e))) from None
    except Exception as e:
        tb = traceback.format_exc(limit=6)
        raise SimFailure(_report(seed, steps, c, f"{type(e).__name__}: {e}\n{tb}")) from e


def _report(seed: int, steps: int, c: SimCluster | None, why: str) -> str:
    tail = "\n".join(c.trace) if c is not None else ""
    return (
        f"simulation failed for seed={seed}: {why}\n"
        f"replay: python -m raftlog.sim --seed {seed} --steps {steps} --verbose\n"
        f"trace tail:\n{tail}"
    )
