"""Binary encoding of the commands carried by Raft entries.

Every command starts with a one-byte tag. Encoding is explicit struct packing
(no pickle): entries outlive processes and versions.

    PRODUCE     b"P" | u16 topic len | topic | i32 partition | i64 producer id |
                i16 epoch | i32 base sequence | RecordBatch v2 bytes (as sent)
    CREATE      b"T" | u16 name len | name | i32 partitions | 16-byte topic uuid
    ALLOC_PID   b"I"
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

PRODUCE = 0x50  # "P"
CREATE_TOPIC = 0x54  # "T"
ALLOC_PID = 0x49  # "I"

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
    """Offset of the RecordBatch inside a PRODUCE entry (no full decode)."""
    return 3 + _H.unpack_from(data, 1)[0] + _PRODUCE_TAIL.size


def decode_create_topic(data: bytes) -> CreateTopicCmd:
    (n,) = _H.unpack_from(data, 1)
    name = data[3 : 3 + n].decode()
    partitions, raw = _CREATE_TAIL.unpack_from(data, 3 + n)
    return CreateTopicCmd(name, partitions, uuid.UUID(bytes=raw))
