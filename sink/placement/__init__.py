"""Replica placement and leader balancing for partition groups: pure, sans-I/O modules
(no asyncio, no Raft, no clock): inputs in, decisions out. The controller and the node
runtime drive them (docs/partition-groups.md).

Public surface:
    Topology, NodeLoad, count_load, host_label
                        the cluster as placement sees it: node -> host label (the
                        failure domain; default every node its own host), live nodes,
                        load already carried
    place_partitions    replica lists for a topic's partitions (first = preferred
                        leader): one replica per host, striped, least loaded first
    check_replication_factor
                        INVALID_REPLICATION_FACTOR unless 1 <= RF <= live hosts
    move_replicas, MovePlan, MoveStep, validate_assignment, next_step
                        an operator's replica move: validation, the membership steps,
                        and the next step from a group's configuration as it is
    plan_drain, DrainPlan, DrainMove, groups_on
                        draining a node: the moves that take every data group off it,
                        keeping replication factors (refused if one cannot be kept)
    plan_rebalance      moves that even out replica counts (after adding nodes)
    rebalance_preferred rewrite preferred orders when a preferred node stays dead or
                        nodes were added
    LeaderBalancer, GroupView, Transfer, leader_goal, BalancerOptions
                        the leader balancer's planner: transfers to start now
    PlacementError      refusal carrying its Kafka error code (37, 38, 39)

Imports nothing of sink (kio's ErrorCode only).
"""

from sink.placement.balancer import (
    BALANCE,
    PREFERRED,
    GroupView,
    LeaderBalancer,
    Transfer,
    leader_goal,
)
from sink.placement.drain import DrainMove, DrainPlan, groups_on, plan_drain
from sink.placement.errors import PlacementError
from sink.placement.moves import (
    ADD_LEARNER,
    HAND_OFF,
    PROMOTE,
    REMOVE,
    WAIT,
    MovePlan,
    MoveStep,
    move_replicas,
    next_step,
    validate_assignment,
)
from sink.placement.options import BalancerOptions
from sink.placement.placer import check_replication_factor, place_partitions, stripe_start
from sink.placement.preferred import rebalance_preferred
from sink.placement.rebalance import plan_rebalance
from sink.placement.topology import NodeLoad, Topology, count_load, host_label, is_host_label

__all__ = [
    "ADD_LEARNER",
    "BALANCE",
    "HAND_OFF",
    "PREFERRED",
    "PROMOTE",
    "REMOVE",
    "WAIT",
    "BalancerOptions",
    "DrainMove",
    "DrainPlan",
    "GroupView",
    "LeaderBalancer",
    "MovePlan",
    "MoveStep",
    "NodeLoad",
    "PlacementError",
    "Topology",
    "Transfer",
    "check_replication_factor",
    "count_load",
    "groups_on",
    "host_label",
    "is_host_label",
    "leader_goal",
    "move_replicas",
    "next_step",
    "place_partitions",
    "plan_drain",
    "plan_rebalance",
    "rebalance_preferred",
    "stripe_start",
    "validate_assignment",
]
