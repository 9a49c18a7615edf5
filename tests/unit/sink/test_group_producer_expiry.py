"""Producer-state expiry with partition groups (sink/lifecycle/producer_expiry.py,
GroupsProducerExpiry): idempotent-producer state lives in each data group, indexed by
that group's log, so expiry scans every hosted group and proposes EXPIRE_PRODUCERS into
each group on that group's leader. Real DataGroupMachines over in-memory logs; a fake
clock (unit test)."""

from __future__ import annotations

import asyncio
import uuid

from sink.lifecycle.producer_expiry import ExpiryTarget, GroupsProducerExpiry
from tests.unit.sink.batches import make_batch
from tests.unit.sink.test_data_group import Group as MachineLog

T = uuid.UUID(int=0xC3)


class _Replica:
    """One data group's replica here: a machine, whether this node leads it, proposals."""

    def __init__(self, partition: int, leads: bool) -> None:
        self.log = MachineLog(parts=[(T, partition, "t")])
        self.partition = partition
        self.leads = leads
        self.proposed: list[bytes] = []

    def produce(self, pid: int, seq: int) -> None:
        b = make_batch([b"x"], producer_id=pid, epoch=0, base_sequence=seq)
        r = self.log.produce(b, topic=T, partition=self.partition, pid=pid, epoch=0, seq=seq)
        assert int(r.error) == 0

    def pids(self) -> set[int]:
        return set(self.log.fsm.data.producers.last_indexes())

    def target(self) -> ExpiryTarget:
        async def propose(data: bytes):
            self.proposed.append(data)
            return self.log.apply(data)

        return ExpiryTarget(self.log.fsm.data, propose, lambda: self.leads)


def test_each_group_expires_its_own_idle_producers_on_its_leader_only():
    now = [0.0]
    led, followed = _Replica(0, leads=True), _Replica(1, leads=False)
    hosted = {10: led, 11: followed}
    exp = GroupsProducerExpiry(
        lambda: {g: r.target() for g, r in hosted.items()}, 1000, clock=lambda: now[0]
    )
    led.produce(7, 0)
    led.produce(8, 0)
    followed.produce(7, 0)  # the same producer id in another group: its own state
    assert asyncio.run(exp.expire_once()) == 0  # first sighting starts every clock
    now[0] = 0.6
    led.produce(8, 1)  # 8 stays active in group 10
    now[0] = 1.1
    assert asyncio.run(exp.expire_once()) == 1  # 7 in group 10 (idle 1.1 s); 8 only 0.5 s
    assert led.pids() == {8}
    assert followed.pids() == {7}  # idle too, but this node does not lead group 11
    assert followed.proposed == [] and len(led.proposed) == 1
    # Leadership of group 11 moves here: its clocks have run since the first scan.
    followed.leads = True
    assert asyncio.run(exp.expire_once()) == 1
    assert followed.pids() == set() and exp.expired_total == 2


def test_groups_that_appear_start_their_clocks_and_gone_ones_are_forgotten():
    now = [0.0]
    a, b = _Replica(0, leads=True), _Replica(1, leads=True)
    hosted = {10: a}
    exp = GroupsProducerExpiry(
        lambda: {g: r.target() for g, r in hosted.items()}, 1000, clock=lambda: now[0]
    )
    a.produce(1, 0)
    b.produce(2, 0)
    asyncio.run(exp.expire_once())
    now[0] = 5.0
    hosted[11] = b  # a group placed here later: its producer is first seen now
    assert asyncio.run(exp.expire_once()) == 1  # a's producer only
    assert a.pids() == set() and b.pids() == {2}
    del hosted[10]
    asyncio.run(exp.expire_once())
    assert set(exp.per_group) == {11}
    # A restarted group (a new machine under the same id) starts its clocks again.
    hosted[11] = fresh = _Replica(1, leads=True)
    fresh.produce(2, 0)
    now[0] = 5.5
    assert asyncio.run(exp.expire_once()) == 0
    now[0] = 6.6
    assert asyncio.run(exp.expire_once()) == 1 and fresh.pids() == set()


def test_a_group_whose_proposal_fails_does_not_stop_the_others():
    now = [0.0]
    bad, good = _Replica(0, leads=True), _Replica(1, leads=True)

    async def refuse(data: bytes):
        raise TimeoutError("no commit")

    targets = {
        10: ExpiryTarget(bad.log.fsm.data, refuse, lambda: True),
        11: good.target(),
    }
    exp = GroupsProducerExpiry(lambda: targets, 1000, clock=lambda: now[0])
    bad.produce(1, 0)
    good.produce(1, 0)
    asyncio.run(exp.expire_once())
    now[0] = 2.0
    assert asyncio.run(exp.expire_once()) == 1
    assert good.pids() == set() and bad.pids() == {1} and exp.failed_rounds == 1


def test_off_when_expiration_is_zero():
    exp = GroupsProducerExpiry(lambda: {}, 0)

    async def run() -> None:
        exp.start()
        assert exp._task is None
        await exp.stop()

    asyncio.run(run())
