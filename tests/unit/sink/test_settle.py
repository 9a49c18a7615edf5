"""A creation with partition groups answers once its partitions are served
(sink/node/settle.py, PartitionRouting.create_topic / create_partitions).

Answered at commit, a new topic's Metadata named nodes whose data groups had not
elected, served or handed leadership to the preferred replica yet: Sarama 1.22's
producer (3 retries, 100 ms apart) failed all its records with NOT_LEADER_OR_FOLLOWER
and librdkafka's watermark query got NOT_LEADER_FOR_PARTITION
(tests/integration/test_client_windows.py, test_acls.py with groups on). Real
controller state machine and leaders table; the Raft node and the hosted data
groups are fakes whose leader and SERVE the test sets.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from sink.kafka.protocol.errors import ErrorCode
from sink.node.leaders import LeadersTable
from sink.node.routing import PartitionRouting
from sink.service import SinkOptions
from tests.unit.sink.test_add_partitions import Ctl, FakeNode

HOSTS = {1: None, 2: None, 3: None}
FAR = 60.0  # a deadline no healthy step comes near: the test never races it


class Groups:
    """DataGroups' lookup over the controller's real placement; `here` are hosted."""

    def __init__(self, ctl: Ctl, here: set[int]) -> None:
        self.ctl = ctl
        self.here = here
        self.hosted: dict[int, SimpleNamespace] = {}
        self.wakes = 0

    def wake(self) -> None:
        self.wakes += 1

    def lookup(self, topic: str, partition: int):
        info = self.ctl.fsm.topic(topic)
        if info is None:
            return None, None
        g = self.ctl.fsm.placement.group_of(info.topic_id.hex, partition)
        if g is None:
            return None, None
        if partition in self.here and g.group not in self.hosted:
            self.hosted[g.group] = SimpleNamespace(
                group=SimpleNamespace(leader_id=-1), serving=False
            )
        h = self.hosted.get(g.group) if partition in self.here else None
        if h is not None:
            h.serves = lambda h=h: h.serving
        return g, h


def routing(ctl: Ctl, groups: Groups, leaders: LeadersTable, settle_s: float) -> PartitionRouting:
    service = SimpleNamespace(
        fsm=ctl.fsm, node=FakeNode(ctl), options=SinkOptions(), brokers={1: 1, 2: 2, 3: 3}
    )
    return PartitionRouting(service, groups, leaders, None, lambda: HOSTS, 0, settle_s=settle_s)  # type: ignore[arg-type]


async def _not_done_after_some_turns(task: asyncio.Task) -> None:
    """Let the wait look several times (its poll is 50 ms) and check it still waits."""
    for _ in range(5):
        await asyncio.sleep(0.06)
    assert not task.done()


def test_create_topic_answers_once_every_partition_is_served_by_its_preferred_leader():
    ctl = Ctl()
    groups = Groups(ctl, here={0, 1})  # partition 2's group is not hosted here
    leaders = LeadersTable()
    r = routing(ctl, groups, leaders, settle_s=FAR)

    async def run():
        task = asyncio.ensure_future(r.create_topic("t", 3, None, 3))
        while ctl.fsm.topic("t") is None:  # committed; now it waits
            await asyncio.sleep(0)
        preferred = {p: groups.lookup("t", p)[0].replicas[0] for p in range(3)}
        await _not_done_after_some_turns(task)
        # partition 0: led by another replica, serving; partition 1: preferred, not serving
        h0, h1 = groups.lookup("t", 0)[1], groups.lookup("t", 1)[1]
        h0.group.leader_id = next(n for n in HOSTS if n != preferred[0])
        h0.serving = True
        h1.group.leader_id = preferred[1]
        await _not_done_after_some_turns(task)
        h0.group.leader_id = preferred[0]  # handed to the preferred replica
        h1.serving = True
        await _not_done_after_some_turns(task)  # partition 2 still unknown here
        other = next(n for n in HOSTS if n != preferred[2])
        leaders.learn("t", 2, other, 1, 0.0)
        await _not_done_after_some_turns(task)
        leaders.learn("t", 2, preferred[2], 2, 0.0)
        return await asyncio.wait_for(task, FAR)

    res = asyncio.run(run())
    assert res.error == ErrorCode.none and res.topic.partitions == 3


def test_a_partition_that_never_settles_answers_after_the_bound():
    ctl = Ctl()
    groups = Groups(ctl, here={0})
    r = routing(ctl, groups, LeadersTable(), settle_s=0.3)

    async def run():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        res = await asyncio.wait_for(r.create_topic("t", 1, None, 3), FAR)
        return res, loop.time() - t0

    res, took = asyncio.run(run())
    assert res.error == ErrorCode.none and res.topic.name == "t"  # answered anyway
    assert took >= 0.3


def test_create_partitions_waits_for_the_new_partitions_only():
    ctl = Ctl()
    groups = Groups(ctl, here={0, 1, 2, 3})
    leaders = LeadersTable()
    r = routing(ctl, groups, leaders, settle_s=0.0)

    async def run():
        assert (await r.create_topic("t", 2, None, 3)).error == ErrorCode.none
        r.settle_s = FAR
        # the old partitions never settle here: only partitions 2 and 3 are waited for
        task = asyncio.ensure_future(r.create_partitions("t", 4, False))
        while ctl.fsm.topic("t").partitions < 4:
            await asyncio.sleep(0)
        await _not_done_after_some_turns(task)
        for p in (2, 3):
            g, h = groups.lookup("t", p)
            h.group.leader_id, h.serving = g.replicas[0], True
        return await asyncio.wait_for(task, FAR)

    assert asyncio.run(run()) == (ErrorCode.none, None)


def test_a_creation_while_a_node_holding_replicas_is_left_out_of_placement():
    """A node being drained (or not registered) holds replicas but is not among the
    nodes placement may use: its load is left out (Topology refuses unknown nodes, so
    counting it failed the creation with a ValueError) and it gets no new replica."""
    ctl = Ctl()
    hosts = dict(HOSTS)
    service = SimpleNamespace(
        fsm=ctl.fsm, node=FakeNode(ctl), options=SinkOptions(), brokers={1: 1, 2: 2, 3: 3}
    )
    r = PartitionRouting(service, Groups(ctl, set()), LeadersTable(), None, lambda: hosts, 0)  # type: ignore[arg-type]

    async def run():
        first = await r.create_topic("before", 3, None, 3)  # replicas on 1, 2 and 3
        hosts.pop(3)  # node 3 is drained: left out
        return first, await r.create_topic("after", 2, None, 2)

    first, res = asyncio.run(run())
    assert first.error == ErrorCode.none
    assert res.error == ErrorCode.none, res
    info = ctl.fsm.topic("after")
    placed = [g.replicas for g in ctl.fsm.placement.of_topic(info.topic_id.hex)]
    assert all(3 not in r for r in placed) and len(placed) == 2, placed


def test_new_replicas_avoid_a_node_that_is_down_while_the_others_suffice():
    """KRaft places on unfenced brokers only: a node this node cannot reach gets no
    replica of a new topic when the live nodes span the replication factor; when they
    do not, placement keeps it (it catches up when back) rather than refusing."""
    ctl = Ctl()
    hosts = {1: None, 2: None, 3: None, 4: None}
    down = {4}
    service = SimpleNamespace(
        fsm=ctl.fsm, node=FakeNode(ctl), options=SinkOptions(), brokers={1: 1, 2: 2, 3: 3}
    )
    r = PartitionRouting(
        service,  # type: ignore[arg-type]
        Groups(ctl, set()),  # type: ignore[arg-type]
        LeadersTable(),
        None,
        lambda: hosts,
        0,
        down=lambda: down,
    )

    def placed(topic: str) -> list[tuple[int, ...]]:
        info = ctl.fsm.topic(topic)
        return [g.replicas for g in ctl.fsm.placement.of_topic(info.topic_id.hex)]

    async def run():
        assert (await r.create_topic("live", 4, None, 3)).error == ErrorCode.none
        down.update({3})  # two live nodes cannot hold three replicas: keep the down ones
        assert (await r.create_topic("all", 2, None, 3)).error == ErrorCode.none
        grown, _ = await r.create_partitions("live", 6, False)
        assert grown == ErrorCode.none

    asyncio.run(run())
    assert all(4 not in rs for rs in placed("live")[:4]), placed("live")
    assert all(len(rs) == 3 for rs in placed("all")), placed("all")
