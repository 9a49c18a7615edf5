"""Applying the topic admin commands (sink/state/admin_commands.py) to the sink state.

Pure functions of the applied state and the command, so every node (and a replay
from a snapshot) reaches the same result:

- delete topic: the topic, its partition indexes, its idempotent-producer state and
  every pipeline's offsets in it go. Its batches stay in the Raft log until retention
  compacts past them, but nothing holds them back any more (retention_floor_index
  only looks at existing partitions), so the space is given back. Produce entries of
  the topic applied later answer UNKNOWN_TOPIC_OR_PARTITION; a Fetch by name gets
  UNKNOWN_TOPIC_OR_PARTITION, by id UNKNOWN_TOPIC_ID.
- create partitions: only more (INVALID_PARTITIONS otherwise); the topic id stays.
- delete records: the partition's log start moves to the offset (-1: the high
  watermark); beyond the high watermark -> OFFSET_OUT_OF_RANGE; answers the low
  watermark (never moves back: a smaller offset answers the current start). That one
  is the data part's own command: PartitionData.apply_delete_records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from sink.kafka.protocol.errors import ErrorCode
from sink.state import admin_commands as acmd
from sink.state.partition_data import DeleteRecordsResult

if TYPE_CHECKING:
    from sink.state.machine import SinkStateMachine, TopicInfo

__all__ = ["CreatePartitionsResult", "DeleteRecordsResult"]


class CreatePartitionsResult(NamedTuple):
    error: ErrorCode
    topic: TopicInfo | None


def apply_delete_topic(fsm: SinkStateMachine, c: acmd.DeleteTopicCmd) -> ErrorCode:
    info = fsm.topic(c.name)
    if info is None or info.topic_id != c.topic_id:
        return ErrorCode.unknown_topic_or_partition
    tid = c.topic_id.hex
    # The data part first (it is keyed by the id), then the controller's tables.
    for p in range(info.partitions):
        fsm.data.drop_partition((tid, p))
    fsm._remove_topic(c.name)
    fsm.placement.drop_topic(tid)  # its data groups: each node deletes its replicas
    # Nothing of the topic survives it: a topic re-created under the name starts with
    # the defaults, no retention rows hold back compaction, no group keeps its offsets.
    fsm.topic_configs.drop(c.name)
    fsm.group_offsets.drop_topic(c.name)
    return ErrorCode.none


def apply_create_partitions(
    fsm: SinkStateMachine, c: acmd.CreatePartitionsCmd
) -> CreatePartitionsResult:
    info = fsm.topic(c.name)
    if info is None:
        return CreatePartitionsResult(ErrorCode.unknown_topic_or_partition, None)
    if fsm.placement.of_topic(info.topic_id.hex):
        # A placed topic (partition groups) grows only by ADD_PARTITIONS, which places
        # the new partitions' groups; this one-group entry would add partitions no group
        # hosts. Nothing proposes it for such a topic: refused if a node ever did.
        return CreatePartitionsResult(ErrorCode.invalid_request, info)
    if c.count <= info.partitions:
        return CreatePartitionsResult(ErrorCode.invalid_partitions, info)
    for p in range(info.partitions, c.count):
        fsm.data.add_partition((info.topic_id.hex, p))
    new = info._replace(partitions=c.count)
    fsm._add_topic(new)
    return CreatePartitionsResult(ErrorCode.none, new)
