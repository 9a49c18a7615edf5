"""Raft messages <-> protobuf, with validation of everything that arrives.

A peer may be buggy, stale or hostile; nothing it sends may crash a node or
reach the core malformed. `decode_batch` checks the kind, the addressing
(known group, known sender, this node as destination), the ranges of the
numbers, the entry run (dense, after prev_index, known types, bounded in count
and bytes) and chunk sizes, and raises InvalidMessageError naming the problem.
Stale terms are legal messages: the core answers or ignores them.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass

from raftlog.core.messages import (
    IDENTITY_FLAGS,
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotResponse,
    Message,
    MsgType,
    ReadIndex,
    ReadIndexResponse,
    RequestVote,
    RequestVoteResponse,
    TimeoutNow,
)
from raftlog.entry import EntryType, LogEntry
from raftlog.transport import raft_pb2 as pb
from raftlog.transport.beats import (
    BEATS,
    BEATS_RESP,
    Beats,
    BeatsFormatError,
    BeatsResponse,
    pack_rows,
    unpack_rows,
)

_MAX_U63 = 2**63 - 1
_ENTRY_TYPES = {int(t): t for t in EntryType}


class InvalidMessageError(ValueError):
    """A received message that is not a well-formed Raft message for this node."""


class UnknownGroupError(InvalidMessageError):
    """A well-addressed message for a Raft group this node does not (or no longer) host.

    Not a structural error: groups are created and deleted while peers still
    send, so the transport drops such a message alone (decode_batch_known).
    """

    def __init__(self, group_id: int) -> None:
        super().__init__(f"message for unknown group {group_id}")
        self.group_id = group_id


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """Bounds a received batch must respect (defaults match the transport's)."""

    max_entries: int = 65536
    max_entry_bytes: int = 64 * 1024 * 1024
    max_batch_bytes: int = 256 * 1024 * 1024
    max_messages: int = 4096


# ----------------------------------------------------------------- encoding


def _enc_append(m: AppendEntries, p: pb.RaftMessage) -> None:
    p.prev_index, p.prev_term, p.commit = m.prev_index, m.prev_term, m.commit
    if m.entries:
        p.entries.extend(
            pb.Entry(index=e.index, term=e.term, type=e.type, data=e.data) for e in m.entries
        )


def _enc_append_resp(m: AppendEntriesResponse, p: pb.RaftMessage) -> None:
    p.index, p.reject, p.reject_hint, p.log_term = m.index, m.reject, m.reject_hint, m.log_term


def _enc_vote(m: RequestVote, p: pb.RaftMessage) -> None:
    p.last_index, p.last_term, p.pre_vote, p.transfer = (
        m.last_index,
        m.last_term,
        m.pre_vote,
        m.transfer,
    )
    p.voter_incarnation = m.voter_incarnation
    p.candidate_admitted = m.candidate_admitted


def _enc_vote_resp(m: RequestVoteResponse, p: pb.RaftMessage) -> None:
    p.granted, p.pre_vote = m.granted, m.pre_vote


def _enc_heartbeat(m: Heartbeat, p: pb.RaftMessage) -> None:
    p.commit, p.context, p.quiesce = m.commit, m.context, m.quiesce


def _enc_heartbeat_resp(m: HeartbeatResponse, p: pb.RaftMessage) -> None:
    p.context, p.quiesce = m.context, m.quiesce


def _enc_snapshot(m: InstallSnapshot, p: pb.RaftMessage) -> None:
    p.index, p.snap_term, p.offset, p.data, p.done, p.meta_data = (
        m.index,
        m.snap_term,
        m.offset,
        m.data,
        m.done,
        m.meta_data,
    )


def _enc_snapshot_resp(m: InstallSnapshotResponse, p: pb.RaftMessage) -> None:
    p.index, p.next_offset = m.index, m.next_offset


def _enc_timeout_now(m: TimeoutNow, p: pb.RaftMessage) -> None:
    pass


def _enc_read_index(m: ReadIndex, p: pb.RaftMessage) -> None:
    p.read_context = m.context


def _enc_read_index_resp(m: ReadIndexResponse, p: pb.RaftMessage) -> None:
    p.index, p.read_context = m.index, m.context


def _enc_beats(m: Beats | BeatsResponse, p: pb.RaftMessage) -> None:
    p.data = pack_rows(m)
    p.node_nonce = m.node_nonce
    if m.type == BEATS:
        p.quiesce = m.quiesce


_ENCODERS: dict[int, Callable] = {
    BEATS: _enc_beats,
    BEATS_RESP: _enc_beats,
    MsgType.APPEND: _enc_append,
    MsgType.APPEND_RESP: _enc_append_resp,
    MsgType.VOTE: _enc_vote,
    MsgType.VOTE_RESP: _enc_vote_resp,
    MsgType.HEARTBEAT: _enc_heartbeat,
    MsgType.HEARTBEAT_RESP: _enc_heartbeat_resp,
    MsgType.SNAPSHOT: _enc_snapshot,
    MsgType.SNAPSHOT_RESP: _enc_snapshot_resp,
    MsgType.TIMEOUT_NOW: _enc_timeout_now,
    MsgType.READ_INDEX: _enc_read_index,
    MsgType.READ_INDEX_RESP: _enc_read_index_resp,
}


def encode_message(m: Message) -> pb.RaftMessage:
    p = pb.RaftMessage(
        type=m.type,
        group_id=m.group_id,
        src=m.src,
        dst=m.dst,
        term=m.term,
        incarnation=m.incarnation,
        identity=m.identity,
    )
    _ENCODERS[m.type](m, p)
    return p


def encode_batch(msgs: Iterable[Message]) -> pb.MessageBatch:
    return pb.MessageBatch(messages=[encode_message(m) for m in msgs])


# ----------------------------------------------------------------- decoding


def _check_u63(name: str, value: int) -> None:
    if value > _MAX_U63:
        raise InvalidMessageError(f"{name}={value} is out of range")


def _dec_entries(p: pb.RaftMessage, limits: DecodeLimits) -> list[LogEntry]:
    n = len(p.entries)
    if n > limits.max_entries:
        raise InvalidMessageError(f"{n} entries exceed the limit {limits.max_entries}")
    out: list[LogEntry] = []
    expect = p.prev_index + 1
    prev_term = p.prev_term
    for e in p.entries:
        if e.index != expect:
            raise InvalidMessageError(f"entry {e.index} does not follow {expect - 1}")
        if e.term < prev_term or e.term > p.term:
            raise InvalidMessageError(f"entry {e.index} has term {e.term} out of order")
        etype = _ENTRY_TYPES.get(e.type)
        if etype is None:
            raise InvalidMessageError(f"entry {e.index} has unknown type {e.type}")
        data = e.data  # each read of a bytes field copies it out of the message: read once
        if len(data) > limits.max_entry_bytes:
            raise InvalidMessageError(f"entry {e.index} has {len(data)} bytes, over the limit")
        out.append(LogEntry(e.index, e.term, etype, data))
        expect += 1
        prev_term = e.term
    return out


def _dec_append(p: pb.RaftMessage, h: dict, limits: DecodeLimits) -> Message:
    _check_u63("prev_index", p.prev_index)
    _check_u63("commit", p.commit)
    if p.prev_term > p.term:
        raise InvalidMessageError("prev_term is above the message term")
    return AppendEntries(
        **h,
        prev_index=p.prev_index,
        prev_term=p.prev_term,
        entries=_dec_entries(p, limits),
        commit=p.commit,
    )


def _dec_append_resp(p: pb.RaftMessage, h: dict, limits: DecodeLimits) -> Message:
    _check_u63("index", p.index)
    _check_u63("reject_hint", p.reject_hint)
    return AppendEntriesResponse(
        **h, index=p.index, reject=p.reject, reject_hint=p.reject_hint, log_term=p.log_term
    )


def _dec_vote(p: pb.RaftMessage, h: dict, limits: DecodeLimits) -> Message:
    _check_u63("last_index", p.last_index)
    _check_u63("voter_incarnation", p.voter_incarnation)
    return RequestVote(
        **h,
        last_index=p.last_index,
        last_term=p.last_term,
        pre_vote=p.pre_vote,
        transfer=p.transfer,
        voter_incarnation=p.voter_incarnation,
        candidate_admitted=p.candidate_admitted,
    )


def _dec_vote_resp(p: pb.RaftMessage, h: dict, limits: DecodeLimits) -> Message:
    return RequestVoteResponse(**h, granted=p.granted, pre_vote=p.pre_vote)


def _dec_heartbeat(p: pb.RaftMessage, h: dict, limits: DecodeLimits) -> Message:
    _check_u63("commit", p.commit)
    return Heartbeat(**h, commit=p.commit, context=p.context, quiesce=p.quiesce)


def _dec_heartbeat_resp(p: pb.RaftMessage, h: dict, limits: DecodeLimits) -> Message:
    return HeartbeatResponse(**h, context=p.context, quiesce=p.quiesce)


def _dec_snapshot(p: pb.RaftMessage, h: dict, limits: DecodeLimits) -> Message:
    _check_u63("index", p.index)
    _check_u63("offset", p.offset)
    if len(p.data) > limits.max_entry_bytes:
        raise InvalidMessageError(f"snapshot chunk of {len(p.data)} bytes is over the limit")
    return InstallSnapshot(
        **h,
        index=p.index,
        snap_term=p.snap_term,
        offset=p.offset,
        data=p.data,
        done=p.done,
        meta_data=p.meta_data,
    )


def _dec_snapshot_resp(p: pb.RaftMessage, h: dict, limits: DecodeLimits) -> Message:
    _check_u63("index", p.index)
    return InstallSnapshotResponse(**h, index=p.index, next_offset=p.next_offset)


def _dec_timeout_now(p: pb.RaftMessage, h: dict, limits: DecodeLimits) -> Message:
    return TimeoutNow(**h)


def _dec_read_index(p: pb.RaftMessage, h: dict, limits: DecodeLimits) -> Message:
    return ReadIndex(**h, context=p.read_context)


def _dec_read_index_resp(p: pb.RaftMessage, h: dict, limits: DecodeLimits) -> Message:
    _check_u63("index", p.index)
    return ReadIndexResponse(**h, index=p.index, context=p.read_context)


def _dec_beats(p: pb.RaftMessage, h: dict, limits: DecodeLimits) -> Message:
    try:
        rows = unpack_rows(p.type, p.data, p.dst)
    except BeatsFormatError as exc:
        raise InvalidMessageError(f"coalesced heartbeats: {exc}") from None
    _check_u63("node_nonce", p.node_nonce)
    if p.type == BEATS:
        return Beats(**h, rows=rows, node_nonce=p.node_nonce, quiesce=p.quiesce)
    if p.quiesce:
        raise InvalidMessageError("a coalesced heartbeat response flagged quiesce")
    return BeatsResponse(**h, rows=rows, node_nonce=p.node_nonce)


# Kinds that carry no term of their own: a follower's forwarded read, and the
# coalesced heartbeats (each row carries its group's term).
_TERMLESS = frozenset({MsgType.READ_INDEX, BEATS, BEATS_RESP})

_DECODERS: dict[int, Callable[[pb.RaftMessage, dict, DecodeLimits], Message]] = {
    BEATS: _dec_beats,
    BEATS_RESP: _dec_beats,
    MsgType.APPEND: _dec_append,
    MsgType.APPEND_RESP: _dec_append_resp,
    MsgType.VOTE: _dec_vote,
    MsgType.VOTE_RESP: _dec_vote_resp,
    MsgType.HEARTBEAT: _dec_heartbeat,
    MsgType.HEARTBEAT_RESP: _dec_heartbeat_resp,
    MsgType.SNAPSHOT: _dec_snapshot,
    MsgType.SNAPSHOT_RESP: _dec_snapshot_resp,
    MsgType.TIMEOUT_NOW: _dec_timeout_now,
    MsgType.READ_INDEX: _dec_read_index,
    MsgType.READ_INDEX_RESP: _dec_read_index_resp,
}


def decode_message(
    p: pb.RaftMessage,
    node_id: int,
    peers: Container[int],
    groups: Container[int],
    limits: DecodeLimits,
) -> Message:
    decoder = _DECODERS.get(p.type)
    if decoder is None:
        raise InvalidMessageError(f"unknown message type {p.type}")
    if p.dst != node_id:
        raise InvalidMessageError(f"message for node {p.dst} arrived at node {node_id}")
    if p.src not in peers or p.src == node_id:
        raise InvalidMessageError(f"message from unknown node {p.src}")
    if p.group_id not in groups:
        raise UnknownGroupError(p.group_id)
    _check_u63("term", p.term)
    if p.term == 0 and p.type not in _TERMLESS:
        raise InvalidMessageError(f"{MsgType(p.type).name} without a term")
    if p.term != 0 and p.type in (BEATS, BEATS_RESP):
        raise InvalidMessageError("coalesced heartbeats with a message term")
    _check_u63("incarnation", p.incarnation)
    if p.identity & ~IDENTITY_FLAGS:
        raise InvalidMessageError(f"unknown identity flags {p.identity:#x}")
    header = {
        "src": p.src,
        "dst": p.dst,
        "term": p.term,
        "group_id": p.group_id,
        "incarnation": p.incarnation,
        "identity": p.identity,
    }
    return decoder(p, header, limits)


def decode_batch(
    batch: pb.MessageBatch,
    node_id: int,
    peers: Container[int],
    groups: Container[int],
    limits: DecodeLimits | None = None,
) -> list[Message]:
    """All messages of batch, or InvalidMessageError (the batch is dropped whole)."""
    lim = limits or DecodeLimits()
    if len(batch.messages) > lim.max_messages:
        raise InvalidMessageError(f"{len(batch.messages)} messages in one batch exceed the limit")
    return [decode_message(p, node_id, peers, groups, lim) for p in batch.messages]


def decode_batch_known(
    batch: pb.MessageBatch,
    node_id: int,
    peers: Container[int],
    groups: Container[int],
    limits: DecodeLimits | None = None,
) -> tuple[list[Message], list[int]]:
    """(messages for known groups, group ids of the messages dropped as unknown).

    Like decode_batch, but a message for a group not in groups is dropped on
    its own instead of failing the batch; every other problem still raises
    InvalidMessageError for the whole batch (a peer that sends malformed
    messages is broken, one that names a deleted group is merely late).
    """
    lim = limits or DecodeLimits()
    if len(batch.messages) > lim.max_messages:
        raise InvalidMessageError(f"{len(batch.messages)} messages in one batch exceed the limit")
    out: list[Message] = []
    unknown: list[int] = []
    for p in batch.messages:
        try:
            out.append(decode_message(p, node_id, peers, groups, lim))
        except UnknownGroupError as exc:
            unknown.append(exc.group_id)
    return out, unknown
