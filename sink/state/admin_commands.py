"""Commands of the topic admin APIs and of producer-state expiry (tags allocated to
them in sink/state/commands.py's table):

    DELETE_TOPIC       b"D" | u16 name len | name | 16-byte topic uuid
                       (applies only while the topic still has that id: a retried
                       delete never removes a topic re-created under the same name)
    CREATE_PARTITIONS  b"A" | u16 name len | name | i32 new partition count
    DELETE_RECORDS     b"R" | u16 topic len | topic | i32 partition | i64 offset
                       (-1: up to the high watermark)
    EXPIRE_PRODUCERS   b"X" | u32 n | n x (i64 producer id | i64 last log index)
                       (each producer's state goes only if it has not appended
                       since that index: a producer that came back meanwhile stays)
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

DELETE_TOPIC = 0x44  # "D"
CREATE_PARTITIONS = 0x41  # "A"
DELETE_RECORDS = 0x52  # "R"
EXPIRE_PRODUCERS = 0x58  # "X"
TAGS = (DELETE_TOPIC, CREATE_PARTITIONS, DELETE_RECORDS, EXPIRE_PRODUCERS)

_H = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_PART_OFFSET = struct.Struct(">iq")
_PID_INDEX = struct.Struct(">qq")


class DeleteTopicCmd(NamedTuple):
    name: str
    topic_id: uuid.UUID


class CreatePartitionsCmd(NamedTuple):
    name: str
    count: int


class DeleteRecordsCmd(NamedTuple):
    topic: str
    partition: int
    offset: int


def _name(tag: bytes, name: str) -> bytes:
    n = name.encode()
    return tag + _H.pack(len(n)) + n


def _read_name(data: bytes) -> tuple[str, int]:
    (n,) = _H.unpack_from(data, 1)
    return bytes(data[3 : 3 + n]).decode(), 3 + n


def encode_delete_topic(name: str, topic_id: uuid.UUID) -> bytes:
    return _name(b"D", name) + topic_id.bytes


def decode_delete_topic(data: bytes) -> DeleteTopicCmd:
    name, pos = _read_name(data)
    return DeleteTopicCmd(name, uuid.UUID(bytes=bytes(data[pos : pos + 16])))


def encode_create_partitions(name: str, count: int) -> bytes:
    return _name(b"A", name) + _I32.pack(count)


def decode_create_partitions(data: bytes) -> CreatePartitionsCmd:
    name, pos = _read_name(data)
    return CreatePartitionsCmd(name, _I32.unpack_from(data, pos)[0])


def encode_delete_records(topic: str, partition: int, offset: int) -> bytes:
    return _name(b"R", topic) + _PART_OFFSET.pack(partition, offset)


def decode_delete_records(data: bytes) -> DeleteRecordsCmd:
    topic, pos = _read_name(data)
    partition, offset = _PART_OFFSET.unpack_from(data, pos)
    return DeleteRecordsCmd(topic, partition, offset)


def encode_expire_producers(expired: list[tuple[int, int]]) -> bytes:
    return b"X" + _U32.pack(len(expired)) + b"".join(_PID_INDEX.pack(p, i) for p, i in expired)


def decode_expire_producers(data: bytes) -> list[tuple[int, int]]:
    (n,) = _U32.unpack_from(data, 1)
    if 5 + n * _PID_INDEX.size != len(data):
        raise ValueError(f"EXPIRE_PRODUCERS entry of {len(data)} bytes does not hold {n} ids")
    return [_PID_INDEX.unpack_from(data, 5 + i * _PID_INDEX.size) for i in range(n)]
