"""Seeded simulation runs with many Raft groups per node (issue 16).

Every node hosts a replica of each group placed on it; crashes, partitions and
storage loss hit nodes (every group on them); heartbeats travel through the real
coalescer; each group keeps every single-group invariant plus I1 (group
isolation), I8 (messages for groups a node does not host are dropped and counted)
and I4 per group (every group commits a marker after the heal).

Per CI run: RAFTSINK_SIM_GROUP_SEEDS seeds (default below) from
RAFTSINK_SIM_SEED_START, each with G drawn from the seed: 64 groups for one seed in
GROUPS_64_EVERY (with STEPS_64 ticks of chaos, as a 64-group seed costs ~40 times a
one-group seed), 8 groups for the others (DEFAULT_STEPS ticks). With the 2,500
one-group seeds of test_sim_seeds.py and the 1,000 of test_sim_storage_loss.py a
CI run covers G in {1, 8, 64}. A failure prints its replay command
(`python -m raftlog.sim --seed N --steps K --groups G --verbose`).
"""

from __future__ import annotations

import os

import pytest

from raftlog.sim import SimCluster, SimFailure, run_seed
from raftlog.sim.runner import DEFAULT_STEPS
from raftlog.sim.sweep import sweep

DEFAULT_SEEDS = 80
GROUPS_64_EVERY = 8
STEPS_64 = 100
LOSSY = {"identity": True, "storage_loss_weight": 8, "loss_kinds": SimCluster.LOSS_KINDS}


def groups_for(seed: int) -> tuple[int, int]:
    """(groups, chaos ticks) of a multi-group CI seed."""
    return (64, STEPS_64) if seed % GROUPS_64_EVERY == 0 else (8, DEFAULT_STEPS)


def test_multi_group_seeds():
    n = int(os.environ.get("RAFTSINK_SIM_GROUP_SEEDS", DEFAULT_SEEDS))
    start = int(os.environ.get("RAFTSINK_SIM_SEED_START", 0))
    print(f"\nraftlog sim, many groups: seeds {start}..{start + n - 1}")
    jobs = []
    for seed in range(start, start + n):
        groups, steps = groups_for(seed)
        jobs.append((seed, {"steps": steps, "groups": groups}))
    report = sweep(jobs)
    assert not report.failures, report.failure_text()
    res = report.results
    totals = {
        "runs": len(res),
        "g64": sum(r.groups == 64 for r in res),
        "beats": sum(r.beats_sent for r in res),
        "rows": sum(r.beat_rows_sent for r in res),
        "misrouted": sum(r.misrouted for r in res),
        "dropped": sum(r.unknown_group_drops for r in res),
    }
    print(f"totals: {totals}")
    # the faults and the coalescer really ran
    assert totals["g64"] >= n // GROUPS_64_EVERY
    # (beats merge only across groups due in the same tick: about 1.7 rows a message
    # over these seeds, 2 to 11 for 64 groups)
    assert totals["rows"] > totals["beats"] > 0
    assert totals["dropped"] > 0 and totals["misrouted"] > 0


def test_multi_group_storage_loss_seeds():
    """Disk loss of a node damages every group's storage on it (one new incarnation)."""
    n = int(os.environ.get("RAFTSINK_SIM_GROUP_LOSS_SEEDS", 20))
    start = int(os.environ.get("RAFTSINK_SIM_SEED_START", 0))
    report = sweep((seed, {"groups": 8, **LOSSY}) for seed in range(start, start + n))
    assert not report.failures, report.failure_text()
    assert sum(r.losses for r in report.results) > 0  # the fault really ran


def test_multi_group_sealed_start_storage_loss_seeds():
    """Groups started sealed (partition groups: the placement records each replica's
    incarnation, no founding round) under the same disk losses: a node that lost its
    storage never votes from the configuration it started with."""
    n = int(os.environ.get("RAFTSINK_SIM_GROUP_LOSS_SEEDS", 20))
    start = int(os.environ.get("RAFTSINK_SIM_SEED_START", 0))
    report = sweep(
        (seed, {"groups": 8, "sealed": True, **LOSSY}) for seed in range(start, start + n)
    )
    assert not report.failures, report.failure_text()
    assert sum(r.losses for r in report.results) > 0


def test_checker_catches_an_entry_cache_keyed_without_the_group(monkeypatch):
    """Mutation check of I1: a transport cache of encoded entries keyed by (first
    index, last index, last term) without the group id (issue 16's first defect)
    hands one group's entries to another; the simulator must say so."""
    orig = SimCluster._transmit

    def cached(self, m):
        ents = getattr(m, "entries", None)
        if ents:
            cache = self.__dict__.setdefault("_ents_cache", {})
            key = (ents[0].index, ents[-1].index, ents[-1].term)
            m.entries = cache.setdefault(key, ents)
        orig(self, m)

    monkeypatch.setattr(SimCluster, "_transmit", cached)
    with pytest.raises(SimFailure, match="group isolation") as info:
        for seed in range(50):
            run_seed(seed, groups=8)
    assert "--groups 8" in str(info.value)


def test_checker_catches_beats_stepped_into_the_wrong_group(monkeypatch):
    """Mutation check of the coalesced path: an expansion that swaps the group ids
    of a coalesced message's rows (terms and commits land in other groups) breaks
    the per-group invariants within a few seeds (here: I4, groups that never
    settle on a leader after the heal)."""
    import raftlog.sim.cluster_beats as cluster_mod  # where the coalesced beats arrive

    real = cluster_mod.expand

    def swapped(m):
        out = real(m)
        ids = [hb.group_id for hb in out]
        for hb, gid in zip(out, ids[1:] + ids[:1], strict=True):
            hb.group_id = gid
        return out

    monkeypatch.setattr(cluster_mod, "expand", swapped)
    with pytest.raises(SimFailure, match=r"liveness|safety|completeness|commit"):
        for seed in range(50):
            run_seed(seed, groups=8)
