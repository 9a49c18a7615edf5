"""The ALTER_CLIENT_QUOTAS command: client quota changes through the Raft log.

    ALTER_QUOTAS  b"Q" | u16 n | n x entry
      entry       u8 pairs | pairs x (u8 type: 0 user, 1 client-id | u8 default |
                  u16 name len | name) | u8 ops | ops x (u16 key len | key |
                  u8 remove | f64 value)

Applied onto the state machine's QuotaTable on every node; the table is in the
snapshot. Every entry is validated again at apply time (sink.quotas): an entry that
cannot be read or is refused is skipped and logged, never a crashed node.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from sink.quotas import CLIENT_ID, USER, Alteration, alteration_of, entity_of

ALTER_QUOTAS = 0x51  # "Q"

_TYPES = (USER, CLIENT_ID)
_H = struct.Struct(">H")
_PAIR = struct.Struct(">BBH")
_OP_TAIL = struct.Struct(">Bd")


def encode_alter_quotas(alterations: Sequence[Alteration]) -> bytes:
    out = [b"Q", _H.pack(len(alterations))]
    for a in alterations:
        out.append(bytes([len(a.entity)]))
        for etype, name in a.entity:
            raw = (name or "").encode()
            out += [_PAIR.pack(_TYPES.index(etype), name is None, len(raw)), raw]
        out.append(bytes([len(a.ops)]))
        for op in a.ops:
            key = op.key.encode()
            out += [_H.pack(len(key)), key, _OP_TAIL.pack(op.remove, op.value)]
    return b"".join(out)


def decode_alter_quotas(data: bytes) -> list[Alteration]:
    """The alterations of an entry (ValueError / struct.error / QuotaError if unreadable)."""
    (n,) = _H.unpack_from(data, 1)
    pos = 3
    out = []
    for _ in range(n):
        pairs: list[tuple[str, str | None]] = []
        npairs = data[pos]
        pos += 1
        for _ in range(npairs):
            code, default, ln = _PAIR.unpack_from(data, pos)
            pos += _PAIR.size
            name = data[pos : pos + ln].decode()
            pos += ln
            pairs.append((_TYPES[code], None if default else name))
        ops = []
        nops = data[pos]
        pos += 1
        for _ in range(nops):
            (kl,) = _H.unpack_from(data, pos)
            key = data[pos + 2 : pos + 2 + kl].decode()
            remove, value = _OP_TAIL.unpack_from(data, pos + 2 + kl)
            pos += 2 + kl + _OP_TAIL.size
            ops.append((key, value, bool(remove)))
        out.append(alteration_of(entity_of(pairs), ops))
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} trailing bytes in an ALTER_QUOTAS entry")
    return out
