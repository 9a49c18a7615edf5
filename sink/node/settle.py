"""Answer topic creation once the new partitions have leaders that serve them.

With one Raft group a topic is served the moment its entry commits: the Metadata
that follows names a leader that accepts Produce, Fetch and ListOffsets at once.
With partition groups each new partition's data group must first elect a leader,
apply SERVE and, when the first leader is not the preferred replica, hand leadership
to it (sink/node/data_groups.py): about a second on a loaded machine. Answered at
commit, a client is sent to nodes that say NOT_LEADER_OR_FOLLOWER for that second;
clients whose retries are short give up (Sarama 1.22's producer: 3 retries, 100 ms
apart; librdkafka's watermark query does not retry at all).

So the controller answers CreateTopics, CreatePartitions and auto-creation once every
new partition is settled, as Kafka's ZooKeeper-era CreateTopics waited for the new
partitions' leaders (DelayedCreatePartitions) and KRaft's names a leader in the very
record that creates the partition. Settled, as this node sees it:

- a group hosted here: its leader is the preferred replica (the placement's first)
  and its machine here serves the partition (SERVE is committed, so the leader, which
  applies committed entries first, serves it too);
- a group not hosted here: the leaders table (sink/node/leaders.py, poked to poll now)
  names the preferred replica.

Bounded by SETTLE_S: a partition whose preferred replica is down never settles, and
the answer then goes out as before (the clients' retries cover the rest).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Protocol

from sink.node.leaders import LeaderPoller, LeadersTable

SETTLE_S = 4.0
"""Longest wait after the commit. Below the 5 s a non-controller's Metadata relay
(sink.kafka.forward) gives the controller, so the relayed auto-create still answers."""

POLL_S = 0.05
"""How often the wait looks again (leaders and SERVE arrive on other tasks)."""


class GroupLookup(Protocol):
    def lookup(self, topic: str, partition: int) -> tuple[Any, Any]: ...


def settled(groups: GroupLookup, leaders: LeadersTable | None, topic: str, partition: int) -> bool:
    """The partition is led by its preferred replica, which serves it (module docstring)."""
    g, h = groups.lookup(topic, partition)
    if g is None:  # not placed (deleted meanwhile): nothing to wait for
        return True
    preferred = g.replicas[0]
    if h is not None:
        return h.group.leader_id == preferred and h.serves()
    known = leaders.get(topic, partition) if leaders is not None else None
    return known is not None and known.leader == preferred


async def wait_settled(
    groups: GroupLookup,
    leaders: LeadersTable | None,
    poller: LeaderPoller | None,
    topic: str,
    partitions: Iterable[int],
    timeout_s: float,
) -> bool:
    """Wait until every partition is settled, at most timeout_s -> whether they are."""
    pending = list(partitions)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        pending = [p for p in pending if not settled(groups, leaders, topic, p)]
        if not pending:
            return True
        if loop.time() >= deadline:
            return False
        if poller is not None and any(groups.lookup(topic, p)[1] is None for p in pending):
            poller.poke()  # rate-limited by the poller (min_gap_s)
        await asyncio.sleep(POLL_S)
