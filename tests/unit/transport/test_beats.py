"""Coalesced heartbeats: folding per peer, the wire form both ways, and hostile rows."""

from __future__ import annotations

import struct

import pytest

from raftlog.core.messages import AppendEntries, Heartbeat, HeartbeatResponse
from raftlog.transport import (
    BEATS,
    BEATS_RESP,
    HOST_GROUP_ID,
    Beats,
    BeatsResponse,
    InvalidMessageError,
    coalesce,
    decode_batch,
    encode_batch,
    expand,
)
from raftlog.transport import raft_pb2 as pb
from raftlog.transport.wire import EntryEncoder, encode_batch_bytes

GROUPS = {HOST_GROUP_ID}


def _hb(g, dst, term=3, commit=7, context=0):
    return Heartbeat(src=1, dst=dst, term=term, group_id=g, commit=commit, context=context)


def test_coalesce_folds_every_group_per_destination():
    msgs = [_hb(g, dst) for g in (1, 2, 3) for dst in (2, 3)]
    msgs.append(HeartbeatResponse(src=1, dst=2, term=4, group_id=9, context=5))
    app = AppendEntries(src=1, dst=2, term=3, group_id=1, prev_index=0, prev_term=0)
    msgs.append(app)
    out, other = coalesce(msgs, src=1)
    assert other == [app]
    beats = [m for m in out if isinstance(m, Beats)]
    resps = [m for m in out if isinstance(m, BeatsResponse)]
    assert sorted(m.dst for m in beats) == [2, 3] and [m.dst for m in resps] == [2]
    assert all(m.group_id == HOST_GROUP_ID and m.term == 0 for m in out)
    assert beats[0].rows == [(1, 3, 7, 0), (2, 3, 7, 0), (3, 3, 7, 0)]
    assert expand(resps[0]) == [HeartbeatResponse(src=1, dst=2, term=4, group_id=9, context=5)]
    assert expand(beats[0]) == [_hb(g, beats[0].dst) for g in (1, 2, 3)]


def test_a_later_beat_of_a_group_replaces_the_earlier():
    out, _ = coalesce([_hb(1, 2, term=3, commit=5), _hb(1, 2, term=3, commit=9)], src=1)
    assert out[0].rows == [(1, 3, 9, 0)]


@pytest.mark.parametrize("path", ["protobuf", "wire"])
def test_round_trip_through_both_encoders(path):
    out, _ = coalesce(
        [_hb(g, 2, term=g, commit=2**40 + g, context=g) for g in range(1, 200)]
        + [HeartbeatResponse(src=1, dst=2, term=5, group_id=6, context=1)],
        src=1,
    )
    if path == "protobuf":
        batch = encode_batch(out)
    else:
        batch = pb.MessageBatch.FromString(encode_batch_bytes(out, EntryEncoder()))
    got = decode_batch(batch, 2, {1}, GROUPS)
    assert got == out


def _raw(rows_bytes: bytes, kind: int = BEATS, term: int = 0, group: int = HOST_GROUP_ID):
    return pb.MessageBatch(
        messages=[
            pb.RaftMessage(type=kind, group_id=group, src=1, dst=2, term=term, data=rows_bytes)
        ]
    )


def _rows(*rows):
    return b"".join(struct.pack("<4Q", *r) for r in rows)


@pytest.mark.parametrize(
    ("data", "term", "why"),
    [
        (b"\x01" * 31, 0, "whole rows"),
        (_rows((1, 0, 0, 0)), 0, "no term"),
        (_rows((HOST_GROUP_ID, 3, 0, 0)), 0, "reserved host group"),
        (_rows((1, 3, 0, 0), (1, 3, 0, 0)), 0, "twice"),
        (_rows((1, 2**63, 0, 0)), 0, "out of range"),
        (_rows((1, 3, 0, 0)), 5, "with a message term"),
    ],
)
def test_malformed_coalesced_messages_are_refused(data, term, why):
    with pytest.raises(InvalidMessageError, match=why):
        decode_batch(_raw(data, term=term), 2, {1}, GROUPS)


def test_an_empty_response_is_refused_but_an_empty_beats_is_a_node_beat():
    with pytest.raises(InvalidMessageError, match="response without rows"):
        decode_batch(_raw(b"", kind=BEATS_RESP), 2, {1}, GROUPS)
    (node_beat,) = decode_batch(_raw(b""), 2, {1}, GROUPS)
    assert node_beat.rows == [] and node_beat.node_nonce == 0 and not node_beat.quiesce


def test_quiesce_flag_and_node_nonce_round_trip_and_old_senders_decode_as_unflagged():
    beats = [
        Heartbeat(src=1, dst=2, term=3, group_id=1, commit=7, quiesce=True),
        Heartbeat(src=1, dst=2, term=4, group_id=2, commit=9),
    ]
    out, other = coalesce(beats, 1, node_nonce=12345)
    assert other == [] and len(out) == 2  # quiesce beats travel apart from plain ones
    assert {m.quiesce for m in out} == {True, False}
    assert all(m.node_nonce == 12345 for m in out)
    for batch in (
        encode_batch(out),
        pb.MessageBatch.FromString(encode_batch_bytes(out, EntryEncoder())),
    ):
        got = decode_batch(batch, 2, {1}, GROUPS)
        assert got == out
        expanded = sorted((h for m in got for h in expand(m)), key=lambda h: h.group_id)
        assert [(h.group_id, h.quiesce) for h in expanded] == [(1, True), (2, False)]
    # a sender predating the fields: no nonce, no flag
    (old,) = decode_batch(_raw(_rows((1, 3, 5, 0))), 2, {1}, GROUPS)
    assert old.node_nonce == 0 and not old.quiesce
    assert not expand(old)[0].quiesce


def test_an_answer_to_a_quiesce_beat_travels_alone_and_keeps_its_flag():
    """A follower that does not quiesce flags its answer (it wakes the leader);
    a BeatsResponse row has no flag, so that answer is not folded into one."""
    answers = [
        HeartbeatResponse(src=2, dst=1, term=3, group_id=1, quiesce=True),
        HeartbeatResponse(src=2, dst=1, term=3, group_id=2),
    ]
    out, other = coalesce(answers, 2)
    assert other == [answers[0]]
    assert [(m.type, m.rows) for m in out] == [(BEATS_RESP, [(2, 3, 0)])]
    for batch in (
        encode_batch(other),
        pb.MessageBatch.FromString(encode_batch_bytes(other, EntryEncoder())),
    ):
        assert decode_batch(batch, 1, {2}, GROUPS | {1}) == [answers[0]]


def test_a_newer_beat_of_a_group_replaces_its_quiesce_beat_in_one_flush():
    beats = [
        Heartbeat(src=1, dst=2, term=3, group_id=1, commit=7, quiesce=True),
        Heartbeat(src=1, dst=2, term=3, group_id=1, commit=7, context=4),
    ]
    out, _ = coalesce(beats, 1)
    rows = [(m.quiesce, r) for m in out for r in m.rows]
    assert rows == [(False, (1, 3, 7, 4))]


def test_too_many_rows_are_refused():
    data = _rows(*((g, 1, 0, 0) for g in range(1, 65538)))
    with pytest.raises(InvalidMessageError, match="exceed"):
        decode_batch(_raw(data), 2, {1}, GROUPS)
