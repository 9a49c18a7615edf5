"""Replica placement for a new topic's partitions (or added partitions): one replica list
per partition, its first node the preferred leader.

Hard rules (a request that cannot meet them is refused with a PlacementError, never
placed some other way):
- replication factor >= 1 and <= the number of distinct live hosts
  (INVALID_REPLICATION_FACTOR, 38); partitions >= 1 (INVALID_PARTITIONS, 37);
- at most one replica of a partition per host, only on live nodes.

Choice (soft), after KRaft's StripedReplicaPlacer and Redpanda's least-allocated
constraint; "load" counts what `Topology.load` says a node already carries plus what this
call placed:
- preferred leader (the first replica): the live node that is preferred leader of the
  fewest of this call's partitions, then of the fewest groups overall, then carries the
  fewest replicas. So each topic's preferred leaders are within one of each other per
  node (P partitions on N nodes: floor or ceil(P/N) each), whatever the cluster held
  before, and the least loaded node wins the ties: a new node gets leaders first.
- followers, one per further host: the node with the fewest replicas overall, then of
  this call, then the fewest preferred leaderships. An empty new node is filled first.
- every remaining tie (all of them on an empty cluster) goes to the stripe: hosts in
  label order, taken round robin from a start derived from the seed (default: a stable
  hash of the topic name, so the same request gives the same answer), advancing by one
  per partition; replica r of partition p prefers the host r steps after p's, and the
  nodes inside a host rotate the same way. This is KRaft's stripe, used as the
  tie-break of a least-loaded choice rather than as the rule: the first partition of
  an empty cluster gets hosts s, s+1, s+2; later ones go where the load is lowest, so
  balance holds after every partition, not only after each full turn of the stripe.
Why preferred leaderships, not replicas, decide the first replica: with replicas first,
a host's nodes alternate by replica count, and with two nodes per host and RF 2 the
same node of a host would be every one of its partitions' preferred leader.
Replica counts per node end within two of each other on one topic (a striped window
of RF hosts sliding over N cannot do better for every P either).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from sink.placement.errors import PlacementError
from sink.placement.topology import Topology, count_load


def stripe_start(topic: str, seed: int | None = None) -> int:
    """The stripe's starting offset: the seed, else a stable hash of the topic name (not
    Python's hash(), which differs per process)."""
    if seed is not None:
        return seed
    return zlib.crc32(topic.encode("utf-8"))


def check_replication_factor(topology: Topology, replication_factor: int) -> None:
    """INVALID_REPLICATION_FACTOR unless 1 <= RF <= distinct live hosts."""
    if replication_factor < 1:
        raise PlacementError(
            ErrorCode.invalid_replication_factor,
            f"replication factor must be at least 1, got {replication_factor}",
        )
    hosts = topology.live_hosts()
    if replication_factor > len(hosts):
        dead = len(topology.hosts) - len(topology.live_nodes)
        shown = "; ".join(f"{h}: {','.join(map(str, nodes))}" for h, nodes in hosts.items())
        raise PlacementError(
            ErrorCode.invalid_replication_factor,
            f"replication factor {replication_factor} needs {replication_factor} distinct "
            f"live hosts (one replica per host); the cluster has {len(hosts)} "
            f"({shown or 'none'}) and {dead} dead node(s)",
        )


def place_partitions(
    topology: Topology,
    partitions: int,
    replication_factor: int,
    *,
    topic: str = "",
    seed: int | None = None,
    existing: Sequence[Sequence[int]] = (),
) -> list[tuple[int, ...]]:
    """Replica lists (preferred leader first) for `partitions` new partitions.

    existing: the topic's current replica lists when partitions are added
    (CreatePartitions): they count as this topic's own load, and the stripe continues
    at partition len(existing). Deterministic: the same topology, request and seed give
    the same lists."""
    if partitions < 1:
        raise PlacementError(
            ErrorCode.invalid_partitions, f"partition count must be at least 1, got {partitions}"
        )
    check_replication_factor(topology, replication_factor)
    hosts = topology.live_hosts()
    labels = list(hosts)
    n_hosts = len(labels)
    host_pos = {h: i for i, h in enumerate(labels)}
    start = stripe_start(topic, seed)
    # own_*: what this call placed (the topic's spread); the others: the cluster's load.
    own = count_load(existing)
    own_replicas = {n: own[n].replicas if n in own else 0 for n in topology.live_nodes}
    own_preferred = {n: own[n].preferred if n in own else 0 for n in topology.live_nodes}
    replicas = {n: topology.load_of(n).replicas for n in topology.live_nodes}
    preferred = {n: topology.load_of(n).preferred for n in topology.live_nodes}
    where = {
        n: (host_pos[h], i, len(nodes)) for h, nodes in hosts.items() for i, n in enumerate(nodes)
    }

    def order(node: int, p: int, r: int) -> tuple[int, int]:
        # The stripe tie-break: the node's host distance from replica r's host of
        # partition p, then the node's rotated rank inside its host.
        pos, idx, size = where[node]
        return ((pos - start - p - r) % n_hosts, (idx - start - p) % size)

    # Layer by layer: every partition's preferred leader first, then every partition's
    # second replica, and so on. Each layer is then a fair round over the nodes (on an
    # empty cluster replica r of partition p lands exactly on the stripe's host p + r),
    # where partition by partition would force a late partition's replicas onto nodes
    # that earlier partitions already filled (3,2,2,2,1 replicas for P=5 on N=5, RF 2).
    first = len(existing)
    chosen: list[list[int]] = []
    for p in range(first, first + partitions):
        leader = min(
            replicas, key=lambda n: (own_preferred[n], preferred[n], replicas[n], *order(n, p, 0))
        )
        chosen.append([leader])
        own_preferred[leader] += 1
        preferred[leader] += 1
        own_replicas[leader] += 1
        replicas[leader] += 1
    for r in range(1, replication_factor):
        for p, nodes in enumerate(chosen, start=first):
            used = {where[n][0] for n in nodes}
            follower = min(
                (n for n in replicas if where[n][0] not in used),
                key=lambda n: (replicas[n], own_replicas[n], preferred[n], *order(n, p, r)),
            )
            nodes.append(follower)
            own_replicas[follower] += 1
            replicas[follower] += 1
    out = [tuple(nodes) for nodes in chosen]
    return out
