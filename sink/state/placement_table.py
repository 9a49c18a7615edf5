"""The controller's placement table: which data group hosts each partition, on which nodes.

Written only by the controller command PLACE_TOPIC (tag b"W", "where"): a topic and
the replica list of each of its partitions in ONE entry, so a topic never exists
without its placement (partition groups, docs/partition-groups.md "Running with
partition groups"). Applied by SinkStateMachine (the controller group, group 0).

    PLACE_TOPIC  b"W" | JSON {"name": str, "partitions": int, "topic_id": hex,
                              "configs": {config: value} (may be empty),
                              "replicas": [[node, ...] per partition]}

Invariants (tests/unit/sink/test_placement_table.py):
- group ids are allocated at apply time, in partition order, from next_group_id,
  which only rises: an id below it that is absent from the table belongs to a
  deleted topic and never comes back (the reconciler deletes such a group's data
  without asking anyone);
- group 0 is the controller, never a data group (next_group_id starts at 1);
- one partition per data group (packing several is a later option);
- the table names only topics in the controller's topic table: DeleteTopics removes
  the topic's rows in the same apply.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

PLACE_TOPIC = 0x57  # "W"
FIRST_DATA_GROUP = 1


class PlaceTopicCmd(NamedTuple):
    name: str
    partitions: int
    topic_id: uuid.UUID
    configs: dict[str, str]
    replicas: list[tuple[int, ...]]


class GroupPlacement(NamedTuple):
    """One data group: the partition it hosts and its replicas (first = preferred)."""

    group: int
    topic_id: str  # hex
    partition: int
    replicas: tuple[int, ...]


def encode_place_topic(
    name: str,
    partitions: int,
    topic_id: uuid.UUID,
    configs: dict[str, str] | None,
    replicas: Sequence[Sequence[int]],
) -> bytes:
    body = {
        "name": name,
        "partitions": partitions,
        "topic_id": topic_id.hex,
        "configs": dict(configs or {}),
        "replicas": [list(r) for r in replicas],
    }
    return b"W" + json.dumps(body, separators=(",", ":")).encode()


def decode_place_topic(data: bytes) -> PlaceTopicCmd:
    body = json.loads(bytes(data[1:]))
    replicas = [tuple(int(n) for n in r) for r in body["replicas"]]
    partitions = int(body["partitions"])
    if len(replicas) != partitions or any(not r or len(set(r)) != len(r) for r in replicas):
        raise ValueError(f"PLACE_TOPIC: {partitions} partitions with replicas {replicas}")
    configs = {str(k): str(v) for k, v in body.get("configs", {}).items()}
    return PlaceTopicCmd(
        str(body["name"]), partitions, uuid.UUID(hex=body["topic_id"]), configs, replicas
    )


class PlacementTable:
    """group id -> GroupPlacement, and (topic id hex, partition) -> group id."""

    def __init__(self) -> None:
        self.groups: dict[int, GroupPlacement] = {}
        self.by_part: dict[tuple[str, int], int] = {}
        self.next_group_id = FIRST_DATA_GROUP
        self.version = 0  # rises with every change (watchers compare it)

    def place(self, topic_id: str, replicas: Sequence[Sequence[int]]) -> list[int]:
        """Allocate one group per partition (in order) -> their ids."""
        out = []
        for p, r in enumerate(replicas):
            gid = self.next_group_id
            self.next_group_id += 1
            self.groups[gid] = GroupPlacement(gid, topic_id, p, tuple(r))
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
        return {
            "next": self.next_group_id,
            "groups": [[g.group, g.topic_id, g.partition, list(g.replicas)] for g in self],
        }

    @classmethod
    def from_json(cls, state: dict[str, Any] | None) -> PlacementTable:
        """A snapshot's table; None (a snapshot from before partition groups): empty."""
        table = cls()
        if not state:
            return table
        table.next_group_id = int(state["next"])
        for gid, tid, p, replicas in state["groups"]:
            table.groups[gid] = GroupPlacement(gid, tid, p, tuple(replicas))
            table.by_part[(tid, p)] = gid
        table.version = 1
        return table
