"""The consumer-group offset commands: committed offsets through the Raft log.

    COMMIT_GROUP_OFFSETS  b"O" | u32 blocks | blocks x (u16 group len | group | u32 n |
                          n x offset)
      block               one OffsetCommit request: the leader puts the requests that
                          arrive together into one entry (a group may appear twice: the
                          blocks apply in order, each answered with its own codes)
      offset              u16 topic len | topic | i32 partition | i64 offset |
                          i32 leader epoch | i64 commit ms | i64 expire ms (-1: none) |
                          i32 metadata len (-1: null) | metadata (UTF-8)
    DELETE_GROUP_OFFSETS  b"o" | u8 reason | u32 groups | groups x group
      group               u16 group len | group | u32 n | n x (u16 topic len | topic |
                          i32 partition | i64 if_index)
      reason              0 OffsetDelete (a client asked), 1 expiry (the leader's timer)
      if_index            delete only if the offset was committed by the entry at this
                          Raft index (-1: whatever is there). Expiry names the commit it
                          saw, so a commit that lands between the leader's decision and
                          the apply of the deletion is never erased.

Timestamps are the proposing leader's wall clock, carried in the entry: applying is a
pure function of the log, so every node (and every replay) agrees on them.
Decoding raises ValueError on a malformed entry; the state machine logs and skips it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import NamedTuple

COMMIT_GROUP_OFFSETS = 0x4F  # "O"
DELETE_GROUP_OFFSETS = 0x6F  # "o"

REASON_DELETE = 0
REASON_EXPIRE = 1

_H = struct.Struct(">H")
_U32 = struct.Struct(">I")
_OFFSET_TAIL = struct.Struct(">iqiqqi")  # partition, offset, epoch, commit ms, expire ms, md len
_DELETE_TAIL = struct.Struct(">iq")  # partition, if_index


class OffsetCommitItem(NamedTuple):
    """One partition's commit as a client sent it (timestamps filled by the leader)."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_ms: int = -1
    expire_ms: int = -1


class CommitGroupOffsetsCmd(NamedTuple):
    blocks: list[tuple[str, list[OffsetCommitItem]]]
    """(group, items) per OffsetCommit request, in apply order."""


class DeleteGroupOffsetsCmd(NamedTuple):
    reason: int
    groups: dict[str, list[tuple[str, int, int]]]
    """group -> [(topic, partition, if_index)]"""


def _str(s: str) -> bytes:
    raw = s.encode()
    if len(raw) > 0xFFFF:
        raise ValueError(f"name of {len(raw)} bytes: at most 65535")
    return _H.pack(len(raw)) + raw


def encode_commit_group_offsets(group: str, items: Sequence[OffsetCommitItem]) -> bytes:
    """One request's commit as an entry of one block."""
    return encode_commit_batch([(group, items)])


def encode_commit_batch(blocks: Sequence[tuple[str, Sequence[OffsetCommitItem]]]) -> bytes:
    return join_commit_blocks([encode_commit_block(g, items) for g, items in blocks])


def join_commit_blocks(blocks: Sequence[bytes]) -> bytes:
    """An entry of blocks already encoded (encode_commit_block), applied in this order."""
    return b"".join((b"O", _U32.pack(len(blocks)), *blocks))


def encode_commit_block(group: str, items: Sequence[OffsetCommitItem]) -> bytes:
    """One request's (group, items), to be joined into an entry."""
    out = [_str(group), _U32.pack(len(items))]
    for it in items:
        md = None if it.metadata is None else it.metadata.encode()
        out += [
            _str(it.topic),
            _OFFSET_TAIL.pack(
                it.partition,
                it.offset,
                it.leader_epoch,
                it.commit_ms,
                it.expire_ms,
                -1 if md is None else len(md),
            ),
            md or b"",
        ]
    return b"".join(out)


def encode_delete_group_offsets(
    reason: int, groups: Mapping[str, Sequence[tuple[str, int, int]]]
) -> bytes:
    out = [b"o", bytes([reason]), _U32.pack(len(groups))]
    for group, parts in groups.items():
        out += [_str(group), _U32.pack(len(parts))]
        for topic, partition, if_index in parts:
            out += [_str(topic), _DELETE_TAIL.pack(partition, if_index)]
    return b"".join(out)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def take(self, s: struct.Struct) -> tuple:
        if self.pos + s.size > len(self.data):
            raise ValueError("truncated group offset entry")
        v = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return v

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("truncated group offset entry")
        v = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(v)

    def text(self) -> str:
        (n,) = self.take(_H)
        return self.raw(n).decode()

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ValueError("trailing bytes in group offset entry")


def decode_commit_group_offsets(data: bytes) -> CommitGroupOffsetsCmd:
    if not data or data[0] != COMMIT_GROUP_OFFSETS:
        raise ValueError("not a COMMIT_GROUP_OFFSETS entry")
    r = _Reader(data, 1)
    (nblocks,) = r.take(_U32)
    blocks = []
    for _ in range(nblocks):
        group = r.text()
        (n,) = r.take(_U32)
        items = []
        for _ in range(n):
            topic = r.text()
            partition, offset, epoch, commit_ms, expire_ms, md_len = r.take(_OFFSET_TAIL)
            metadata = None if md_len < 0 else r.raw(md_len).decode()
            items.append(
                OffsetCommitItem(topic, partition, offset, epoch, metadata, commit_ms, expire_ms)
            )
        blocks.append((group, items))
    r.end()
    return CommitGroupOffsetsCmd(blocks)


def decode_delete_group_offsets(data: bytes) -> DeleteGroupOffsetsCmd:
    if not data or data[0] != DELETE_GROUP_OFFSETS:
        raise ValueError("not a DELETE_GROUP_OFFSETS entry")
    r = _Reader(data, 1)
    (reason,) = r.take(struct.Struct(">B"))
    (ngroups,) = r.take(_U32)
    groups: dict[str, list[tuple[str, int, int]]] = {}
    for _ in range(ngroups):
        group = r.text()
        (n,) = r.take(_U32)
        parts = groups.setdefault(group, [])
        for _ in range(n):
            topic = r.text()
            partition, if_index = r.take(_DELETE_TAIL)
            parts.append((topic, partition, if_index))
    r.end()
    return DeleteGroupOffsetsCmd(reason, groups)
