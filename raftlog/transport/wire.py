"""Hand-written protobuf encoding of MessageBatch for the send path.

Builds exactly the wire format of raft.proto (tests check it against the
generated code) without creating protobuf objects: payload bytes are copied
once, into the final joined buffer. The encoded form of each entry is kept in
a small cache keyed by (index, term) because a leader sends the same entries
to every follower.
"""

from __future__ import annotations

from collections import OrderedDict

from raftlog.core.messages import Message, MsgType
from raftlog.entry import LogEntry

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


_K = {f: (_key(f, 0), _key(f, 2)) for f in range(1, 27)}  # (varint key, length key)


class EntryEncoder:
    """Encodes a LogEntry as the parts of a length-prefixed `Entry` field
    (field 8 of RaftMessage): a cached header, then the payload object itself,
    so the payload is copied only by the final join of the batch."""

    def __init__(self, capacity: int = 16384) -> None:
        self._cache: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._capacity = capacity

    def parts(self, e: LogEntry) -> tuple[bytes, bytes, int]:
        """(header, payload, total length of both)."""
        key = (e.index, e.term)
        head = self._cache.get(key)
        data = e.data
        if head is None:
            fields = [_K[1][0], varint(e.index)]
            if e.term:
                fields += [_K[2][0], varint(e.term)]
            fields += [_K[3][0], varint(int(e.type))]
            if data:
                fields += [_K[4][1], varint(len(data))]
            inner = b"".join(fields)
            head = b"".join((_K[8][1], varint(len(inner) + len(data)), inner))
            cache = self._cache
            cache[key] = head
            if len(cache) > self._capacity:
                cache.popitem(last=False)
        return head, data, len(head) + len(data)


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
    tail: list[bytes] = []
    size = 0
    if t is MsgType.APPEND:
        _u(p, 6, m.prev_index)
        _u(p, 7, m.prev_term)
        for e in m.entries:
            head, data, n = entries.parts(e)
            tail.append(head)
            tail.append(data)
            size += n
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
    elif t is MsgType.VOTE_RESP:
        _u(p, 16, m.pre_vote)
        _u(p, 18, m.granted)
    elif t is MsgType.HEARTBEAT:
        _u(p, 9, m.commit)
        _u(p, 19, m.context)
    elif t is MsgType.HEARTBEAT_RESP:
        _u(p, 19, m.context)
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
