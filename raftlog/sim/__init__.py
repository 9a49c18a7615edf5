"""Deterministic simulation of Raft clusters built on `raftlog.core`.

`harness.Cluster`: synchronous, hand-driven network for scenario tests.
`cluster.SimCluster` + `runner.run_seed`: seeded chaos with invariant checks
after every event; with `SimParams.groups` > 1 many Raft groups share the nodes
(faults per node, coalesced heartbeats, invariants per group; `group.SimGroup`).
SimCluster's parts: `cluster_network`, `cluster_beats`, `cluster_lifecycle`,
`cluster_storage_loss`; its data (TICK, SimParams, SimHost, placement): `params`.
Replay: `python -m raftlog.sim --seed N [--steps K] [--groups G] [--verbose]`.
"""

from raftlog.sim.cluster import SimCluster, SimParams
from raftlog.sim.harness import Cluster
from raftlog.sim.invariants import Checker, InvariantViolation
from raftlog.sim.runner import SimFailure, SimResult, run_seed

__all__ = [
    "Checker",
    "Cluster",
    "InvariantViolation",
    "SimCluster",
    "SimFailure",
    "SimParams",
    "SimResult",
    "run_seed",
]
