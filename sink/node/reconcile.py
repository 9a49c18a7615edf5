"""The reconciler's decisions (pure): which data groups this node starts and removes,
and what a group's leader must propose so its machine serves what the controller placed.

The runtime (sink/node/data_groups.py) feeds it the controller's applied placement and
what runs here, and carries the decisions out; nothing here touches Raft or a disk.

Rules, and why:
- Start every group whose members (its replicas, and a pending move's new nodes) name
  this node and that does not run here.
- Remove (and delete the data of) a running or on-disk group only when the controller
  has allocated its id (id < next_group_id) and no longer places it here: ids only rise
  and are never reused (sink/state/placement_table.py), so such a group belongs to a
  deleted topic (or moved away) for good. A group on disk with an id the controller has
  not allocated yet (this node's controller replica lags, e.g. just after a restart) is
  left alone: deleting it would lose acknowledged records.
- A leader proposes SERVE until its machine hosts the partition, then CONFIGS while the
  machine's overrides differ from the controller's: both are idempotent, so a command
  proposed twice (a retry, a new leader) changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import NamedTuple, Protocol

from sink.state import data_commands as dcmd
from sink.state.placement_table import GroupPlacement


class Plan(NamedTuple):
    start: list[GroupPlacement]
    """Groups to start here (ascending id)."""
    remove: list[int]
    """Group ids to stop and delete here (ascending)."""


def plan(
    node_id: int,
    placement: Iterable[GroupPlacement],
    next_group_id: int,
    running: Iterable[int],
    on_disk: Iterable[int] = (),
) -> Plan:
    """What to start and remove so that the groups here are those placed here."""
    mine = {g.group: g for g in placement if node_id in g.members}
    here = set(running)
    start = [mine[gid] for gid in sorted(mine) if gid not in here]
    known = here | {gid for gid in on_disk if gid != 0}
    remove = sorted(gid for gid in known if gid not in mine and 0 < gid < next_group_id)
    return Plan(start, remove)


class ServedView(Protocol):
    """What the decision reads of a data group's machine (DataGroupMachine)."""

    def hosts(self, topic_id: uuid.UUID, partition: int) -> bool: ...


def serve_command(
    g: GroupPlacement,
    topic_name: str | None,
    overrides: Mapping[str, str] | None,
    machine: ServedView,
    machine_overrides: Mapping[str, str],
) -> bytes | None:
    """The command the group's leader proposes now (None: nothing to do).

    topic_name / overrides: the controller's view of the group's topic (None: the topic
    is gone, and the group is about to be removed: nothing to propose)."""
    if topic_name is None or overrides is None:
        return None
    tid = uuid.UUID(hex=g.topic_id)
    if not machine.hosts(tid, g.partition):
        return dcmd.encode_serve([(tid, g.partition, topic_name)], {tid: dict(overrides)})
    if dict(machine_overrides) != dict(overrides):
        return dcmd.encode_configs({tid: dict(overrides)})
    return None
