"""Seeded simulation runs. RAFTSINK_SIM_SEEDS sets how many (default below).

RAFTSINK_SIM_SEED_START shifts the range (e.g. for nightly sweeps of new seeds);
RAFTSINK_SIM_STEPS sets the chaos-phase length in ticks (default 200);
RAFTSINK_SIM_WORKERS the worker processes (raftlog.sim.sweep: default the cores, at
most 4; the seeds and their verdicts are the same with any number).
A failure names its seed; replay with `python -m raftlog.sim --seed N --verbose`.
"""

from __future__ import annotations

import os

import pytest

import raftlog.core.raft_log as raft_log_mod
from raftlog.sim import SimFailure, run_seed
from raftlog.sim.cluster import SimCluster
from raftlog.sim.runner import DEFAULT_STEPS, params_for
from raftlog.sim.sweep import default_workers, sweep

DEFAULT_SEEDS = 2500


def test_sim_seeds():
    n = int(os.environ.get("RAFTSINK_SIM_SEEDS", DEFAULT_SEEDS))
    start = int(os.environ.get("RAFTSINK_SIM_SEED_START", 0))
    steps = int(os.environ.get("RAFTSINK_SIM_STEPS", DEFAULT_STEPS))
    workers = default_workers()
    print(
        f"\nraftlog sim: seeds {start}..{start + n - 1} ({n} seeds, {steps} ticks of chaos each,"
        f" {workers} worker processes)"
    )
    report = sweep(((seed, {"steps": steps}) for seed in range(start, start + n)), workers)
    assert not report.failures, report.failure_text()
    assert len(report.results) == n


def test_same_seed_replays_identically():
    def trace(seed: int) -> list[str]:
        c = SimCluster(seed, params_for(seed), trace_len=10**6)
        c.schedule(500, "call", c.propose)
        c.schedule(900, "call", c.partition)
        c.schedule(1500, "call", c.heal)
        c.run_until(3000)
        return list(c.trace)

    assert trace(11) == trace(11)
    assert trace(11) != trace(12)


def test_checker_catches_a_broken_election_restriction(monkeypatch):
    """Sanity check of the simulator itself: granting votes to out-of-date
    candidates must be caught by the invariants within a few seeds."""
    monkeypatch.setattr(raft_log_mod.RaftLog, "is_up_to_date", lambda self, i, t: True)
    with pytest.raises(SimFailure, match="seed="):
        for seed in range(200):
            run_seed(seed)


def test_checker_catches_reads_without_quorum_confirmation(monkeypatch):
    from raftlog.core import node_state
    from raftlog.core.ready import ReadState

    def read_without_confirmation(self, src, ctx):
        self._read_states.append(ReadState(self.log.committed, ctx))

    monkeypatch.setattr(node_state.RawNode, "_leader_read", read_without_confirmation)
    with pytest.raises(SimFailure, match="read linearizability"):
        for seed in range(300):
            run_seed(seed)
