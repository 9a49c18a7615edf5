"""GatedTransport: what a node short of disk space drops (appends with entries,
TimeoutNow), and that everything else, and everything when the gates are open, passes."""

from __future__ import annotations

import asyncio

from raftlog.core import AppendEntries, Heartbeat, RequestVote, TimeoutNow
from raftlog.entry import EntryType, LogEntry
from raftlog.transport import GatedTransport, LocalNetwork


def _msgs() -> list:
    entry = LogEntry(index=5, term=1, type=EntryType.DATA, data=b"x")
    return [
        AppendEntries(src=1, dst=2, term=1, prev_index=4, prev_term=1, entries=[entry], commit=3),
        AppendEntries(src=1, dst=2, term=1, prev_index=5, prev_term=1, commit=5),  # probe
        Heartbeat(src=1, dst=2, term=1, commit=5),
        RequestVote(src=1, dst=2, term=2, last_index=5, last_term=1),
        TimeoutNow(src=1, dst=2, term=1),
    ]


def _deliver(state: dict) -> tuple[list, GatedTransport]:
    net = LocalNetwork()
    got: list = []
    gated = GatedTransport(
        net.transport(2),
        refuse_appends=lambda: state["appends"],
        refuse_leadership=lambda: state["leadership"],
    )
    sender = net.transport(1)

    async def main() -> None:
        await gated.start(got.extend)
        await sender.start(lambda m: None)
        sender.send(_msgs())
        for _ in range(3):  # LocalNetwork delivers on a later loop turn
            await asyncio.sleep(0)

    asyncio.run(main())
    return got, gated


def test_open_gates_pass_everything():
    got, gated = _deliver({"appends": False, "leadership": False})
    assert [type(m).__name__ for m in got] == [type(m).__name__ for m in _msgs()]
    assert gated.refused_appends == gated.refused_transfers == 0
    assert gated.stats.received_messages == 5  # other attributes are the inner transport's


def test_below_the_reserve_no_leadership_transfer():
    got, gated = _deliver({"appends": False, "leadership": True})
    assert not any(isinstance(m, TimeoutNow) for m in got)
    assert len(got) == 4 and gated.refused_transfers == 1


def test_below_half_the_reserve_appends_with_entries_are_dropped():
    got, gated = _deliver({"appends": True, "leadership": True})
    kinds = [type(m).__name__ for m in got]
    assert kinds == ["AppendEntries", "Heartbeat", "RequestVote"]
    assert got[0].entries == []  # the probe passes: it grows nothing
    assert gated.refused_appends == 1 and gated.refused_transfers == 1


def test_callbacks_set_through_the_gate_are_the_inner_transports():
    """RaftHost sets `on_unreachable` on the transport it is given: through the gate it
    must land on the transport that calls it (it stayed on the wrapper, and a sink node
    never saw a broken stream: killed peers were found only by the 3 s silence)."""

    class Inner:
        on_unreachable = None

        def peer_connected(self, peer: int) -> bool:
            return False

        def report(self, peer: int) -> None:  # what GrpcTransport does on a failed write
            if self.on_unreachable is not None:
                self.on_unreachable(peer)

    inner = Inner()
    gated = GatedTransport(inner)
    seen: list[int] = []
    gated.on_unreachable = seen.append
    inner.report(3)
    assert seen == [3] and gated.on_unreachable == seen.append
    assert "on_unreachable" not in vars(gated)  # nothing left on the wrapper
    gated.on_unreachable = None
    assert inner.on_unreachable is None
