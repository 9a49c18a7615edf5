"""The send-path encoder must never hand one group's entries to another group."""

from __future__ import annotations

from raftlog.core.messages import AppendEntries
from raftlog.entry import EntryType, LogEntry
from raftlog.transport import decode_batch
from raftlog.transport import raft_pb2 as pb
from raftlog.transport.wire import EntryEncoder, encode_batch_bytes


def _append(group: int, payload: bytes) -> AppendEntries:
    return AppendEntries(
        src=1,
        dst=2,
        term=4,
        group_id=group,
        prev_index=9,
        prev_term=4,
        entries=[LogEntry(10, 4, EntryType.DATA, payload), LogEntry(11, 4, EntryType.DATA, b"z")],
        commit=9,
    )


def test_equal_index_and_term_in_two_groups_keep_their_own_entries():
    # Both runs have the same (first index, last index, last term): a cache
    # keyed without the group hands group 2 the payload of group 1.
    enc = EntryEncoder()
    one, two = _append(1, b"group-one"), _append(2, b"group-two")
    wire1 = pb.MessageBatch.FromString(encode_batch_bytes([one], enc))
    wire2 = pb.MessageBatch.FromString(encode_batch_bytes([two], enc))
    got1 = decode_batch(wire1, 2, {1}, {1, 2})
    got2 = decode_batch(wire2, 2, {1}, {1, 2})
    assert got1 == [one]
    assert got2 == [two]


def test_the_cache_still_serves_the_second_follower_of_one_group():
    enc = EntryEncoder()
    a = _append(3, b"same")
    first = enc.run(a.entries, a.group_id)
    assert enc.run(list(a.entries), a.group_id) is first  # one encoding per run and group
    assert enc.run(a.entries, 4) is not first
