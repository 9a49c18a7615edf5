"""CreatePartitions of a placed topic, the decision (pure): the replica lists of the new
partitions, or the refusal Kafka's controller would answer.

Used by the controller leader (sink/node/routing.py), which then commits the lists as
one ADD_PARTITIONS entry (sink/state/placement_table.py). Nothing here touches Raft.

Rules, in Kafka's order (KRaft's ReplicationControlManager.createPartitions; its messages):
- count == current: INVALID_PARTITIONS "Topic already has N partition(s).";
  count < current: INVALID_PARTITIONS "The topic T currently has N partition(s); M would
  not be an increase."; count above kafka.max_create_partitions: INVALID_PARTITIONS.
- Explicit assignments (the request's `assignments`, kafka-topics --replica-assignment)
  are honoured after checking them, never silently replaced: one list per new partition
  ("Attempted to add A additional partition(s), but only B assignment(s) were
  specified."), each non-empty and of the topic's replication factor (the length of
  partition 0's list, as Kafka), and each passing placement's hard rules for a new
  replica list (sink.placement.validate_assignment: known nodes, none twice, live, one
  replica per host), else INVALID_REPLICA_ASSIGNMENT naming the problem.
- Without assignments: the placer (place_partitions with existing = the topic's current
  lists: the stripe continues at partition `current` and the topic's own spread counts),
  over the cluster's load; INVALID_REPLICATION_FACTOR if the topic's replication factor
  exceeds the live hosts now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sink.kafka.protocol.errors import ErrorCode
from sink.placement import (
    PlacementError,
    Topology,
    count_load,
    place_partitions,
    validate_assignment,
)


def count_refusal(
    topic: str, current: int, count: int, max_partitions: int
) -> tuple[ErrorCode, str] | None:
    """INVALID_PARTITIONS with Kafka's message unless count grows the topic (None)."""
    if count == current:
        return ErrorCode.invalid_partitions, f"Topic already has {current} partition(s)."
    if count < current:
        return (
            ErrorCode.invalid_partitions,
            f"The topic {topic} currently has {current} partition(s); {count} would not be "
            "an increase.",
        )
    if count > max_partitions:
        return (
            ErrorCode.invalid_partitions,
            f"{count} partitions is more than kafka.max_create_partitions ({max_partitions})",
        )
    return None


def topology_of(hosts: Mapping[int, str | None], assignments: Sequence[Sequence[int]]) -> Topology:
    """The placer's view: the nodes placement may use with their labels, and the load of
    every placed group on them (replicas on nodes that are no longer voters are not
    load placement can act on: left out, as Topology refuses unknown nodes)."""
    load = {n: v for n, v in count_load(assignments).items() if n in hosts}
    return Topology(dict(hosts), None, load)


def prefer_live(topology: Topology, down: set[int], replication_factor: int) -> Topology:
    """topology without the nodes that are down as places for new replicas, when the
    live ones still span replication_factor hosts (KRaft places on unfenced brokers
    only); else unchanged: a node down for a moment holds a replica it catches up on
    when back, better than refusing a topic that placement rules allow."""
    live = frozenset(n for n in topology.live_nodes if n not in down)
    if live == topology.live or len({topology.host_of(n) for n in live}) < replication_factor:
        return topology
    return Topology(dict(topology.hosts), live, dict(topology.load))


def added_replicas(
    topology: Topology,
    topic: str,
    current: Sequence[Sequence[int]],
    count: int,
    assignments: Sequence[Sequence[int]] | None,
    max_partitions: int,
) -> list[tuple[int, ...]]:
    """The replica lists of partitions len(current) .. count - 1 (first = preferred);
    PlacementError (its code is the Kafka answer) when refused. current: the topic's
    replica lists in partition order (non-empty: a placed topic)."""
    refused = count_refusal(topic, len(current), count, max_partitions)
    if refused is not None:
        raise PlacementError(*refused)
    added = count - len(current)
    rf = len(current[0])
    if assignments is None:
        return place_partitions(topology, added, rf, topic=topic, existing=current)
    if len(assignments) != added:
        raise _invalid(
            f"Attempted to add {added} additional partition(s), but only {len(assignments)} "
            "assignment(s) were specified."
        )
    return checked_assignments(topology, assignments, rf)


def checked_assignments(
    topology: Topology, assignments: Sequence[Sequence[int]], rf: int
) -> list[tuple[int, ...]]:
    """Explicit replica lists (CreatePartitions' new partitions, CreateTopics' whole
    topic) checked against placement's hard rules for a new list -> the lists as
    tuples; every list must hold rf replicas (CreateTopics: the first list's length).
    PlacementError with INVALID_REPLICA_ASSIGNMENT naming the problem otherwise."""
    out = []
    for given in assignments:
        replicas = tuple(given)
        if not replicas:
            raise _invalid("The manual partition assignment includes an empty replica list.")
        if len(replicas) != rf:
            raise _invalid(
                f"The manual partition assignment includes a partition with {len(replicas)} "
                f"replica(s), but this is not consistent with previous partitions, which have "
                f"{rf} replica(s)."
            )
        try:
            validate_assignment(topology, (), replicas)
        except PlacementError as exc:  # one code for every bad list, as Kafka
            raise _invalid(f"The manual partition assignment {list(replicas)}: {exc}") from None
        out.append(replicas)
    return out


def _invalid(message: str) -> PlacementError:
    return PlacementError(ErrorCode.invalid_replica_assignment, message)
