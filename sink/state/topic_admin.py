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
  watermark (never moves back: a smaller offset answers the current start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from sink.kafka.protocol.errors import ErrorCode
from sink.state import admin_commands as acmd
from sink.state.partitions import PartitionLog

if TYPE_CHECKING:
    from sink.state.machine import SinkStateMachine, TopicInfo


class CreatePartitionsResult(NamedTuple):
    error: ErrorCode
    topic: TopicInfo | None


class DeleteRecordsResult(NamedTuple):
    error: ErrorCode
    low_watermark: int


def apply_delete_topic(fsm: SinkStateMachine, c: acmd.DeleteTopicCmd) -> ErrorCode:
    info = fsm._topics.get(c.name)
    if info is None or info.topic_id != c.topic_id:
        return ErrorCode.unknown_topic_or_partition
    del fsm._topics[c.name]
    for p in range(info.partitions):
        fsm._parts.pop((c.name, p), None)
        fsm.producers.drop_partition(c.name, p)
        fsm.epochs.drop(c.name, p)
    for offsets in fsm.pipelines.values():
        for key in [k for k in offsets if k[0] == c.name]:
            del offsets[key]
    # Nothing of the topic survives it: a topic re-created under the name starts with
    # the defaults, no retention rows hold back compaction, no group keeps its offsets.
    fsm.topic_configs.drop(c.name)
    fsm.retention.drop_topic(c.name)
    fsm.group_offsets.drop_topic(c.name)
    return ErrorCode.none


def apply_create_partitions(
    fsm: SinkStateMachine, c: acmd.CreatePartitionsCmd
) -> CreatePartitionsResult:
    info = fsm._topics.get(c.name)
    if info is None:
        return CreatePartitionsResult(ErrorCode.unknown_topic_or_partition, None)
    if c.count <= info.partitions:
        return CreatePartitionsResult(ErrorCode.invalid_partitions, info)
    for p in range(info.partitions, c.count):
        fsm._parts[(c.name, p)] = PartitionLog()
    new = info._replace(partitions=c.count)
    fsm._topics[c.name] = new
    return CreatePartitionsResult(ErrorCode.none, new)


def apply_delete_records(fsm: SinkStateMachine, c: acmd.DeleteRecordsCmd) -> DeleteRecordsResult:
    part = fsm._parts.get((c.topic, c.partition))
    if part is None:
        return DeleteRecordsResult(ErrorCode.unknown_topic_or_partition, -1)
    offset = part.next_offset if c.offset == -1 else c.offset
    if offset < 0 or offset > part.next_offset:
        return DeleteRecordsResult(ErrorCode.offset_out_of_range, part.log_start_offset)
    return DeleteRecordsResult(ErrorCode.none, part.advance_start(offset))
