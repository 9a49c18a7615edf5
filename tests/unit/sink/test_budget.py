"""The memory budgets' accounting (sink.kafka.budget) and the budgeted connection
state: without sockets."""

from __future__ import annotations

import asyncio
import struct

import pytest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from sink.kafka.budget import (
    AUTO_MAX,
    AUTO_MIN,
    BudgetLedger,
    BudgetSizes,
    FetchMemory,
    RequestMemory,
    auto_request_memory,
    clamp_fetch,
    node_memory_bytes,
)
from sink.kafka.handlers import API_VERSIONS_KEY, SUPPORTED
from sink.kafka.limits import KafkaLimits, MiB
from sink.kafka.protocol.connection import (
    NEED_DATA,
    Close,
    CloseReason,
    ConnectionState,
    NeedMemory,
    Request,
)
from tests.unit.sink.requests import valid_request

SIZES = BudgetSizes(limit=100, small_frame=10, small_reserve=20, per_connection=50, fetch_limit=60)


def test_sizes_resolve_their_automatic_values():
    sz = BudgetSizes.of(KafkaLimits(), memory=8 << 30)
    assert sz.limit == int((8 << 30) * 0.10)
    assert sz.small_reserve == sz.limit // 8 and sz.per_connection == sz.limit // 4
    assert sz.fetch_limit == sz.limit and sz.small_frame == MiB
    assert auto_request_memory(None) == AUTO_MIN  # memory unknown: the floor
    assert auto_request_memory(1 << 40) == AUTO_MAX and auto_request_memory(1 << 20) == AUTO_MIN
    explicit = BudgetSizes.of(
        KafkaLimits(request_memory_bytes=64 * MiB, request_memory_small_reserve_bytes=8 * MiB)
    )
    assert (explicit.limit, explicit.largest_frame) == (64 * MiB, 56 * MiB)


def test_node_memory_is_the_smaller_of_meminfo_and_cgroup(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       2048 kB\nMemFree: 1 kB\n")
    cg = tmp_path / "memory.max"
    cg.write_text("1024\n")
    assert node_memory_bytes(str(meminfo), str(cg)) == 1024
    cg.write_text("max\n")
    assert node_memory_bytes(str(meminfo), str(cg)) == 2048 * 1024
    assert node_memory_bytes(str(tmp_path / "no"), str(tmp_path / "no")) is None


def test_large_frames_never_take_the_small_slice():
    led = BudgetLedger(SIZES)
    assert led.fits(40) and not led.is_small(40)
    led.take(40)
    assert led.fits(40)
    led.take(40)  # 80 large: the slice of 20 is left
    assert not led.fits(11)  # a large frame would eat the slice
    assert led.fits(10)  # a small one fits
    led.take(10)
    led.take(10)
    assert not led.fits(1)  # the whole budget is used
    led.give(40)
    assert led.fits(40) and led.used == 60 and led.used_large == 40


def test_too_large_and_per_connection_share():
    led = BudgetLedger(SIZES)
    assert led.too_large(81) and not led.too_large(80)  # limit - small_reserve
    assert led.within_share(80, held=0)  # a connection's first frame always
    assert not led.within_share(41, held=10) and led.within_share(40, held=10)
    assert not led.fits(41, held=10)


def test_releasing_more_than_reserved_is_a_bug():
    led = BudgetLedger(SIZES)
    led.take(5)
    with pytest.raises(AssertionError):
        led.give(6)


def test_waiters_are_served_fifo_per_kind_and_small_ones_pass_large_ones():
    async def main() -> list[str]:
        mem = RequestMemory(SIZES)
        order: list[str] = []
        assert mem.try_reserve(70)

        async def want(name: str, n: int) -> None:
            await mem.reserve(n)
            order.append(name)

        tasks = [asyncio.create_task(want(name, n)) for name, n in (("L1", 30), ("L2", 5 + 11))]
        await asyncio.sleep(0)
        assert mem.waiting == 2 and order == []
        # A small frame while large ones wait: the slice is for it.
        assert mem.try_reserve(10)
        assert not mem.try_reserve(11)  # large: L1 waits ahead (FIFO)
        mem.release(70)  # 10 used: L1 (30) then L2 (16) fit
        await asyncio.gather(*tasks)
        assert mem.used == 10 + 30 + 16 and mem.waits == 2 and mem.waited_bytes == 46
        # A cancelled waiter leaves nothing reserved and does not block the queue.
        blocked = asyncio.create_task(want("L3", 60))
        await asyncio.sleep(0)
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
        assert mem.waiting == 0 and mem.used == 56
        return order

    assert asyncio.run(main()) == ["L1", "L2"]


def test_fetch_budget_clamps_and_settles():
    f = FetchMemory(100)
    assert f.grant(60) == 60 and f.clamped == 0
    assert f.grant(60) == 40 and f.clamped == 1
    assert f.grant(10) == 0 and f.used == 100
    f.settle(0, 7)  # one batch even with nothing granted (KIP-74)
    f.settle(60, 20)
    assert f.used == 67
    f.release(67)
    assert f.used == 0 and f.high_water == 107


def test_clamp_fetch_caps_max_bytes_and_each_partition():
    req = FetchRequest(
        replica_id=-1,
        max_wait=__import__("datetime").timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=50 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            FetchTopic(
                topic="t",
                partitions=(
                    FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=10 << 20,
                    ),
                    FetchPartition(
                        partition=1,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1000,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    out = clamp_fetch(req, 4096)
    assert out.max_bytes == 4096
    assert [p.partition_max_bytes for p in out.topics[0].partitions] == [4096, 1000]
    assert clamp_fetch(req, 0).max_bytes == 1  # one batch at most


# --------------------------------------------------- the budgeted connection state


def budgeted(max_frame: int = 1 << 20) -> ConnectionState:
    return ConnectionState(
        max_frame_bytes=max_frame,
        supported=SUPPORTED,
        api_versions_key=API_VERSIONS_KEY,
        invalid_answer=lambda k, v, c: None,
        fallback=lambda corr: b"FALLBACK",
        budgeted=True,
    )


def test_memory_is_asked_for_before_the_body_is_read():
    frame = valid_request(3, 12)
    st = budgeted()
    st.receive_data(struct.pack(">i", len(frame)) + frame[:5])
    assert st.next_event() == NeedMemory(len(frame))
    assert st.next_event() == NeedMemory(len(frame))  # not granted: asks again
    st.grant(len(frame))
    assert st.frame_started
    assert st.next_event() is NEED_DATA and st.waiting_for == "body"
    # The rest of this frame and the start of the next one in one chunk.
    second = valid_request(0, 9)
    st.receive_data(frame[5:] + struct.pack(">i", len(second)) + second)
    ev = st.next_event()
    assert isinstance(ev, Request) and ev.reserved == len(frame) and ev.api_key == 3
    assert bytes(ev.frame) == frame
    assert not st.frame_started
    assert st.next_event() == NeedMemory(len(second))  # each frame asks for its own
    st.grant(len(second))
    ev2 = st.next_event()
    assert isinstance(ev2, Request) and ev2.reserved == len(second) and ev2.api_key == 0


def test_a_granted_frame_cut_short_is_truncated():
    st = budgeted()
    st.receive_data(struct.pack(">i", 1000) + b"\0" * 10)
    assert st.next_event() == NeedMemory(1000)
    st.grant(1000)
    assert st.next_event() is NEED_DATA
    assert st.buffered == 10
    st.receive_data(b"")
    ev = st.next_event()
    assert isinstance(ev, Close) and ev.reason is CloseReason.TRUNCATED


def test_frame_size_limit_is_checked_before_memory_is_asked_for():
    st = budgeted(max_frame=100)
    st.receive_data(struct.pack(">i", 101))
    ev = st.next_event()
    assert isinstance(ev, Close) and ev.reason is CloseReason.FRAME_TOO_LARGE
