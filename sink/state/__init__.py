"""The sink's replicated state machine (topics, offset indexes, producer state).

Public surface:
    SinkStateMachine   raftlog StateMachine + read side (topics, offsets, read)
    TopicInfo          name, partitions, topic_id
    ProduceResult      (error, base_offset, log_start_offset, duplicate) of a PRODUCE entry
    CreateTopicResult  (error, topic) of a CREATE entry
    OffsetOutOfRange   raised by read() outside [log_start_offset, high_watermark]
    commands           entry encodings
    quota_command      the ALTER_QUOTAS entry (client quotas through the log)
"""

from sink.state import commands, quota_command
from sink.state.machine import (
    CreateTopicResult,
    OffsetOutOfRange,
    ProduceResult,
    SinkStateMachine,
    TopicInfo,
)

__all__ = [
    "CreateTopicResult",
    "OffsetOutOfRange",
    "ProduceResult",
    "SinkStateMachine",
    "TopicInfo",
    "commands",
    "quota_command",
]
