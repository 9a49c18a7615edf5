"""The reconciler's pure decisions (sink/node/reconcile.py) and the leaders table
(sink/node/leaders.py)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from raftlog.entry import EntryType, LogEntry
from sink.node.leaders import FULL_EVERY, LeaderPoller, LeadersTable
from sink.node.reconcile import plan, serve_command
from sink.node.routing import PartitionRouting
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


def _info(topic, partition, leader, epoch, replicas, isr=()):
    reps = [SimpleNamespace(node_id=n) for n in replicas]
    return SimpleNamespace(
        topic=topic,
        partition=partition,
        leader_id=leader,
        leader_epoch=epoch,
        replicas=reps,
        isr=list(isr),
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
    assert t.get("t", 0) == (3, 6, 4.0, ())
    t.forget_missing(lambda topic, p: False)
    assert t.get("t", 0) is None


def test_leaders_table_keeps_the_hosting_node_s_isr_and_a_change_of_it_counts():
    t = LeadersTable()
    assert t.learn_reply(2, [_info("t", 0, 2, 5, (1, 2, 3), isr=(1, 2, 3))], now=1.0) == 1
    assert t.get("t", 0).isr == (1, 2, 3)
    before = t.changes
    # node 3 went down: same leader and epoch, a smaller ISR is a change
    assert t.learn_reply(2, [_info("t", 0, 2, 5, (1, 2, 3), isr=(1, 2))], now=2.0) == 1
    assert t.get("t", 0).isr == (1, 2) and t.changes == before + 1
    assert t.learn_reply(2, [_info("t", 0, 2, 5, (1, 2, 3), isr=(1, 2))], now=3.0) == 0


def test_a_partition_hosted_elsewhere_reports_the_hosting_node_s_isr():
    placed = SimpleNamespace(group=7, replicas=(3, 1, 2))
    groups = SimpleNamespace(lookup=lambda topic, partition: (placed, None))
    service = SimpleNamespace(brokers={1: 0, 2: 0, 3: 0})
    leaders = LeadersTable()
    routing = PartitionRouting(service, groups, leaders, None, dict, 0)  # type: ignore[arg-type]
    leaders.learn("far", 0, 3, 4, now=1.0, isr=(1, 3))
    role = routing.role("far", 0)
    assert (role.leader, role.replicas, role.isr) == (3, (3, 1, 2), (3, 1))
    # a hosting node that predates the field sends none: every replica
    leaders.learn("far", 0, 3, 5, now=2.0)
    assert routing.role("far", 0).isr == (3, 1, 2)


def test_leader_poller_asks_only_for_topics_not_hosted_here_and_not_at_all_when_none():
    """With a replica of every group here (RF = nodes) the table is never read: no call
    (each cost both nodes about a millisecond of CPU a second, idle)."""
    asked: list[tuple[str, list[str] | None]] = []

    class Client:
        def __init__(self, address: str) -> None:
            self.address = address

        async def partitions(self, topics=None, timeout=10.0, roles_since=0):
            asked.append((self.address, topics))
            return SimpleNamespace(
                partitions=[_info("far", 0, 2, 3, (2, 3))], roles_version=0, unchanged=False
            )

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


class VersionedPeer:
    """A peer's read API as the leaders poller sees it: rows and a fingerprint that
    changes when they do; an answer is "unchanged" when asked with the current one."""

    def __init__(self) -> None:
        self.version = 5
        self.leader = 2
        self.asked: list[int] = []  # roles_since of each call
        self.down = False

    async def partitions(self, topics=None, timeout=10.0, roles_since=0):
        self.asked.append(roles_since)
        if self.down:
            raise ConnectionError("peer down")
        if roles_since == self.version:
            return SimpleNamespace(partitions=[], roles_version=self.version, unchanged=True)
        rows = [_info("far", 0, self.leader, self.version, (2, 3))]
        return SimpleNamespace(partitions=rows, roles_version=self.version, unchanged=False)


def test_leader_poller_asks_with_the_peer_s_fingerprint_and_keeps_rows_while_unchanged():
    peer = VersionedPeer()
    table = LeadersTable()
    poller = LeaderPoller(1, table, lambda: {2: "n2"}, lambda a: peer, topics=lambda: ["far"])

    async def run():
        await poller.poll_once()  # first poll: in full
        await poller.poll_once()  # the fingerprint is current: no rows, the row stays
        assert peer.asked == [0, 5] and poller.unchanged == 1
        assert table.get("far", 0).leader == 2
        peer.version, peer.leader = 6, 3  # a new leader: the fingerprint moves
        await poller.poll_once()
        assert peer.asked[-1] == 5 and table.get("far", 0).leader == 3
        await poller.poll_once()
        assert peer.asked[-1] == 6 and poller.unchanged == 2
        peer.down = True  # a failed call forgets the fingerprint (a restarted peer)
        await poller.poll_once()
        peer.down = False
        await poller.poll_once()
        assert peer.asked[-2:] == [6, 0]
        while poller.polls % FULL_EVERY:
            await poller.poll_once()
        await poller.poll_once()  # every FULL_EVERY-th poll is in full, whatever it knows
        assert peer.asked[-1] == 0

    asyncio.run(run())


def test_leader_poller_backs_off_while_nothing_changes_and_returns_at_any_news():
    peer = VersionedPeer()
    table = LeadersTable()
    poller = LeaderPoller(
        1, table, lambda: {2: "n2"}, lambda a: peer, topics=lambda: ["far"], max_interval_s=4.0
    )

    async def run():
        assert await poller.poll_once() is False  # the first answer is news
        assert await poller.poll_once() is True  # "unchanged"
        peer.version, peer.leader = 6, 3
        assert await poller.poll_once() is False  # a moved fingerprint is news
        peer.down = True
        assert await poller.poll_once() is False  # so is a failed call
        peer.down = False
        assert await poller.poll_once() is False  # asked in full after the failure: news
        while poller.polls % FULL_EVERY:
            assert await poller.poll_once() is True
        # a full answer with the fingerprint already seen is no news
        assert await poller.poll_once() is True and peer.asked[-1] == 0

    asyncio.run(run())
    waits = []
    for steady in (True, True, True, True, False, True):
        poller.wait_s = poller.next_wait(steady)
        waits.append(poller.wait_s)
    assert waits == [2.0, 4.0, 4.0, 4.0, 1.0, 2.0]


def test_a_lookup_whose_known_leader_is_down_pokes_the_poller():
    placed = SimpleNamespace(group=7, replicas=(2, 3, 4))
    groups = SimpleNamespace(lookup=lambda topic, partition: (placed, None))
    service = SimpleNamespace(brokers={1: 0, 2: 0, 3: 0, 4: 0})
    table = LeadersTable()
    table.learn("far", 0, 2, 5, now=1.0)
    down: set[int] = set()

    class Poller:
        pokes = 0

        def poke(self):
            Poller.pokes += 1

    routing = PartitionRouting(
        service,  # type: ignore[arg-type]
        groups,  # type: ignore[arg-type]
        table,
        Poller(),  # type: ignore[arg-type]
        dict,
        0,
        down=lambda: down,
    )
    assert routing.role("far", 0).leader == 2 and Poller.pokes == 0
    down.add(2)  # node 2 looks down here: a failover is under way
    routing.role("far", 0)
    assert Poller.pokes == 1


def test_leader_poller_asks_in_full_when_it_wants_other_topics():
    peer = VersionedPeer()
    wanted = ["far"]
    poller = LeaderPoller(
        1, LeadersTable(), lambda: {2: "n2"}, lambda a: peer, topics=lambda: wanted
    )

    async def run():
        await poller.poll_once()
        wanted.append("other")  # the fingerprint was of an answer about other topics
        await poller.poll_once()

    asyncio.run(run())
    assert peer.asked == [0, 0]


class _Group:
    def __init__(self, term: int, leader: int, voters: list[int]) -> None:
        self.term, self.leader_id, self.voters = term, leader, voters
        self.down: set[int] = set()

    def membership(self) -> dict[str, list[int]]:
        return {"voters": list(self.voters), "learners": []}

    def in_sync_voters(self, voters=None) -> tuple[int, ...]:
        return tuple(v for v in self.voters if v not in self.down)


def test_roles_version_moves_with_every_input_of_the_rows_and_only_then():
    group = _Group(4, 1, [1, 2, 3])
    hosted = {7: SimpleNamespace(group=group, placement=SimpleNamespace(replicas=(1, 2, 3)))}
    placement = SimpleNamespace(version=3)
    groups = SimpleNamespace(hosted=hosted, controller=SimpleNamespace(placement=placement))
    service = SimpleNamespace(node=SimpleNamespace(applied_index=10), brokers={1: 0, 2: 0, 3: 0})
    leaders = LeadersTable()
    routing = PartitionRouting(service, groups, leaders, None, dict, 0)  # type: ignore[arg-type]
    seen = {routing.roles_version()}
    assert routing.roles_version() in seen and 0 not in seen  # stable while nothing moves

    def moved() -> bool:
        v = routing.roles_version()
        new = v not in seen
        seen.add(v)
        return new

    group.term = 5
    assert moved()
    group.leader_id = 2
    assert moved()
    group.voters = [1, 2, 3, 4]
    assert moved()
    group.down = {3}  # a voter's node declared down: the ISR the rows carry shrank
    assert moved()
    hosted[7].placement = SimpleNamespace(replicas=(2, 1, 3))
    assert moved()
    placement.version = 4
    assert moved()
    service.node.applied_index = 11
    assert moved()
    service.brokers[4] = 0
    assert moved()
    leaders.learn("far", 0, 5, 1, now=1.0)
    assert moved()
    leaders.learn("far", 0, 5, 1, now=2.0)  # the same row again: nothing moved
    assert not moved()
    leaders.forget_missing(lambda t, p: False)
    assert moved()
    hosted[8] = SimpleNamespace(group=_Group(1, 0, []), placement=SimpleNamespace(replicas=(1,)))
    assert moved()
