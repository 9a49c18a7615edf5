"""The reconciler's pure decisions (sink/node/reconcile.py) and the leaders table
(sink/node/leaders.py)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from raftlog.entry import EntryType, LogEntry
from sink.node.leaders import LeaderPoller, LeadersTable
from sink.node.reconcile import plan, serve_command
from sink.state import data_commands as dcmd
from sink.state.data_group import DataGroupMachine
from sink.state.placement_table import GroupPlacement

T = uuid.UUID(int=0xA1)


def g(gid: int, *replicas: int, partition: int = 0) -> GroupPlacement:
    return GroupPlacement(gid, T.hex, partition, tuple(replicas))


def test_starts_the_groups_placed_here_that_do_not_run():
    placement = [g(1, 1, 2, 3), g(2, 2, 3, 4), g(3, 4, 1, 2)]
    p = plan(1, placement, 4, running=[3])
    assert [x.group for x in p.start] == [1] and p.remove == []


def test_removes_only_groups_the_controller_allocated_and_no_longer_places_here():
    placement = [g(2, 1, 2)]
    # group 1: allocated (< next 5) and gone: removed; 7 on disk beyond next: the
    # controller replica lags, so it is kept; group 0 (the controller) never.
    p = plan(1, placement, 5, running=[1, 2], on_disk=[0, 1, 2, 7])
    assert p.start == [] and p.remove == [1]
    # A group moved away from this node is removed too.
    p = plan(3, placement, 5, running=[2])
    assert p.remove == [2]


def test_nothing_to_do_when_everything_placed_runs():
    placement = [g(1, 1, 2), g(2, 2, 1)]
    assert plan(1, placement, 3, running=[1, 2], on_disk=[0, 1, 2]) == ([], [])


class _Machine:
    def __init__(self) -> None:
        self.fsm = DataGroupMachine(1)
        self.index = 0

    def apply(self, data: bytes):
        self.index += 1
        return self.fsm.on_apply([LogEntry(self.index, 1, EntryType.DATA, data)])[0]


def test_serve_then_configs_then_nothing():
    m = _Machine()
    place = g(1, 1, 2)
    overrides = {"retention.ms": "1000"}
    data = serve_command(place, "t", overrides, m.fsm, m.fsm.configs.overrides(T.hex))
    assert data is not None and data[0] == dcmd.SERVE
    c = dcmd.decode_serve(data)
    assert c.parts == [(T, 0, "t")] and c.configs == {T: overrides}
    m.apply(data)
    assert serve_command(place, "t", overrides, m.fsm, m.fsm.configs.overrides(T.hex)) is None
    m.apply(data)  # a duplicate SERVE (a retry, a new leader) changes nothing
    assert m.fsm.partitions() == [(T, 0)]
    changed = {"retention.ms": "2000"}
    data = serve_command(place, "t", changed, m.fsm, m.fsm.configs.overrides(T.hex))
    assert data is not None and data[0] == dcmd.CONFIGS
    m.apply(data)
    assert serve_command(place, "t", changed, m.fsm, m.fsm.configs.overrides(T.hex)) is None


def test_no_serve_for_a_topic_the_controller_no_longer_has():
    m = _Machine()
    assert serve_command(g(1, 1), None, None, m.fsm, {}) is None


def _info(topic, partition, leader, epoch, replicas):
    reps = [SimpleNamespace(node_id=n) for n in replicas]
    return SimpleNamespace(
        topic=topic, partition=partition, leader_id=leader, leader_epoch=epoch, replicas=reps
    )


def test_leaders_table_keeps_the_newest_epoch_from_hosting_nodes_only():
    t = LeadersTable()
    assert t.learn_reply(2, [_info("t", 0, 2, 5, (1, 2, 3))], now=1.0) == 1
    # An older epoch never replaces a newer one.
    assert t.learn_reply(3, [_info("t", 0, 3, 4, (1, 2, 3))], now=2.0) == 0
    assert t.get("t", 0).leader == 2
    # A node that is not a replica answers second hand: ignored; so is "no leader".
    assert t.learn_reply(4, [_info("t", 0, 4, 9, (1, 2, 3))], now=3.0) == 0
    assert t.learn_reply(1, [_info("t", 0, 0, 9, (1, 2, 3))], now=3.0) == 0
    assert t.learn_reply(1, [_info("t", 0, 3, 6, (1, 2, 3))], now=4.0) == 1
    assert t.get("t", 0) == (3, 6, 4.0)
    t.forget_missing(lambda topic, p: False)
    assert t.get("t", 0) is None


def test_leader_poller_asks_only_for_topics_not_hosted_here_and_not_at_all_when_none():
    """With a replica of every group here (RF = nodes) the table is never read: no call
    (each cost both nodes about a millisecond of CPU a second, idle)."""
    asked: list[tuple[str, list[str] | None]] = []

    class Client:
        def __init__(self, address: str) -> None:
            self.address = address

        async def partitions(self, topics=None, timeout=10.0):
            asked.append((self.address, topics))
            return SimpleNamespace(partitions=[_info("far", 0, 2, 3, (2, 3))])

    wanted: list[str] = []
    table = LeadersTable()
    poller = LeaderPoller(1, table, lambda: {2: "n2", 3: "n3"}, Client, topics=lambda: wanted)

    async def run():
        await poller.poll_once()
        assert asked == [] and poller.skipped == 1 and poller.polls == 0
        wanted.append("far")
        await poller.poll_once()

    asyncio.run(run())
    assert sorted(asked) == [("n2", ["far"]), ("n3", ["far"])]
    assert table.get("far", 0).leader == 2
