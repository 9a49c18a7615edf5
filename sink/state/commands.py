"""Binary encoding of the commands carried by Raft entries.

Every command starts with a one-byte tag. Encoding is explicit struct packing
(no pickle): entries outlive processes and versions.

    PRODUCE     b"P" | u16 topic len | topic | i32 partition | i64 producer id |
                i16 epoch | i32 base sequence | RecordBatch v2 bytes (as sent)
    CREATE      b"T" | u16 name len | name | i32 partitions | 16-byte topic uuid
    ALLOC_PID   b"I"
    COMMIT      b"C" | u16 pipeline len | pipeline | u32 n |
                n x (u16 topic len | topic | i32 partition | i64 offset)
                offsets a consuming pipeline has durably processed (retention)
    ALTER_QUOTAS b"Q" | client quota changes (sink/state/quota_command.py)
    COMMIT_GROUP_OFFSETS b"O" / DELETE_GROUP_OFFSETS b"o" | consumer-group offsets
                (sink/state/offset_command.py)
    ALTER_CONFIGS b"K" | a topic's config changes (sink/topics/state.py)
    CREATE_TOPIC_WITH_CONFIGS b"U" | a topic and its configs in one entry (sink/topics/state.py)
    DELETE_TOPIC b"D", CREATE_PARTITIONS b"A", DELETE_RECORDS b"R",
    EXPIRE_PRODUCERS b"X"   topic admin and producer expiry (sink/state/admin_commands.py)
    ALTER_USERS b"S" | SASL users' SCRAM credentials (sink/state/users.py)
    ALTER_ACLS b"L" | ACL bindings created and deleted (sink/state/acls.py)
    p r c v d k  the data-group commands, by topic id (sink/state/data_commands.py);
                SinkStateMachine applies PRODUCE_TO, DELETE_RECORDS_AT and
                PIPELINE_COMMIT too
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from sink.state.data_commands import PRODUCE_TO, PRODUCE_TO_HEADER

PRODUCE = 0x50  # "P"
CREATE_TOPIC = 0x54  # "T"
ALLOC_PID = 0x49  # "I"
COMMIT_OFFSETS = 0x43  # "C"

_H = struct.Struct(">H")
_PRODUCE_TAIL = struct.Struct(">iqhi")
_CREATE_TAIL = struct.Struct(">i16s")


class ProduceCmd(NamedTuple):
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    batch_offset: int  # where the RecordBatch starts inside the entry's data


class CreateTopicCmd(NamedTuple):
    name: str
    partitions: int
    topic_id: uuid.UUID


def encode_produce(
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    batch: bytes | memoryview,
) -> bytes:
    t = topic.encode()
    return b"".join(
        (
            b"P",
            _H.pack(len(t)),
            t,
            _PRODUCE_TAIL.pack(partition, producer_id, producer_epoch, base_sequence),
            batch,
        )
    )


def encode_create_topic(name: str, partitions: int, topic_id: uuid.UUID) -> bytes:
    n = name.encode()
    return b"T" + _H.pack(len(n)) + n + _CREATE_TAIL.pack(partitions, topic_id.bytes)


def encode_alloc_pid() -> bytes:
    return b"I"


def decode_produce(data: bytes) -> ProduceCmd:
    (n,) = _H.unpack_from(data, 1)
    topic = data[3 : 3 + n].decode()
    partition, pid, epoch, seq = _PRODUCE_TAIL.unpack_from(data, 3 + n)
    return ProduceCmd(topic, partition, pid, epoch, seq, 3 + n + _PRODUCE_TAIL.size)


def produce_batch_offset(data: bytes) -> int:
    """Offset of the RecordBatch inside a PRODUCE (by name) or PRODUCE_TO (by topic id,
    sink/state/data_commands.py) entry, without a full decode."""
    if data[0] == PRODUCE_TO:
        return PRODUCE_TO_HEADER
    return 3 + _H.unpack_from(data, 1)[0] + _PRODUCE_TAIL.size


def decode_create_topic(data: bytes) -> CreateTopicCmd:
    (n,) = _H.unpack_from(data, 1)
    name = data[3 : 3 + n].decode()
    partitions, raw = _CREATE_TAIL.unpack_from(data, 3 + n)
    return CreateTopicCmd(name, partitions, uuid.UUID(bytes=raw))


_U32 = struct.Struct(">I")
_PART_OFFSET = struct.Struct(">iq")


class CommitOffsetsCmd(NamedTuple):
    pipeline: str
    offsets: list[tuple[str, int, int]]  # (topic, partition, next offset to read)


def encode_commit_offsets(pipeline: str, offsets: list[tuple[str, int, int]]) -> bytes:
    name = pipeline.encode()
    parts = [b"C", _H.pack(len(name)), name, _U32.pack(len(offsets))]
    for topic, partition, offset in offsets:
        t = topic.encode()
        parts += [_H.pack(len(t)), t, _PART_OFFSET.pack(partition, offset)]
    return b"".join(parts)


def decode_commit_offsets(data: bytes) -> CommitOffsetsCmd:
    (n,) = _H.unpack_from(data, 1)
    pipeline = data[3 : 3 + n].decode()
    pos = 3 + n
    (count,) = _U32.unpack_from(data, pos)
    pos += 4
    out = []
    for _ in range(count):
        (tl,) = _H.unpack_from(data, pos)
        topic = data[pos + 2 : pos + 2 + tl].decode()
        partition, offset = _PART_OFFSET.unpack_from(data, pos + 2 + tl)
        pos += 2 + tl + _PART_OFFSET.size
        out.append((topic, partition, offset))
    return CommitOffsetsCmd(pipeline, out)
