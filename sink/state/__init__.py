"""The sink's replicated state machines (topics, offset indexes, producer state).

Public surface:
    SinkStateMachine   raftlog StateMachine + read side (topics, offsets, read): the
                       controller's state + one PartitionData (today's single group)
    DataGroupMachine   a data group's raftlog StateMachine (PartitionData + the
                       commands a data group receives; not wired into the node yet)
    PartitionData      the data-group state of a set of partitions, by topic id
    TopicInfo          name, partitions, topic_id
    ProduceResult      (error, base_offset, log_start_offset, duplicate) of a PRODUCE entry
    CreateTopicResult  (error, topic) of a CREATE entry
    OffsetOutOfRange   raised by read() outside [log_start_offset, high_watermark]
    commands           entry encodings
    data_commands      the data-group commands (partitions named by topic id)
    quota_command      the ALTER_QUOTAS entry (client quotas through the log)
"""

from sink.state import commands, data_commands, quota_command
from sink.state.data_group import DataGroupMachine
from sink.state.machine import (
    CreateTopicResult,
    OffsetOutOfRange,
    ProduceResult,
    SinkStateMachine,
    TopicInfo,
)
from sink.state.partition_data import PartitionData

__all__ = [
    "CreateTopicResult",
    "DataGroupMachine",
    "OffsetOutOfRange",
    "PartitionData",
    "ProduceResult",
    "SinkStateMachine",
    "TopicInfo",
    "commands",
    "data_commands",
    "quota_command",
]
