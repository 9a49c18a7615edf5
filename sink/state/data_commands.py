"""Commands of a data group: they name partitions by topic id, never by topic name.

A data group (sink/state/data_group.py) does not host the topic table, so everything
its apply needs is in its own log: which partitions it hosts and their topics'
configs come from the controller through SERVE / DROP / CONFIGS entries, and every
write names the (topic id, partition) it writes to. A name can be deleted and
re-created; an id never comes back, so an entry proposed for a deleted topic can never
land in its successor. The tags are distinct from the single group's (commands.py's
table), so no entry can be read as another command in either machine; SinkStateMachine
applies the id-based writes too.

    PRODUCE_TO      b"p" | 16-byte topic id | i32 partition | i64 producer id |
                    i16 epoch | i32 base sequence | RecordBatch v2 bytes
                    (fixed 35-byte header: the batch starts at PRODUCE_TO_HEADER)
    DELETE_RECORDS_AT b"r" | 16-byte topic id | i32 partition | i64 offset (-1: the HW)
    PIPELINE_COMMIT b"c" | u16 pipeline len | pipeline | u32 n |
                    n x (16-byte topic id | i32 partition | i64 next offset)
    SERVE           b"v" | JSON {"parts": [[topic id hex, partition, name]],
                                 "configs": {topic id hex: {config: value}}}
                    the group hosts these partitions from now on (idempotent: a
                    hosted partition keeps its data) with these topics' overrides
    DROP            b"d" | JSON {"parts": [[topic id hex, partition]]}
                    the group forgets these partitions (topic deleted; idempotent)
    CONFIGS         b"k" | JSON {"configs": {topic id hex: {config: value}}}
                    the topics' whole override sets (the controller's AlterConfigs)
    EXPIRE_PRODUCERS b"X" as in admin_commands.py (producer state is per group)

JSON where entries are small and rare (as sink/topics/state.py), struct packing on the
produce path.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Mapping, Sequence
from typing import NamedTuple

PRODUCE_TO = 0x70  # "p"
DELETE_RECORDS_AT = 0x72  # "r"
PIPELINE_COMMIT = 0x63  # "c"
SERVE = 0x76  # "v"
DROP = 0x64  # "d"
CONFIGS = 0x6B  # "k"

_PRODUCE_HEAD = struct.Struct(">16siqhi")
PRODUCE_TO_HEADER = 1 + _PRODUCE_HEAD.size  # where the RecordBatch starts
_DELETE = struct.Struct(">16siq")
_H = struct.Struct(">H")
_U32 = struct.Struct(">I")


class ProduceToCmd(NamedTuple):
    topic_id: uuid.UUID
    partition: int
    producer_id: int
    producer_epoch: int
    base_sequence: int


class DeleteRecordsAtCmd(NamedTuple):
    topic_id: uuid.UUID
    partition: int
    offset: int


class PipelineCommitCmd(NamedTuple):
    pipeline: str
    offsets: list[tuple[uuid.UUID, int, int]]  # (topic id, partition, next offset to read)


class ServeCmd(NamedTuple):
    parts: list[tuple[uuid.UUID, int, str]]  # (topic id, partition, topic name)
    configs: dict[uuid.UUID, dict[str, str]]


def encode_produce_to(
    topic_id: uuid.UUID,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    batch: bytes | memoryview,
) -> bytes:
    head = _PRODUCE_HEAD.pack(topic_id.bytes, partition, producer_id, producer_epoch, base_sequence)
    return b"".join((b"p", head, batch))


def decode_produce_to(data: bytes) -> ProduceToCmd:
    if len(data) < PRODUCE_TO_HEADER:
        raise ValueError(f"PRODUCE_TO entry of {len(data)} bytes")
    raw, partition, pid, epoch, seq = _PRODUCE_HEAD.unpack_from(data, 1)
    return ProduceToCmd(uuid.UUID(bytes=raw), partition, pid, epoch, seq)


def encode_delete_records_at(topic_id: uuid.UUID, partition: int, offset: int) -> bytes:
    return b"r" + _DELETE.pack(topic_id.bytes, partition, offset)


def decode_delete_records_at(data: bytes) -> DeleteRecordsAtCmd:
    if len(data) != 1 + _DELETE.size:
        raise ValueError(f"DELETE_RECORDS_AT entry of {len(data)} bytes")
    raw, partition, offset = _DELETE.unpack_from(data, 1)
    return DeleteRecordsAtCmd(uuid.UUID(bytes=raw), partition, offset)


def encode_pipeline_commit(pipeline: str, offsets: Sequence[tuple[uuid.UUID, int, int]]) -> bytes:
    name = pipeline.encode()
    out = [b"c", _H.pack(len(name)), name, _U32.pack(len(offsets))]
    out += [_DELETE.pack(t.bytes, p, o) for t, p, o in offsets]
    return b"".join(out)


def decode_pipeline_commit(data: bytes) -> PipelineCommitCmd:
    (n,) = _H.unpack_from(data, 1)
    pipeline = bytes(data[3 : 3 + n]).decode()
    (count,) = _U32.unpack_from(data, 3 + n)
    pos = 7 + n
    if pos + count * _DELETE.size != len(data):
        raise ValueError(f"PIPELINE_COMMIT entry of {len(data)} bytes does not hold {count}")
    offsets = []
    for i in range(count):
        raw, partition, offset = _DELETE.unpack_from(data, pos + i * _DELETE.size)
        offsets.append((uuid.UUID(bytes=raw), partition, offset))
    return PipelineCommitCmd(pipeline, offsets)


def _configs_json(configs: Mapping[uuid.UUID, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    return {t.hex: dict(c) for t, c in configs.items()}


def _configs_of(d: Mapping[str, Mapping[str, str]]) -> dict[uuid.UUID, dict[str, str]]:
    return {uuid.UUID(hex=t): {str(k): str(v) for k, v in c.items()} for t, c in d.items()}


def encode_serve(
    parts: Sequence[tuple[uuid.UUID, int, str]],
    configs: Mapping[uuid.UUID, Mapping[str, str]],
) -> bytes:
    body = {"parts": [[t.hex, p, name] for t, p, name in parts], "configs": _configs_json(configs)}
    return b"v" + json.dumps(body, separators=(",", ":")).encode()


def decode_serve(data: bytes) -> ServeCmd:
    d = json.loads(data[1:])
    parts = [(uuid.UUID(hex=t), int(p), str(name)) for t, p, name in d["parts"]]
    return ServeCmd(parts, _configs_of(d.get("configs", {})))


def encode_drop(parts: Sequence[tuple[uuid.UUID, int]]) -> bytes:
    body = {"parts": [[t.hex, p] for t, p in parts]}
    return b"d" + json.dumps(body, separators=(",", ":")).encode()


def decode_drop(data: bytes) -> list[tuple[uuid.UUID, int]]:
    return [(uuid.UUID(hex=t), int(p)) for t, p in json.loads(data[1:])["parts"]]


def encode_configs(configs: Mapping[uuid.UUID, Mapping[str, str]]) -> bytes:
    return b"k" + json.dumps({"configs": _configs_json(configs)}, separators=(",", ":")).encode()


def decode_configs(data: bytes) -> dict[uuid.UUID, dict[str, str]]:
    return _configs_of(json.loads(data[1:])["configs"])
