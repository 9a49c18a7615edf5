"""Hand-written protobuf encoding of MessageBatch for the send path.

Builds exactly the wire format of raft.proto (tests check it against the
generated code) without creating protobuf objects: payload bytes are copied
once, into the final joined buffer. Encoded runs of entries are kept in a
small cache because a leader sends the same entries to every follower.
"""

from __future__ import annotations

import struct
from collections import OrderedDict

from raftlog.core.messages import Message, MsgType
from raftlog.entry import LogEntry
from raftlog.transport.beats import BEATS, COALESCED_KINDS, pack_rows

_VARINT_CACHE = [bytes([i]) for i in range(128)]


def varint(n: int) -> bytes:
    if n < 128:
        return _VARINT_CACHE[n]
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return varint((field << 3) | wire)


_K = {f: (_key(f, 0), _key(f, 2)) for f in range(1, 41)}  # (varint key, length key)


_ENTRY_FIXED = struct.Struct("<BQBQBB")  # key 1 fixed64, key 2 fixed64, key 3 varint (type < 128)
_ENTRY_KEYS = (0x09, 0x11, 0x18)


EncodedRun = tuple[list[bytes], int]
"""A run of `Entry` fields: its parts, to be joined into a message, and their total size."""


class EntryEncoder:
    """Encodes runs of entries as consecutive `Entry` fields (field 8 of RaftMessage).

    A leader sends the same run of entries to every follower, so encoded runs
    are cached by (group, first index, last index, last term); the second
    follower's copy costs one lookup. Invariant: the group id is part of the
    key, because one transport (and so one cache) carries many Raft groups and
    two groups routinely have runs with equal indexes and terms: without it a
    follower would append another group's entries and diverge silently.
    Within a run each entry header is one struct.pack.

    A run is kept as its parts (headers and the entries' own payload objects) with
    their total size, not joined: the message batch that carries it is joined once
    anyway, so a payload is copied once per follower, not once more here.
    """

    def __init__(self, capacity: int = 256) -> None:
        self._cache: OrderedDict[tuple[int, int, int, int], EncodedRun] = OrderedDict()
        self._capacity = capacity

    def run(self, entries: list[LogEntry], group_id: int = 0) -> EncodedRun:
        first, last = entries[0], entries[-1]
        key = (group_id, first.index, last.index, last.term)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        parts: list[bytes] = []
        append = parts.append
        pack = _ENTRY_FIXED.pack
        k1, k2, k3 = _ENTRY_KEYS
        k8 = _K[8][1]
        k4 = _K[4][1]
        for e in entries:
            data = e.data
            head = pack(k1, e.index, k2, e.term, k3, int(e.type))
            if data:  # proto3 omits an empty bytes field
                nv = varint(len(data))
                append(k8)
                append(varint(len(head) + 1 + len(nv) + len(data)))
                append(head)
                append(k4)
                append(nv)
                append(data)
            else:
                append(k8)
                append(varint(len(head)))
                append(head)
        out = (parts, sum(map(len, parts)))
        cache = self._cache
        cache[key] = out
        if len(cache) > self._capacity:
            cache.popitem(last=False)
        return out


def _u(parts: list[bytes], field: int, value: int) -> None:
    if value:
        parts.append(_K[field][0])
        parts.append(varint(int(value)))


def _b(parts: list[bytes], field: int, value: bytes) -> None:
    if value:
        parts.append(_K[field][1])
        parts.append(varint(len(value)))
        parts.append(value)


def _message_parts(m: Message, entries: EntryEncoder, out: list[bytes]) -> None:
    """Append the parts of one length-prefixed RaftMessage (field 1 of MessageBatch) to out."""
    p: list[bytes] = []
    t = m.type
    _u(p, 1, t)
    _u(p, 2, m.group_id)
    _u(p, 3, m.src)
    _u(p, 4, m.dst)
    _u(p, 5, m.term)
    _u(p, 27, m.incarnation)
    _u(p, 28, m.identity)
    tail: list[bytes] = []
    size = 0
    if t is MsgType.APPEND:
        _u(p, 6, m.prev_index)
        _u(p, 7, m.prev_term)
        if m.entries:
            block, nbytes = entries.run(m.entries, m.group_id)
            tail.extend(block)
            size += nbytes
        _u(tail, 9, m.commit)
        if m.commit:
            size += len(tail[-1]) + len(tail[-2])
    elif t is MsgType.APPEND_RESP:
        _u(p, 10, m.index)
        _u(p, 11, m.reject)
        _u(p, 12, m.reject_hint)
        _u(p, 13, m.log_term)
    elif t is MsgType.VOTE:
        _u(p, 14, m.last_index)
        _u(p, 15, m.last_term)
        _u(p, 16, m.pre_vote)
        _u(p, 17, m.transfer)
        _u(p, 29, m.voter_incarnation)
        _u(p, 40, m.candidate_admitted)
    elif t is MsgType.VOTE_RESP:
        _u(p, 16, m.pre_vote)
        _u(p, 18, m.granted)
    elif t is MsgType.HEARTBEAT:
        _u(p, 9, m.commit)
        _u(p, 19, m.context)
        _u(p, 31, m.quiesce)
    elif t is MsgType.HEARTBEAT_RESP:
        _u(p, 19, m.context)
        _u(p, 31, m.quiesce)
    elif t is MsgType.SNAPSHOT:
        _u(p, 10, m.index)
        _u(p, 20, m.snap_term)
        _u(p, 21, m.offset)
        _b(p, 22, m.data)
        _u(p, 23, m.done)
        _b(p, 24, m.meta_data)
    elif t is MsgType.SNAPSHOT_RESP:
        _u(p, 10, m.index)
        _u(p, 25, m.next_offset)
    elif t is MsgType.READ_INDEX:
        _b(p, 26, m.context)
    elif t is MsgType.READ_INDEX_RESP:
        _u(p, 10, m.index)
        _b(p, 26, m.context)
    elif t in COALESCED_KINDS:
        _b(p, 22, pack_rows(m))
        _u(p, 30, m.node_nonce)
        if t == BEATS:
            _u(p, 31, m.quiesce)
    size += sum(len(x) for x in p)
    out.append(_K[1][1])
    out.append(varint(size))
    out.extend(p)
    out.extend(tail)


def encode_message_bytes(m: Message, entries: EntryEncoder) -> bytes:
    out: list[bytes] = []
    _message_parts(m, entries, out)
    return b"".join(out)


def encode_batch_bytes(msgs: list[Message], entries: EntryEncoder) -> bytes:
    """A serialized MessageBatch holding msgs; payloads are copied once, here."""
    out: list[bytes] = []
    for m in msgs:
        _message_parts(m, entries, out)
    return b"".join(out)
