"""What the log keeps of a consumer group: each completed generation, and deletions.

    GROUP_GENERATION  b"G" | u8 format (0) | str group | nstr protocol_type |
                      i32 generation | nstr protocol_name | nstr leader | u32 n |
                      n x member
      member          str member_id | nstr instance_id | str client_id |
                      str client_host | i32 session_timeout_ms |
                      i32 rebalance_timeout_ms | bytes subscription | bytes assignment
    DELETE_GROUPS     b"g" | u32 n | n x str group
    str: u16 length + UTF-8; nstr: i16 length (-1: null) + UTF-8; bytes: u32 length + bytes.

As Kafka's GroupMetadata record: the group's generation, chosen protocol, leader and
members, each with the metadata of the chosen protocol only and its assignment. A
group with no members (it went Empty) is recorded too, with its new generation.
Heartbeats, deadlines and in-progress rebalances are never logged: a new coordinator
rebuilds a group from its last completed generation. Pure (no sink imports): the state
machine (sink.state.groups) applies these, the coordinator (sink.groups) writes them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

GROUP_GENERATION = 0x47  # "G"
DELETE_GROUPS = 0x67  # "g"
_FORMAT = 0

_U16 = struct.Struct(">H")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    subscription: bytes
    """The member's metadata for the group's chosen protocol."""
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    group_id: str
    protocol_type: str | None
    generation: int
    protocol_name: str | None
    leader: str | None
    members: tuple[MemberRecord, ...]

    def to_json(self) -> list:
        return [
            self.group_id,
            self.protocol_type,
            self.generation,
            self.protocol_name,
            self.leader,
            [
                [
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    m.subscription.hex(),
                    m.assignment.hex(),
                ]
                for m in self.members
            ],
        ]

    @classmethod
    def from_json(cls, d: list) -> GroupRecord:
        gid, ptype, gen, pname, leader, members = d
        return cls(
            gid,
            ptype,
            gen,
            pname,
            leader,
            tuple(
                MemberRecord(mid, iid, cid, host, st, rt, bytes.fromhex(sub), bytes.fromhex(a))
                for mid, iid, cid, host, st, rt, sub, a in members
            ),
        )


class _Writer:
    def __init__(self, tag: bytes) -> None:
        self.parts: list[bytes] = [tag]

    def str(self, s: str) -> None:
        raw = s.encode()
        if len(raw) > 0xFFFF:
            raise ValueError(f"string of {len(raw)} bytes does not fit a group record")
        self.parts += [_U16.pack(len(raw)), raw]

    def nstr(self, s: str | None) -> None:
        if s is None:
            self.parts.append(_I16.pack(-1))
            return
        raw = s.encode()
        if len(raw) > 0x7FFF:
            raise ValueError(f"string of {len(raw)} bytes does not fit a group record")
        self.parts += [_I16.pack(len(raw)), raw]

    def i32(self, v: int) -> None:
        self.parts.append(_I32.pack(v))

    def bytes(self, b: bytes) -> None:
        self.parts += [_U32.pack(len(b)), b]

    def done(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("truncated group record")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def u8(self) -> int:
        return self._take(1)[0]

    def str(self) -> str:
        (n,) = _U16.unpack(self._take(2))
        return self._take(n).decode()

    def nstr(self) -> str | None:
        (n,) = _I16.unpack(self._take(2))
        return None if n == -1 else self._take(n).decode()

    def i32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def u32(self) -> int:
        return _U32.unpack(self._take(4))[0]

    def bytes(self) -> bytes:
        return self._take(self.u32())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ValueError(f"{len(self.data) - self.pos} trailing bytes in a group record")


def encode_generation(r: GroupRecord) -> bytes:
    w = _Writer(b"G")
    w.parts.append(bytes([_FORMAT]))
    w.str(r.group_id)
    w.nstr(r.protocol_type)
    w.i32(r.generation)
    w.nstr(r.protocol_name)
    w.nstr(r.leader)
    w.parts.append(_U32.pack(len(r.members)))
    for m in r.members:
        w.str(m.member_id)
        w.nstr(m.instance_id)
        w.str(m.client_id)
        w.str(m.client_host)
        w.i32(m.session_timeout_ms)
        w.i32(m.rebalance_timeout_ms)
        w.bytes(m.subscription)
        w.bytes(m.assignment)
    return w.done()


def decode_generation(data: bytes) -> GroupRecord:
    """ValueError if the entry cannot be read (the state machine logs and skips it)."""
    r = _Reader(data, 1)
    fmt = r.u8()
    if fmt != _FORMAT:
        raise ValueError(f"unknown group record format {fmt}")
    gid, ptype, gen, pname, leader = r.str(), r.nstr(), r.i32(), r.nstr(), r.nstr()
    members = []
    for _ in range(r.u32()):
        members.append(
            MemberRecord(
                r.str(), r.nstr(), r.str(), r.str(), r.i32(), r.i32(), r.bytes(), r.bytes()
            )
        )
    r.end()
    return GroupRecord(gid, ptype, gen, pname, leader, tuple(members))


def encode_delete(group_ids: list[str]) -> bytes:
    w = _Writer(b"g")
    w.parts.append(_U32.pack(len(group_ids)))
    for g in group_ids:
        w.str(g)
    return w.done()


def decode_delete(data: bytes) -> list[str]:
    r = _Reader(data, 1)
    out = [r.str() for _ in range(r.u32())]
    r.end()
    return out
