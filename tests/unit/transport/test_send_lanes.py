"""One peer link, many groups: a busy group's appends must not crowd out another group.

Driven by counted queue positions on the real per-peer sender (no sockets, no
wall time): enqueue as the runtime would, take batches as the sender task would,
and check where each message leaves.
"""

from __future__ import annotations

from raftlog.core.messages import AppendEntries, Heartbeat, Message, RequestVote
from raftlog.entry import EntryType, LogEntry
from raftlog.transport import GrpcTransport, TransportOptions
from raftlog.transport.codec import DecodeLimits
from raftlog.transport.grpc_transport import _PeerSender


def append(group: int, index: int, size: int = 1000) -> AppendEntries:
    return AppendEntries(
        src=1,
        dst=2,
        term=3,
        group_id=group,
        prev_index=index - 1,
        prev_term=3,
        entries=[LogEntry(index, 3, EntryType.DATA, b"x" * size)],
        commit=0,
    )


def beat(group: int) -> Heartbeat:
    return Heartbeat(src=1, dst=2, term=3, group_id=group, commit=0)


def vote(group: int) -> RequestVote:
    return RequestVote(src=1, dst=2, term=4, group_id=group, last_index=0, last_term=0)


def sender(**opts: object) -> _PeerSender:
    t = GrpcTransport(1, "127.0.0.1:0", {}, groups=(), options=TransportOptions(**opts))
    return _PeerSender(t, 2, "127.0.0.1:1")


def drain(s: _PeerSender) -> list[list[Message]]:
    batches = []
    while s.has_queued():
        batches.append(s._take_batch())
    return batches


def test_a_full_data_lane_still_admits_another_groups_append_and_sends_it_first():
    s = sender(queue_max_messages=64)
    for i in range(1, 10_001):  # group 1 floods: the lane fills at 64
        s.enqueue(append(1, i))
    s.enqueue(vote(2))
    s.enqueue(beat(3))
    s.enqueue(append(2, 1))
    first = s._take_batch()
    where = {(type(m).__name__, m.group_id): pos for pos, m in enumerate(first)}
    assert where[("RequestVote", 2)] < 2 and where[("Heartbeat", 3)] < 2
    # group 2's append was admitted (group 1 gave up its newest) and leaves in the
    # first batch, right after group 1's oldest, not behind 63 of group 1's appends
    assert ("AppendEntries", 2) in where, [(type(m).__name__, m.group_id) for m in first]
    assert where[("AppendEntries", 2)] <= 3
    rest = [m for b in drain(s) for m in b]
    ones = [m.entries[0].index for m in first + rest if m.group_id == 1]
    assert ones == sorted(ones) and ones[0] == 1  # order kept within a group
    assert len(ones) + 1 <= 64  # the lane's bound holds for all groups together
    assert s.t.stats.dropped_messages == 10_000 - len(ones)


def test_a_flooded_group_delays_another_groups_traffic_by_at_most_one_batch():
    # Each round: group 1 queues 200 appends, groups 2..5 each a heartbeat, a vote
    # and one append; the sender then writes ONE batch of at most max_batch_bytes.
    # Every message of groups 2..5 must leave in the batch of its own round.
    s = sender(queue_max_messages=4096, max_batch_bytes=32 * 1024)
    waited: list[int] = []
    queued_at: dict[tuple[int, int], int] = {}
    for rnd in range(50):
        for i in range(200):
            s.enqueue(append(1, rnd * 200 + i + 1))
        for g in (2, 3, 4, 5):
            s.enqueue(beat(g))
            s.enqueue(vote(g))
            s.enqueue(append(g, rnd + 1))
            queued_at[(g, rnd + 1)] = rnd
        for m in s._take_batch():
            if m.group_id != 1 and isinstance(m, AppendEntries):
                waited.append(rnd - queued_at[(m.group_id, m.entries[0].index)])
            elif m.group_id != 1:
                waited.append(0)  # control traffic is drained first in every batch
    assert len(waited) == 50 * 4 * 3, "messages of the quiet groups were dropped or stuck"
    assert max(waited) == 0, f"quiet groups' appends waited up to {max(waited)} batches"


def test_one_group_alone_keeps_fifo_batches_and_the_byte_bound():
    s = sender(queue_max_messages=8, max_message_bytes=10_000, max_batch_bytes=1 << 20)
    for i in range(1, 21):
        s.enqueue(append(7, i, size=1000))
    # 8 fit the message bound, but 10,000 bytes hold only 9 of ~1,032-byte messages;
    # whichever binds first, the lane never exceeds either bound
    got = [m.entries[0].index for b in drain(s) for m in b]
    assert got == list(range(1, len(got) + 1)) and len(got) == 8
    assert s.t.stats.dropped_messages == 12
    assert s.data_bytes == 0


def test_the_batch_never_exceeds_the_receivers_message_limit():
    s = sender(limits=DecodeLimits(max_messages=16))
    for g in range(1, 41):
        s.enqueue(beat(g))
        s.enqueue(append(g, 1, size=10))
    batches = drain(s)
    assert all(len(b) <= 16 for b in batches)
    assert sum(len(b) for b in batches) == 80
