"""The controller's placement table: which data group hosts each partition, on which nodes.

Written only by two controller commands, each ONE entry, so a partition never exists
without its placement (partition groups, docs/partition-groups.md "Running with
partition groups"). Applied by SinkStateMachine (the controller group, group 0).

    PLACE_TOPIC     b"W" | JSON {"name": str, "partitions": int, "topic_id": hex,
                                 "configs": {config: value} (may be empty),
                                 "replicas": [[node, ...] per partition],
                                 "incarnations": {"node": int} (optional, below)}
    ADD_PARTITIONS  b"N" | JSON {"name": str, "topic_id": hex, "partitions": int (the
                                 new count), "replicas": [[node, ...] per NEW partition],
                                 "incarnations": {"node": int} (optional)}
                    ("incarnations": the storage incarnations the controller's
                    configuration recorded for the replicas when the proposer placed
                    them. A new group starts from them *sealed*
                    (raftlog RaftConfig.incarnations): a replica whose storage of the
                    group is new to its host carries the host's incarnation and
                    votes at once, so a group placed while one replica is down
                    elects with the others, instead of waiting for a founding round
                    that needs every voter. A storage that lost the group's state,
                    or a wiped host, has another incarnation: a replacement, admitted
                    by the leader once caught up. Absent (older entries): founded.)
                    (CreatePartitions: partitions count - len(replicas) .. count - 1;
                    applies only while the topic has that id and exactly
                    count - len(replicas) partitions, so a replayed or raced entry
                    changes nothing)
    MOVE_REPLICAS   b"V" | JSON {"group": id, "replicas": [node, ...] (the group's list
                                 now: applies only while it is exactly that),
                                 "target": [node, ...]}
                    (an operator's move, sink.placement.moves: sets the group's target;
                    a new target replaces a pending one, and the replicas themselves
                    as the target cancel it (a move back, with nothing pending: no
                    change): the group's leader converges its Raft configuration on
                    whatever the target is when it looks. Nodes an earlier target
                    added and the new one drops are kept `leaving` until the move is
                    done: they may already be in the group's configuration)
    MOVE_DONE       b"F" | JSON {"group": id, "target": [node, ...]}
                    (the group's leader saw its voters become exactly the target:
                    replicas := target, target and leaving cleared; applies only while
                    the target is exactly that list, so a stale or replayed entry
                    changes nothing)

Invariants (tests/unit/sink/test_placement_table.py):
- group ids are allocated at apply time, in partition order, from next_group_id,
  which only rises: an id below it that is absent from the table belongs to a
  deleted topic and never comes back (the reconciler deletes such a group's data
  without asking anyone);
- group 0 is the controller, never a data group (next_group_id starts at 1);
- one partition per data group (packing several is a later option);
- the table names only topics in the controller's topic table: DeleteTopics removes
  the topic's rows in the same apply;
- a placed topic's partitions are exactly 0..P-1 of its TopicInfo, each in one group
  (ADD_PARTITIONS appends P..count-1 and raises P in the same apply);
- during a move a group is hosted on `members` (replicas, then the target's new
  nodes, then `leaving`): a node leaves a group only once MOVE_DONE dropped it from
  every list, which the group's leader proposes only after its voters are exactly the
  target (so the node is out of the group's Raft configuration).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

PLACE_TOPIC = 0x57  # "W"
ADD_PARTITIONS = 0x4E  # "N"
MOVE_REPLICAS = 0x56  # "V"
MOVE_DONE = 0x46  # "F"
FIRST_DATA_GROUP = 1
MAX_PARTITIONS = 2**31 - 1  # Kafka's partition ids are int32


class PlaceTopicCmd(NamedTuple):
    name: str
    partitions: int
    topic_id: uuid.UUID
    configs: dict[str, str]
    replicas: list[tuple[int, ...]]
    incarnations: dict[int, int] = {}


class AddPartitionsCmd(NamedTuple):
    name: str
    topic_id: uuid.UUID
    partitions: int
    """The topic's partition count once applied."""
    replicas: list[tuple[int, ...]]
    """One list per new partition, in partition order (first = preferred)."""
    incarnations: dict[int, int] = {}

    @property
    def first(self) -> int:
        """The first new partition: the count the topic must have when this applies."""
        return self.partitions - len(self.replicas)


class GroupPlacement(NamedTuple):
    """One data group: the partition it hosts and its replicas (first = preferred)."""

    group: int
    topic_id: str  # hex
    partition: int
    replicas: tuple[int, ...]
    target: tuple[int, ...] = ()
    """The replica list an unfinished move goes to (empty: no move)."""
    leaving: tuple[int, ...] = ()
    """Nodes an earlier target of this move added and the current one dropped (a
    cancel, a new target): still hosting until the move is done."""
    incarnations: tuple[tuple[int, int], ...] = ()
    """(node, incarnation) of the replicas as placed: the group's sealed start
    (empty: a founding round). Kept through moves: only a replica whose storage
    carries exactly one of these votes without being admitted."""

    def incarnation_map(self) -> dict[int, int]:
        return dict(self.incarnations)

    @property
    def members(self) -> tuple[int, ...]:
        """The nodes that host the group now: its replicas, a move's new nodes, and the
        nodes an abandoned target added."""
        out = self.replicas + tuple(n for n in self.target if n not in self.replicas)
        return out + tuple(n for n in self.leaving if n not in out)

    @property
    def adding(self) -> tuple[int, ...]:
        """A move's new nodes (Kafka's adding_replicas)."""
        return tuple(n for n in self.target if n not in self.replicas)

    @property
    def removing(self) -> tuple[int, ...]:
        """The nodes a move takes the group off (Kafka's removing_replicas)."""
        return tuple(n for n in self.replicas if self.target and n not in self.target)


class MoveCmd(NamedTuple):
    group: int
    replicas: tuple[int, ...]
    """The group's replica list when the move was decided (compare-and-set)."""
    target: tuple[int, ...]


class MoveDoneCmd(NamedTuple):
    group: int
    target: tuple[int, ...]


def encode_place_topic(
    name: str,
    partitions: int,
    topic_id: uuid.UUID,
    configs: dict[str, str] | None,
    replicas: Sequence[Sequence[int]],
    incarnations: Mapping[int, int] | None = None,
) -> bytes:
    body: dict[str, Any] = {
        "name": name,
        "partitions": partitions,
        "topic_id": topic_id.hex,
        "configs": dict(configs or {}),
        "replicas": [list(r) for r in replicas],
    }
    _put_incarnations(body, replicas, incarnations)
    return b"W" + json.dumps(body, separators=(",", ":")).encode()


def _put_incarnations(
    body: dict[str, Any],
    replicas: Sequence[Sequence[int]],
    incarnations: Mapping[int, int] | None,
) -> None:
    used = {n for r in replicas for n in r}
    incs = {str(n): int(i) for n, i in sorted((incarnations or {}).items()) if n in used and i}
    if incs:
        body["incarnations"] = incs


def _incarnations(raw: Any, what: str) -> dict[int, int]:
    """The optional "incarnations" map: node id >= 1 -> incarnation in [1, 2**63)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{what}: incarnations must be an object")
    out = {}
    for k, v in raw.items():
        if not isinstance(k, str) or not k.isdigit() or int(k) < 1:
            raise ValueError(f"{what}: bad node id {k!r} in incarnations")
        if not isinstance(v, int) or isinstance(v, bool) or not 0 < v < 1 << 63:
            raise ValueError(f"{what}: bad incarnation {v!r} of node {k}")
        out[int(k)] = v
    return out


def decode_place_topic(data: bytes) -> PlaceTopicCmd:
    body = json.loads(bytes(data[1:]))
    replicas = [tuple(int(n) for n in r) for r in body["replicas"]]
    partitions = int(body["partitions"])
    if len(replicas) != partitions or any(not r or len(set(r)) != len(r) for r in replicas):
        raise ValueError(f"PLACE_TOPIC: {partitions} partitions with replicas {replicas}")
    configs = {str(k): str(v) for k, v in body.get("configs", {}).items()}
    incarnations = _incarnations(body.get("incarnations"), "PLACE_TOPIC")
    return PlaceTopicCmd(
        str(body["name"]),
        partitions,
        uuid.UUID(hex=body["topic_id"]),
        configs,
        replicas,
        incarnations,
    )


def encode_add_partitions(
    name: str,
    topic_id: uuid.UUID,
    partitions: int,
    replicas: Sequence[Sequence[int]],
    incarnations: Mapping[int, int] | None = None,
) -> bytes:
    body: dict[str, Any] = {
        "name": name,
        "topic_id": topic_id.hex,
        "partitions": partitions,
        "replicas": [list(r) for r in replicas],
    }
    _put_incarnations(body, replicas, incarnations)
    return b"N" + json.dumps(body, separators=(",", ":")).encode()


def _int(value: Any, what: str) -> int:
    # bool is an int subclass: true/false in the JSON is malformed, not 1/0.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"ADD_PARTITIONS: {what} must be an integer, got {value!r}")
    return value


def decode_add_partitions(data: bytes) -> AddPartitionsCmd:
    """Strict: anything but the exact shape above is a ValueError (the apply logs it and
    changes nothing)."""
    if not data or data[0] != ADD_PARTITIONS:
        raise ValueError("ADD_PARTITIONS: wrong tag")
    try:
        body = json.loads(bytes(data[1:]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"ADD_PARTITIONS: unreadable JSON: {exc}") from None
    keys = {"name", "topic_id", "partitions", "replicas"}
    if not isinstance(body, dict) or not keys <= set(body) <= keys | {"incarnations"}:
        raise ValueError(f"ADD_PARTITIONS: expected the keys {sorted(keys)}")
    name, tid, raw = body["name"], body["topic_id"], body["replicas"]
    if not isinstance(name, str) or not name:
        raise ValueError(f"ADD_PARTITIONS: bad topic name {name!r}")
    if not isinstance(tid, str) or len(tid) != 32:
        raise ValueError(f"ADD_PARTITIONS: bad topic id {tid!r}")
    topic_id = uuid.UUID(hex=tid)  # ValueError if not hex
    partitions = _int(body["partitions"], "partitions")
    if not isinstance(raw, list) or not raw:
        raise ValueError("ADD_PARTITIONS: replicas must be a non-empty list")
    replicas: list[tuple[int, ...]] = []
    for r in raw:
        if not isinstance(r, list) or not r:
            raise ValueError(f"ADD_PARTITIONS: a replica list must be non-empty, got {r!r}")
        nodes = tuple(_int(n, "a node id") for n in r)
        if min(nodes) < 1 or len(set(nodes)) != len(nodes):
            raise ValueError(f"ADD_PARTITIONS: replica list {list(nodes)} (ids >= 1, once each)")
        replicas.append(nodes)
    if len({len(r) for r in replicas}) != 1:
        raise ValueError(f"ADD_PARTITIONS: replica lists of different lengths {replicas}")
    if not len(replicas) < partitions <= MAX_PARTITIONS:
        raise ValueError(
            f"ADD_PARTITIONS: {len(replicas)} new partition(s) cannot make {partitions}"
        )
    incarnations = _incarnations(body.get("incarnations"), "ADD_PARTITIONS")
    return AddPartitionsCmd(name, topic_id, partitions, replicas, incarnations)


def _node_list(raw: Any, what: str) -> tuple[int, ...]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{what} must be a non-empty list of node ids")
    nodes = tuple(_int(n, "a node id") for n in raw)
    if min(nodes) < 1 or len(set(nodes)) != len(nodes):
        raise ValueError(f"{what} {list(nodes)}: node ids >= 1, each once")
    return nodes


def _move_body(data: bytes, tag: int, keys: set[str]) -> dict[str, Any]:
    name = "MOVE_REPLICAS" if tag == MOVE_REPLICAS else "MOVE_DONE"
    if not data or data[0] != tag:
        raise ValueError(f"{name}: wrong tag")
    try:
        body = json.loads(bytes(data[1:]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{name}: unreadable JSON: {exc}") from None
    if not isinstance(body, dict) or set(body) != keys:
        raise ValueError(f"{name}: expected the keys {sorted(keys)}")
    if _int(body["group"], "group") < FIRST_DATA_GROUP:
        raise ValueError(f"{name}: group {body['group']} is not a data group")
    return body


def encode_move(group: int, replicas: Sequence[int], target: Sequence[int]) -> bytes:
    body = {"group": group, "replicas": list(replicas), "target": list(target)}
    return b"V" + json.dumps(body, separators=(",", ":")).encode()


def decode_move(data: bytes) -> MoveCmd:
    """Strict, like decode_add_partitions: a ValueError for anything else."""
    body = _move_body(data, MOVE_REPLICAS, {"group", "replicas", "target"})
    return MoveCmd(
        body["group"],
        _node_list(body["replicas"], "MOVE_REPLICAS: replicas"),
        _node_list(body["target"], "MOVE_REPLICAS: target"),
    )


def encode_move_done(group: int, target: Sequence[int]) -> bytes:
    body = {"group": group, "target": list(target)}
    return b"F" + json.dumps(body, separators=(",", ":")).encode()


def decode_move_done(data: bytes) -> MoveDoneCmd:
    body = _move_body(data, MOVE_DONE, {"group", "target"})
    return MoveDoneCmd(body["group"], _node_list(body["target"], "MOVE_DONE: target"))


class PlacementTable:
    """group id -> GroupPlacement, and (topic id hex, partition) -> group id."""

    def __init__(self) -> None:
        self.groups: dict[int, GroupPlacement] = {}
        self.by_part: dict[tuple[str, int], int] = {}
        self.next_group_id = FIRST_DATA_GROUP
        self.version = 0  # rises with every change (watchers compare it)

    def place(
        self,
        topic_id: str,
        replicas: Sequence[Sequence[int]],
        first: int = 0,
        incarnations: Mapping[int, int] | None = None,
    ) -> list[int]:
        """Allocate one group per partition first, first + 1, ... (in order) -> their
        ids, each with its replicas' incarnations. A partition is in at most one group:
        if one of them is placed already, ValueError and nothing changes."""
        incs = incarnations or {}
        taken = [p for p in range(first, first + len(replicas)) if (topic_id, p) in self.by_part]
        if taken:
            raise ValueError(f"partitions {taken} of {topic_id} are already placed")
        out = []
        for p, r in enumerate(replicas, start=first):
            gid = self.next_group_id
            self.next_group_id += 1
            sealed = tuple((n, incs[n]) for n in sorted(r) if incs.get(n))
            self.groups[gid] = GroupPlacement(gid, topic_id, p, tuple(r), incarnations=sealed)
            self.by_part[(topic_id, p)] = gid
            out.append(gid)
        self.version += 1
        return out

    def drop_topic(self, topic_id: str) -> list[int]:
        """Forget the topic's groups -> their ids (their data is deleted by each node)."""
        gone = [g.group for g in self.groups.values() if g.topic_id == topic_id]
        for gid in gone:
            g = self.groups.pop(gid)
            self.by_part.pop((g.topic_id, g.partition), None)
        if gone:
            self.version += 1
        return gone

    def move(self, c: MoveCmd) -> str | None:
        """Apply MOVE_REPLICAS -> None, or why it changed nothing."""
        g = self.groups.get(c.group)
        if g is None:
            return f"group {c.group} does not exist"
        if g.replicas != c.replicas:
            return f"group {c.group}'s replicas are {list(g.replicas)}, not {list(c.replicas)}"
        if c.target == g.replicas and not g.target:
            return None  # nothing pending: no move, no change
        if c.target == g.target:
            return None  # the same move again
        dropped = (*g.leaving, *g.adding)
        leaving = tuple(dict.fromkeys(n for n in dropped if n not in c.target))
        self.groups[c.group] = g._replace(target=c.target, leaving=leaving)
        self.version += 1
        return None

    def move_done(self, c: MoveDoneCmd) -> str | None:
        """Apply MOVE_DONE -> None, or why it changed nothing."""
        g = self.groups.get(c.group)
        if g is None:
            return f"group {c.group} does not exist"
        if not g.target or g.target != c.target:
            return f"group {c.group}'s move target is {list(g.target)}, not {list(c.target)}"
        self.groups[c.group] = g._replace(replicas=c.target, target=(), leaving=())
        self.version += 1
        return None

    def group_of(self, topic_id: str, partition: int) -> GroupPlacement | None:
        gid = self.by_part.get((topic_id, partition))
        return None if gid is None else self.groups[gid]

    def of_topic(self, topic_id: str) -> list[GroupPlacement]:
        return sorted(
            (g for g in self.groups.values() if g.topic_id == topic_id),
            key=lambda g: g.partition,
        )

    def __iter__(self) -> Iterator[GroupPlacement]:
        return iter(self.groups.values())

    def __len__(self) -> int:
        return len(self.groups)

    def assignments(self) -> list[tuple[int, ...]]:
        """Every group's replica list (the placer's existing load)."""
        return [g.replicas for g in self.groups.values()]

    # ------------------------------------------------------------ snapshots

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "next": self.next_group_id,
            # a fifth item (target) only while a move is pending, a sixth (leaving)
            # only while it has one (older snapshots have four)
            "groups": [
                [g.group, g.topic_id, g.partition, list(g.replicas)]
                + ([list(g.target)] if g.target else [])
                + ([list(g.leaving)] if g.leaving else [])
                for g in self
            ],
        }
        sealed = {str(g.group): [list(p) for p in g.incarnations] for g in self if g.incarnations}
        if sealed:  # absent in older snapshots: those groups were founded
            out["incarnations"] = sealed
        return out

    @classmethod
    def from_json(cls, state: dict[str, Any] | None) -> PlacementTable:
        """A snapshot's table; None (a snapshot from before partition groups): empty."""
        table = cls()
        if not state:
            return table
        table.next_group_id = int(state["next"])
        sealed = state.get("incarnations", {})
        for gid, tid, p, replicas, *rest in state["groups"]:
            target = tuple(rest[0]) if rest else ()
            leaving = tuple(rest[1]) if len(rest) > 1 else ()
            incs = tuple((int(n), int(i)) for n, i in sealed.get(str(gid), ()))
            table.groups[gid] = GroupPlacement(gid, tid, p, tuple(replicas), target, leaving, incs)
            table.by_part[(tid, p)] = gid
        table.version = 1
        return table
