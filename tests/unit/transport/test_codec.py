"""Wire mapping: every message kind round-trips; malformed input is rejected."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.core.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    InstallSnapshotResponse,
    ReadIndex,
    ReadIndexResponse,
    RequestVote,
    RequestVoteResponse,
    TimeoutNow,
)
from raftlog.entry import EntryType, LogEntry
from raftlog.transport import DecodeLimits, InvalidMessageError, decode_batch, encode_batch
from raftlog.transport import raft_pb2 as pb

H = {"src": 2, "dst": 1, "term": 7, "group_id": 3}
PEERS, GROUPS = {1, 2, 3}, {3}

EXAMPLES = [
    AppendEntries(
        **H,
        prev_index=10,
        prev_term=6,
        commit=9,
        entries=[
            LogEntry(11, 6, EntryType.DATA, b"a"),
            LogEntry(12, 7, EntryType.NOOP, b""),
            LogEntry(13, 7, EntryType.CONFIG, b"cfg"),
        ],
    ),
    AppendEntries(**H, prev_index=0, prev_term=0),
    AppendEntriesResponse(**H, index=12, reject=True, reject_hint=5, log_term=4),
    RequestVote(**H, last_index=12, last_term=6, pre_vote=True, transfer=True),
    RequestVote(**H, last_index=12, last_term=6, voter_incarnation=77, candidate_admitted=True),
    RequestVoteResponse(**H, granted=True, pre_vote=True),
    Heartbeat(**H, commit=4, context=99),
    HeartbeatResponse(**H, context=99),
    HeartbeatResponse(**H, context=0, quiesce=True),
    InstallSnapshot(
        **H, index=100, snap_term=5, offset=4096, data=b"x" * 10, done=True, meta_data=b"m"
    ),
    InstallSnapshotResponse(**H, index=100, next_offset=8192),
    TimeoutNow(**H),
    ReadIndex(src=2, dst=1, term=0, group_id=3, context=b"ctx"),
    ReadIndexResponse(**H, index=44, context=b"ctx"),
]


def roundtrip(msgs, node=1):
    wire = pb.MessageBatch.FromString(encode_batch(msgs).SerializeToString())
    return decode_batch(wire, node, PEERS, GROUPS)


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_kind_round_trips(msg):
    assert roundtrip([msg]) == [msg]


@settings(max_examples=100, derandomize=True, deadline=None)
@given(
    prev=st.integers(0, 2**40),
    terms=st.lists(st.integers(0, 3), max_size=20),
    payloads=st.lists(st.binary(max_size=50), min_size=20, max_size=20),
)
def test_append_entries_round_trip(prev, terms, payloads):
    term = 5
    entries, t = [], 2
    for i, bump in enumerate(terms):
        t = min(term, t + bump)
        entries.append(LogEntry(prev + 1 + i, t, EntryType.DATA, payloads[i]))
    msg = AppendEntries(
        src=2, dst=1, term=term, group_id=3, prev_index=prev, prev_term=2, entries=entries
    )
    assert roundtrip([msg]) == [msg]


def bad(**over) -> pb.MessageBatch:
    p = pb.RaftMessage(type=1, group_id=3, src=2, dst=1, term=7, prev_index=10, prev_term=6)
    for k, v in over.items():
        if k == "entries":
            p.entries.extend(v)
        else:
            setattr(p, k, v)
    return pb.MessageBatch(messages=[p])


@pytest.mark.parametrize(
    ("batch", "match"),
    [
        (bad(type=99), "unknown message type"),
        (bad(dst=2), "arrived at node 1"),
        (bad(src=9), "unknown node"),
        (bad(src=1), "unknown node"),
        (bad(group_id=4), "unknown group"),
        (bad(term=0), "without a term"),
        (bad(term=2**64 - 1), "out of range"),
        (bad(prev_term=8), "prev_term"),
        (bad(entries=[pb.Entry(index=12, term=6, type=1)]), "does not follow"),
        (bad(entries=[pb.Entry(index=11, term=8, type=1)]), "out of order"),
        (bad(entries=[pb.Entry(index=11, term=5, type=1)]), "out of order"),
        (bad(entries=[pb.Entry(index=11, term=7, type=42)]), "unknown type"),
        (bad(entries=[pb.Entry(index=11, term=7, type=1, data=b"x" * 11)]), "over the limit"),
        (
            bad(entries=[pb.Entry(index=11 + i, term=7, type=1) for i in range(5)]),
            "exceed the limit",
        ),
        (
            pb.MessageBatch(
                messages=[pb.RaftMessage(type=6, group_id=3, src=2, dst=1, term=1)] * 9
            ),
            "exceed",
        ),
    ],
)
def test_malformed_input_is_rejected(batch, match):
    limits = DecodeLimits(max_entries=4, max_entry_bytes=10, max_messages=8)
    with pytest.raises(InvalidMessageError, match=match):
        decode_batch(batch, 1, PEERS, GROUPS, limits)


def test_generated_code_matches_the_proto(tmp_path):
    import pathlib
    import subprocess

    root = pathlib.Path(__file__).resolve().parents[3]
    subprocess.run(["bash", str(root / "scripts" / "gen_proto.sh"), str(tmp_path)], check=True)
    for name, where in (("raft_pb2.py", "raftlog/transport"), ("read_api_pb2.py", "sink/readapi")):
        fresh = (tmp_path / name).read_text()
        checked_in = (root / where / name).read_text()
        assert fresh == checked_in, f"{name} is stale: run scripts/gen_proto.sh"


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_hand_written_wire_format_matches_protobuf(msg):
    from raftlog.transport.wire import EntryEncoder, encode_batch_bytes

    enc = EntryEncoder()
    fast = encode_batch_bytes([msg, msg], enc)
    assert pb.MessageBatch.FromString(fast) == encode_batch([msg, msg])
    assert decode_batch(pb.MessageBatch.FromString(fast), 1, PEERS, GROUPS) == [msg, msg]
    # Served from the entry cache the second time: same bytes.
    assert encode_batch_bytes([msg], enc) == encode_batch_bytes([msg], EntryEncoder())
