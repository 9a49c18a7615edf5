"""One transport, many groups: per-group handlers, unknown groups dropped alone."""

from __future__ import annotations

import asyncio
import logging

from raftlog.core.messages import Heartbeat, RequestVote
from raftlog.transport import LocalNetwork, UnknownGroupError, decode_batch_known, encode_batch
from raftlog.transport import raft_pb2 as pb
from raftlog.transport.routing import GroupRouter, TransportStats


def hb(group: int, src: int = 1, dst: int = 2) -> Heartbeat:
    return Heartbeat(src=src, dst=dst, term=2, group_id=group, commit=0)


def test_decode_batch_known_drops_only_the_unknown_group():
    batch = pb.MessageBatch.FromString(
        encode_batch([hb(1), hb(7), hb(2), hb(7)]).SerializeToString()
    )
    msgs, unknown = decode_batch_known(batch, 2, {1}, {1, 2})
    assert [m.group_id for m in msgs] == [1, 2]
    assert unknown == [7, 7]


def test_unknown_group_error_is_an_invalid_message_naming_the_group():
    err = UnknownGroupError(9)
    assert isinstance(err, ValueError) and err.group_id == 9
    assert "unknown group 9" in str(err)


def test_local_transport_routes_by_group_and_counts_unknown_groups():
    async def main():
        net = LocalNetwork()
        a = net.transport(1, groups=())
        b = net.transport(2, groups=())
        got1: list = []
        got2: list = []
        b.register_group(1, got1.extend)
        b.register_group(2, got2.extend)
        await a.start()
        await b.start()
        vote = RequestVote(src=1, dst=2, term=2, group_id=2, last_index=0, last_term=0)
        a.send([hb(1), hb(5), vote, hb(1)])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while len(got1) + len(got2) < 3:
            assert loop.time() < deadline, "messages not delivered"
            await asyncio.sleep(0.001)
        assert [type(m) for m in got1] == [Heartbeat, Heartbeat]
        assert got2 == [vote]
        assert b.stats.unknown_group_messages == 1
        b.unregister_group(1)
        a.send([hb(1)])  # counted on arrival, before any delivery is scheduled
        assert b.stats.unknown_group_messages == 2
        assert len(got1) == 2

    asyncio.run(main())


def test_unknown_group_log_is_rate_limited(caplog):
    stats = TransportStats()
    router = GroupRouter(stats, log_interval_s=3600.0)
    with caplog.at_level(logging.WARNING, logger="raftlog.transport"):
        for _ in range(100):
            router.unknown("peer-x", [4, 4])
    lines = [r for r in caplog.records if "transport.unknown_group" in r.getMessage()]
    assert len(lines) == 1
    assert "groups=[4]" in lines[0].getMessage()
    assert stats.unknown_group_messages == 200


def test_a_handler_that_raises_drops_its_own_messages_not_the_other_groups(caplog):
    # A batch is delivered inside the peer stream's receive loop: an exception
    # escaping one group's handler would abort the stream, and the peer's resend
    # would abort it again, stalling every group on that link.
    stats = TransportStats()
    router = GroupRouter(stats, log_interval_s=3600.0)
    got: list = []

    def broken(msgs: list) -> None:
        raise RuntimeError("group 1 is broken")

    router.handlers[1] = broken
    router.handlers[2] = got.extend
    with caplog.at_level(logging.WARNING, logger="raftlog.transport"):
        for _ in range(3):
            router.deliver([hb(1), hb(2), hb(1), hb(2)])
        router.deliver([hb(1)])  # a batch of the broken group alone
    assert [m.group_id for m in got] == [2] * 6
    assert stats.handler_errors == 4
    lines = [r for r in caplog.records if "transport.handler_failed" in r.getMessage()]
    assert len(lines) == 1 and "group=1" in lines[0].getMessage()
