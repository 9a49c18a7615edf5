"""The placement input: which nodes exist, on which host, which are live, and the load
they already carry.

A *host* is the failure domain (Kafka's broker.rack, a machine running several node
processes): no two replicas of one group may share a host. A node without a label is its
own host, labelled with its id as text (node 3 -> "3"), which is also the default of the
`node.host` setting. Labels are compared as text, so a node labelled "3" shares node 3's
host: label hosts with names that are not bare node ids (h1, rack-a) when mixing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """What a node already carries: replicas of groups, and groups preferring it as leader."""

    replicas: int = 0
    preferred: int = 0

    def __post_init__(self) -> None:
        if self.replicas < 0:
            raise ValueError(f"NodeLoad.replicas must be >= 0, got {self.replicas}")
        if not 0 <= self.preferred <= self.replicas:
            raise ValueError(
                f"NodeLoad.preferred must be 0..replicas ({self.replicas}), got {self.preferred}"
            )


HOST_LABEL_MAX = 255


def is_host_label(label: object) -> bool:
    """A host label as `node.host` and the controller's registrations accept it: text
    of at most 255 printable characters without spaces, ',', '=' or '/' ("" for none)."""
    return isinstance(label, str) and (
        not label
        or (
            len(label) <= HOST_LABEL_MAX
            and label.isprintable()
            and not any(c.isspace() or c in ",=/" for c in label)
        )
    )


def host_label(node_id: int, label: str | None) -> str:
    """A node's host: its label, or (unset / empty) its own id as text."""
    return label if label else str(node_id)


@dataclass(frozen=True, slots=True)
class Topology:
    """The cluster as placement sees it; validated at construction.

    hosts: node id -> host label (None or "": the node is its own host).
    live:  the nodes that may receive new replicas and preferred leaderships (default:
           every node). Dead nodes keep the replicas they have; they get no new ones.
    load:  the replicas / preferred leaderships each node already has (missing: none);
           `count_load` derives it from existing assignments."""

    hosts: Mapping[int, str | None]
    live: frozenset[int] | None = None
    load: Mapping[int, NodeLoad] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.hosts:
            raise ValueError("Topology.hosts must name at least one node")
        for node, label in self.hosts.items():
            if not isinstance(node, int) or node < 1:
                raise ValueError(f"Topology.hosts: node ids must be integers >= 1, got {node!r}")
            if label is not None and not isinstance(label, str):
                raise ValueError(f"Topology.hosts[{node}]: a label is text, got {label!r}")
        resolved = {n: host_label(n, label) for n, label in self.hosts.items()}
        object.__setattr__(self, "hosts", dict(sorted(resolved.items())))
        live = frozenset(self.hosts) if self.live is None else frozenset(self.live)
        unknown = sorted(live - set(self.hosts))
        if unknown:
            raise ValueError(f"Topology.live names nodes not in Topology.hosts: {unknown}")
        object.__setattr__(self, "live", live)
        unknown = sorted(set(self.load) - set(self.hosts))
        if unknown:
            raise ValueError(f"Topology.load names nodes not in Topology.hosts: {unknown}")
        object.__setattr__(self, "load", dict(self.load))

    @classmethod
    def of(
        cls,
        nodes: Iterable[int] | Mapping[int, str | None],
        live: Iterable[int] | None = None,
        load: Mapping[int, NodeLoad] | None = None,
    ) -> Topology:
        """Shorthand: `nodes` a mapping node -> label, or just ids (each its own host)."""
        hosts = dict(nodes) if isinstance(nodes, Mapping) else {n: None for n in nodes}
        return cls(hosts, None if live is None else frozenset(live), dict(load or {}))

    @property
    def live_nodes(self) -> tuple[int, ...]:
        assert self.live is not None  # set in __post_init__
        return tuple(n for n in self.hosts if n in self.live)

    def host_of(self, node: int) -> str:
        return self.hosts[node]  # type: ignore[return-value]  # resolved to str

    def live_hosts(self) -> dict[str, tuple[int, ...]]:
        """Host label -> its live nodes (ascending), hosts sorted by label."""
        out: dict[str, list[int]] = {}
        for n in self.live_nodes:
            out.setdefault(self.host_of(n), []).append(n)
        return {h: tuple(out[h]) for h in sorted(out)}

    def load_of(self, node: int) -> NodeLoad:
        return self.load.get(node, NodeLoad())

    def with_load(self, load: Mapping[int, NodeLoad]) -> Topology:
        return Topology(dict(self.hosts), self.live, dict(load))


def count_load(assignments: Iterable[Sequence[int]]) -> dict[int, NodeLoad]:
    """Replicas and preferred leaderships per node of replica lists (first = preferred)."""
    replicas: dict[int, int] = {}
    preferred: dict[int, int] = {}
    for replica_list in assignments:
        for i, node in enumerate(replica_list):
            replicas[node] = replicas.get(node, 0) + 1
            if i == 0:
                preferred[node] = preferred.get(node, 0) + 1
    return {n: NodeLoad(replicas[n], preferred.get(n, 0)) for n in sorted(replicas)}
