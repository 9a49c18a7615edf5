"""Real gRPC between transports on 127.0.0.1: order, outages, hostile input."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from raftlog.core.messages import AppendEntries, Heartbeat
from raftlog.entry import EntryType, LogEntry
from raftlog.transport import GrpcTransport, TransportError, TransportOptions
from raftlog.transport import raft_pb2 as pb


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


async def wait_until(cond, timeout=10.0, what="condition"):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def pair(opts=None):
    got: list = []
    a = GrpcTransport(1, "127.0.0.1:0", {}, options=opts)
    b = GrpcTransport(2, "127.0.0.1:0", {}, options=opts)
    await a.start(lambda msgs: None)
    await b.start(got.extend)
    a.add_peer(2, f"127.0.0.1:{b.bound_port}")
    b.add_peer(1, f"127.0.0.1:{a.bound_port}")
    return a, b, got


def append(i: int, size: int = 10) -> AppendEntries:
    return AppendEntries(
        src=1,
        dst=2,
        term=3,
        prev_index=i - 1,
        prev_term=3 if i > 1 else 0,
        entries=[LogEntry(i, 3, EntryType.DATA, bytes(size))],
        commit=0,
    )


def test_messages_arrive_in_order():
    async def main():
        a, b, got = await pair()
        for i in range(1, 2001):
            a.send([append(i)])
        await wait_until(lambda: len(got) == 2000, what="2000 messages")
        assert [m.entries[0].index for m in got] == list(range(1, 2001))
        assert a.stats.sent_batches < 2000  # queued messages share writes
        await a.close()
        await b.close()

    run(main())


def test_peer_outage_drops_and_recovers():
    async def main():
        unreachable: list[int] = []
        a = GrpcTransport(1, "127.0.0.1:0", {}, options=TransportOptions(backoff_max_s=0.2))
        a.on_unreachable = unreachable.append
        await a.start(lambda m: None)
        # A port nobody listens on yet.
        probe = GrpcTransport(2, "127.0.0.1:0", {})
        await probe.start(lambda m: None)
        port = probe.bound_port
        await probe.close()
        a.add_peer(2, f"127.0.0.1:{port}")
        a.send([Heartbeat(src=1, dst=2, term=1)])
        await wait_until(
            lambda: unreachable == [2] or len(unreachable) >= 1, what="unreachable report"
        )
        assert a.stats.dropped_messages >= 1
        got: list = []
        b = GrpcTransport(2, f"127.0.0.1:{port}", {1: f"127.0.0.1:{a.bound_port}"})
        await b.start(got.extend)

        def beat_arrived() -> bool:
            a.send([Heartbeat(src=1, dst=2, term=1)])
            return bool(got)

        await wait_until(beat_arrived, what="delivery after the peer came back")
        await a.close()
        await b.close()

    run(main())


def test_hostile_input_is_rejected_and_the_server_survives():
    async def main():
        a, b, got = await pair(TransportOptions(max_message_bytes=1024 * 1024))
        target = f"127.0.0.1:{b.bound_port}"
        async with grpc.aio.insecure_channel(target) as ch:
            raw = ch.stream_unary("/raftlog.Raft/Send", request_serializer=lambda x: x)
            # Not a protobuf at all.
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await raw(iter([b"\xff\xfe garbage \x00" * 10]))
            assert err.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
            # A valid protobuf for a group this node does not host: dropped
            # alone and counted, the stream stays up (other groups share it).
            wrong_group = pb.MessageBatch(
                messages=[pb.RaftMessage(type=5, group_id=77, src=1, dst=2, term=1)]
            ).SerializeToString()
            summary = pb.SendSummary.FromString(await raw(iter([wrong_group])))
            assert summary.received == 0
            assert b.stats.unknown_group_messages == 1
            # A message from a node that is not a peer: the stream is aborted.
            stranger = pb.MessageBatch(
                messages=[pb.RaftMessage(type=5, group_id=0, src=9, dst=2, term=1)]
            ).SerializeToString()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await raw(iter([stranger]))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "unknown node" in err.value.details()
            # Bigger than max_message_bytes: refused before it is parsed.
            huge = pb.MessageBatch(
                messages=[
                    pb.RaftMessage(type=7, group_id=0, src=1, dst=2, term=1, data=bytes(2 << 20))
                ]
            ).SerializeToString()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await raw(iter([huge]))
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert b.stats.rejected_batches == 1
        assert got == []
        # Still serving well-formed traffic.
        a.send([append(1)])
        await wait_until(lambda: len(got) == 1, what="a valid message after the attacks")
        await a.close()
        await b.close()

    run(main())


def test_listen_on_a_taken_port_is_a_clear_error():
    async def main():
        a = GrpcTransport(1, "127.0.0.1:0", {})
        await a.start(lambda m: None)
        b = GrpcTransport(2, f"127.0.0.1:{a.bound_port}", {})
        with pytest.raises(TransportError, match="cannot listen"):
            await b.start(lambda m: None)
        await a.close()

    run(main())


# ---------------------------------------------------------------- many groups on one link


def beat(group: int, term: int = 3) -> Heartbeat:
    return Heartbeat(src=1, dst=2, term=term, group_id=group, commit=0)


def test_a_message_for_an_unknown_group_is_dropped_alone():
    # One unknown group id in a batch must not abort the stream that carries
    # every other group's traffic (routine during group create/delete races).
    async def main():
        a, b, got = await pair()
        a.send([beat(99), append(1), beat(98)])
        a.send([append(2)])
        await wait_until(lambda: len(got) == 2, what="the group-0 messages")
        assert [m.entries[0].index for m in got] == [1, 2]
        assert b.stats.unknown_group_messages == 2
        assert b.stats.rejected_batches == 0
        assert a.stats.reconnects == 0 and a.stats.dropped_messages == 0
        await a.close()
        await b.close()

    run(main())


def test_heartbeats_and_votes_are_not_crowded_out_by_appends():
    # A busy group fills the peer's data lane; another group's heartbeat, sent
    # after, must still be delivered, and ahead of the append backlog.
    async def main():
        opts = TransportOptions(queue_max_messages=64)
        got: list = []
        a = GrpcTransport(1, "127.0.0.1:0", {}, groups=(0, 1), options=opts)
        b = GrpcTransport(2, "127.0.0.1:0", {}, groups=(0, 1), options=opts)
        await a.start(lambda msgs: None)
        await b.start(got.extend)
        a.add_peer(2, f"127.0.0.1:{b.bound_port}")
        b.add_peer(1, f"127.0.0.1:{a.bound_port}")
        for i in range(1, 201):  # no await: everything is queued before the sender runs
            a.send([append(i, size=1000)])
        a.send([beat(1)])
        await wait_until(lambda: any(isinstance(m, Heartbeat) for m in got), what="heartbeat")
        kinds = [type(m).__name__ for m in got]
        assert kinds[0] == "Heartbeat", kinds[:3]
        assert got[0].group_id == 1
        assert a.stats.dropped_messages == 200 - 64  # only the data lane overflowed
        await a.close()
        await b.close()

    run(main())


def test_groups_registered_on_one_transport_get_their_own_messages():
    async def main():
        a = GrpcTransport(1, "127.0.0.1:0", {}, groups=())
        b = GrpcTransport(2, "127.0.0.1:0", {}, groups=())
        got = {g: [] for g in (1, 2, 3)}
        for g in got:
            b.register_group(g, got[g].extend)
        await a.start()
        await b.start()
        assert b.accepted_groups == {1, 2, 3}
        a.add_peer(2, f"127.0.0.1:{b.bound_port}")
        b.add_peer(1, f"127.0.0.1:{a.bound_port}")
        a.send([beat(1), beat(2), beat(3, term=5), beat(2, term=4)])
        await wait_until(lambda: sum(map(len, got.values())) == 4, what="4 beats")
        assert [m.term for m in got[2]] == [3, 4]
        assert [m.group_id for m in got[1] + got[3]] == [1, 3]
        b.unregister_group(3)
        a.send([beat(3), beat(1)])
        await wait_until(lambda: len(got[1]) == 2, what="group 1's second beat")
        assert len(got[3]) == 1 and b.stats.unknown_group_messages == 1
        await a.close()
        await b.close()

    run(main())


def test_more_control_messages_than_one_batch_may_hold_all_arrive():
    """A host with many groups queues thousands of control messages per tick: the sender
    splits them into batches the receiver accepts (limits.max_messages), never one batch
    the receiver would refuse whole (which aborted the stream, so nothing ever arrived)."""

    async def main():
        a, b, got = await pair()
        n = 3 * 4096 + 17
        a.send([Heartbeat(src=1, dst=2, term=3, commit=0) for _ in range(n)])
        await wait_until(lambda: len(got) == n, what=f"{n} heartbeats")
        assert b.stats.rejected_batches == 0 and a.stats.sent_batches >= 4
        await a.close()
        await b.close()

    run(main())
