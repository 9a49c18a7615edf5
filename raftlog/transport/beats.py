"""Coalesced heartbeats: one message per peer per tick carrying every group's beat.

A process hosting many Raft groups sends, per tick, one `Beats` message to each
peer instead of one Heartbeat per group (CockroachDB's coalesced heartbeats),
and the peer answers with one `BeatsResponse` holding every group's
HeartbeatResponse. On arrival the host expands them back into the core's own
Heartbeat / HeartbeatResponse messages, so each group's core applies its usual
rules unchanged: a beat changes a group's state only at that group's current
term (a stale term is answered so the stale leader steps down, and changes
nothing else) and only as a message from that group's leader; CheckQuorum
still counts, per group, the responses of that group.

Wire form: a RaftMessage of kind BEATS / BEATS_RESP, addressed to the reserved
HOST_GROUP_ID (never a Raft group), term-less, whose `data` field holds packed
little-endian u64 rows: (group, term, commit, context) per beat and
(group, term, context) per response. Decoding checks the row width, the count,
every group id and term, and refuses the message whole if one row is bad.

Node beats and quiescence (docs/raft-runtime.md, "Quiescence"): a host sends
each peer at least one Beats per tick, with no rows if no group has a beat for
it (the node beat), and every Beats/BeatsResponse carries the sending
process's start nonce (`node_nonce`, field 30). A Beats flagged `quiesce`
(field 31) holds only quiesce beats (coalesce keeps them apart from the rest).
A follower's answer to a quiesce beat (it does not quiesce: HeartbeatResponse
flagged quiesce, which wakes the leader) is not coalesced: it travels as
itself, so a BeatsResponse row is always a plain answer.
Both fields are absent in messages of senders that predate them and decode
as 0 / False: a plain beat from an unknown process, which changes nothing.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from raftlog.core.messages import Heartbeat, HeartbeatResponse, Message, MsgType

BEATS = 32
"""Message kind of a coalesced heartbeat (transport level; never reaches a core)."""
BEATS_RESP = 33
"""Message kind of a coalesced heartbeat response."""
HOST_GROUP_ID = 2**63 - 1
"""The group id coalesced messages travel under; a RaftHost refuses it as a group id."""
MAX_BEATS = 65536
"""Most rows in one coalesced message (a host with more groups sends several)."""

_MAX_U63 = 2**63 - 1
_BEAT_WIDTH = 4
_RESP_WIDTH = 3


class BeatsFormatError(ValueError):
    """A coalesced message whose rows are malformed (the transport refuses the batch)."""


@dataclass(slots=True, kw_only=True)
class Beats(Message):
    """Node -> peer: the heartbeats of many groups. `rows` is (group, term, commit, context)."""

    type: ClassVar[int] = BEATS  # type: ignore[assignment]
    rows: list[tuple[int, int, int, int]]
    node_nonce: int = 0
    """The sending process's start nonce (0: unknown, an older sender)."""
    quiesce: bool = False
    """Every row is a quiesce beat (Heartbeat.quiesce)."""


@dataclass(slots=True, kw_only=True)
class BeatsResponse(Message):
    """Peer -> node: the heartbeat responses of many groups, (group, term, context)."""

    type: ClassVar[int] = BEATS_RESP  # type: ignore[assignment]
    rows: list[tuple[int, int, int]]
    node_nonce: int = 0


COALESCED_KINDS = frozenset({BEATS, BEATS_RESP})


def _pack(rows: Iterable[tuple[int, ...]]) -> bytes:
    flat = array("Q")
    for row in rows:
        flat.extend(row)
    if sys.byteorder == "big":
        flat.byteswap()
    return flat.tobytes()


def pack_rows(m: Beats | BeatsResponse) -> bytes:
    """The `data` field of m's RaftMessage."""
    return _pack(m.rows)


def unpack_rows(kind: int, data: bytes, node_id: int) -> list[tuple[int, ...]]:
    """Rows of a received coalesced message, validated; BeatsFormatError if bad."""
    width = _BEAT_WIDTH if kind == BEATS else _RESP_WIDTH
    size = 8 * width
    if len(data) % size:
        raise BeatsFormatError(f"{len(data)} bytes are not whole rows of {size}")
    n = len(data) // size
    if n == 0:
        if kind == BEATS:
            return []  # a node beat: the peer's process is alive, no group has news
        raise BeatsFormatError("a coalesced response without rows")
    if n > MAX_BEATS:
        raise BeatsFormatError(f"{n} rows exceed the limit {MAX_BEATS}")
    flat = array("Q")
    flat.frombytes(data)
    if sys.byteorder == "big":
        flat.byteswap()
    if max(flat) > _MAX_U63:
        raise BeatsFormatError("a value is out of range")
    rows = [tuple(flat[i : i + width]) for i in range(0, len(flat), width)]
    seen: set[int] = set()
    for row in rows:
        group, term = row[0], row[1]
        if group == HOST_GROUP_ID:
            raise BeatsFormatError("a row names the reserved host group")
        if term == 0:
            raise BeatsFormatError(f"the row of group {group} has no term")
        if group in seen:
            raise BeatsFormatError(f"group {group} appears twice")
        seen.add(group)
    return rows


def coalesce(
    msgs: Iterable[Message], src: int, node_nonce: int = 0
) -> tuple[list[Message], list[Message]]:
    """(one Beats and/or one BeatsResponse per destination and sender identity,
    the other messages).

    Heartbeats and heartbeat responses of all groups are folded per destination;
    everything else is returned unchanged, in order. A group beats a peer at
    most once per flush: a later beat of the same group replaces the earlier one
    (the newest term and commit say all the older one did). The sender's
    identity (incarnation and flags) is per group storage and rides in the
    coalesced message's header, so groups whose identities differ (a group whose
    storage was replaced) go in separate messages; usually all share one.
    Quiesce beats travel in their own Beats (flagged quiesce); a group's newer
    plain beat in the same flush drops its quiesce beat and vice versa (the
    newest says what the group does now). Every message carries node_nonce.
    """
    beats: dict[tuple[int, int, int, bool], dict[int, tuple[int, int, int, int]]] = {}
    resps: dict[tuple[int, int, int], dict[int, tuple[int, int, int]]] = {}
    other: list[Message] = []
    for m in msgs:
        t = m.type
        if t is MsgType.HEARTBEAT:
            q = m.quiesce
            key = (m.dst, m.incarnation, m.identity, q)
            twin = beats.get((m.dst, m.incarnation, m.identity, not q))
            if twin is not None:
                twin.pop(m.group_id, None)
            beats.setdefault(key, {})[m.group_id] = (m.group_id, m.term, m.commit, m.context)
        elif t is MsgType.HEARTBEAT_RESP and not m.quiesce:
            key = (m.dst, m.incarnation, m.identity)
            resps.setdefault(key, {})[m.group_id] = (m.group_id, m.term, m.context)
        else:
            other.append(m)
    out: list[Message] = []
    for (dst, inc, ident, q), by_group in beats.items():
        rows = list(by_group.values())
        for k in range(0, len(rows), MAX_BEATS):
            out.append(
                Beats(
                    src=src,
                    dst=dst,
                    term=0,
                    group_id=HOST_GROUP_ID,
                    incarnation=inc,
                    identity=ident,
                    rows=rows[k : k + MAX_BEATS],
                    node_nonce=node_nonce,
                    quiesce=q,
                )
            )
    for (dst, inc, ident), by_group in resps.items():
        rows_r = list(by_group.values())
        for k in range(0, len(rows_r), MAX_BEATS):
            out.append(
                BeatsResponse(
                    src=src,
                    dst=dst,
                    term=0,
                    group_id=HOST_GROUP_ID,
                    incarnation=inc,
                    identity=ident,
                    rows=rows_r[k : k + MAX_BEATS],
                    node_nonce=node_nonce,
                )
            )
    return out, other


def coalescible(m: Message) -> bool:
    """m folds into a Beats / BeatsResponse: a heartbeat, or a plain answer to one
    (an answer flagged quiesce travels as itself and leaves at once: it wakes the
    leader)."""
    t = m.type
    return t is MsgType.HEARTBEAT or (t is MsgType.HEARTBEAT_RESP and not m.quiesce)  # type: ignore[attr-defined]


def expand(m: Beats | BeatsResponse) -> list[Message]:
    """The core messages a coalesced message stands for, one per row (each with
    the coalesced message's sender identity)."""
    src, dst, inc, ident = m.src, m.dst, m.incarnation, m.identity
    if m.type == BEATS:
        q = m.quiesce  # type: ignore[union-attr]
        return [
            Heartbeat(
                src=src,
                dst=dst,
                term=t,
                group_id=g,
                incarnation=inc,
                identity=ident,
                commit=c,
                context=x,
                quiesce=q,
            )
            for g, t, c, x in m.rows
        ]
    return [
        HeartbeatResponse(
            src=src, dst=dst, term=t, group_id=g, incarnation=inc, identity=ident, context=x
        )
        for g, t, x in m.rows
    ]
