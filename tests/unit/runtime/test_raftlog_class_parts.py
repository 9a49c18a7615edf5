"""raftlog's classes split into parts, checked as tests/unit/sink/test_class_parts.py
checks SinkNode's: RaftHost (raftlog.runtime.host), RaftGroup (raftlog.runtime.group),
SimCluster (raftlog.sim.cluster) and RawNode (raftlog.core.node_state) are each one
class in several modules, one part each. The parts hold no state of their own (no
__init__; besides methods and properties only immutable constants such as
SimCluster.LOSS_KINDS), no name is defined by two of them (the MRO would silently
pick one), and every attribute a part uses is a method, property or constant of the
class or a field its __init__ sets (RaftGroup: or its _open, which sets what needs
the storage: core, queue, snapshots, identity), so a field renamed in one place and
not another fails here rather than on the first host start, liveness wake or
simulated storage loss that takes that path.
"""

from __future__ import annotations

import pytest

from raftlog.core import election, follower, identity, leader, node_state, quiescence, reads
from raftlog.runtime import (
    group,
    group_api,
    group_apply,
    group_inbound,
    group_surface,
    host,
    host_beats,
    host_liveness,
    host_ticks,
)
from raftlog.sim import (
    cluster,
    cluster_beats,
    cluster_lifecycle,
    cluster_network,
    cluster_storage_loss,
)
from tests.helpers.class_parts import assert_every_attribute_is_known, assert_parts_hold_no_state

CLASSES: list[tuple[type, tuple[type, ...]]] = [
    (host.RaftHost, (host_beats.HostBeats, host_liveness.HostLiveness, host_ticks.HostTicks)),
    (
        group.RaftGroup,
        (
            group_inbound.GroupInbound,
            group_apply.GroupApply,
            group_api.GroupClientMixin,
            group_surface.GroupReadSurface,
        ),
    ),
    (
        cluster.SimCluster,
        (
            cluster_network.SimNetwork,
            cluster_beats.SimBeats,
            cluster_lifecycle.SimLifecycle,
            cluster_storage_loss.SimStorageLoss,
        ),
    ),
    (
        node_state.RawNode,
        (
            identity.IdentityRules,
            election.Elections,
            quiescence.Quiescence,
            follower.FollowerSide,
            leader.LeaderSide,
            reads.Reads,
        ),
    ),
]
IDS = [cls.__name__ for cls, _parts in CLASSES]

FIELD_SETTERS: dict[type, tuple[str, ...]] = {group.RaftGroup: ("__init__", "_open")}
"""The methods that set a class's fields (default: __init__ alone)."""


@pytest.mark.parametrize(("cls", "parts"), CLASSES, ids=IDS)
def test_the_class_is_its_parts(cls, parts):
    assert cls.__mro__[1:] == (*parts, object)


@pytest.mark.parametrize(("cls", "parts"), CLASSES, ids=IDS)
def test_parts_hold_no_state_and_define_disjoint_names(cls, parts):
    assert_parts_hold_no_state(cls, parts, constants=True)


@pytest.mark.parametrize(("cls", "parts"), CLASSES, ids=IDS)
def test_every_attribute_a_part_uses_is_a_method_or_a_field(cls, parts):
    assert_every_attribute_is_known(cls, parts, FIELD_SETTERS.get(cls, ("__init__",)))


def test_the_moved_names_are_still_importable_where_they_were():
    """What tests, bench/ and chaos/ import from the split modules stays put."""
    from raftlog.runtime import HostStats, NodeStats, RaftGroup, RaftHost
    from raftlog.sim.cluster import TICK, SimHost, SimNode, SimParams, placement

    assert RaftHost is host.RaftHost and HostStats is host.HostStats
    assert RaftGroup is group.RaftGroup and NodeStats is group.NodeStats
    assert (TICK, SimParams, SimHost, SimNode, placement) == (
        cluster.TICK,
        cluster.SimParams,
        cluster.SimHost,
        cluster.SimNode,
        cluster.placement,
    )
    assert cluster.SimCluster.LOSS_KINDS == (
        "all",
        "hard_state",
        "suffix",
        "middle",
        "middle_and_vote",
    )
