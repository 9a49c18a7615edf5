"""RoutedReads: the handlers' PartitionReads when partitions live in data groups.

Topic questions (which topics exist, their ids and partition counts, auto-create
policy) are the controller's (SinkStateMachine, group 0); a partition's records,
offsets, epochs and sizes are its data group's machine on this node
(sink/node/data_groups.py). has_partition() says whether the partition EXISTS in the
cluster (the controller's answer), not whether this node holds it: the handlers ask
PartitionRoles.role() for that (hosted / leads / ready) before reading, and answer
NOT_LEADER_OR_FOLLOWER where this node holds no replica.

Reads of a partition this node does not serve: high_watermark / log_start_offset
answer -1 (the read API's Partitions lists every partition, hosted here or not);
read_parts and offset_for_timestamp raise KeyError, as for an unknown partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from sink.node.data_groups import DataGroups, HostedGroup
from sink.state import SinkStateMachine, time_lookup

NOT_HERE = -1
"""high_watermark / log_start_offset of a partition this node does not serve."""

GATED_READ_INDEX_S = 2.0
"""How long a linearizable read waits on the read index of a replica behind its catch-up
gate (read_index_partitions) before it answers -1 for it, as it would without trying."""


class _Epochs:
    """PartitionEpochs over the data groups (OffsetForLeaderEpoch)."""

    def __init__(self, reads: RoutedReads) -> None:
        self._reads = reads

    def end_offset_for(
        self, topic: str, partition: int, epoch: int, current_term: int, log_end: int
    ) -> tuple[int, int]:
        h = self._reads.served(topic, partition)
        return h.fsm.end_offset_for(h.topic_id, partition, epoch, current_term)


class RoutedReads:
    def __init__(self, controller: SinkStateMachine, groups: DataGroups) -> None:
        self.controller = controller
        self.groups = groups
        self.epochs = _Epochs(self)

    @property
    def auto_create_topics(self) -> bool:
        return self.controller.auto_create_topics

    @property
    def default_partitions(self) -> int:
        return self.controller.default_partitions

    def topic(self, name: str) -> Any:
        return self.controller.topic(name)

    def topic_by_id(self, topic_id: Any) -> Any:
        return self.controller.topic_by_id(topic_id)

    def topics(self) -> dict[str, Any]:
        return self.controller.topics()

    def has_partition(self, topic: str, partition: int) -> bool:
        return self.controller.has_partition(topic, partition)

    def served(self, topic: str, partition: int) -> HostedGroup:
        """The hosted group serving the partition here (KeyError: none)."""
        _, h = self.groups.lookup(topic, partition)
        if h is None or not h.serves():
            raise KeyError(f"topic-partition {topic}-{partition} is not served here")
        return h

    async def read_index_partitions(self, partitions: Iterable[tuple[str, int]]) -> None:
        """A linearizable read point for each partition served here: one ReadIndex per
        distinct data group serving them (a follower's goes through its leader), each
        returning once this node applied every write committed before the call. The read
        API's linearizable Partitions needs it: the controller's ReadIndex says nothing
        about a data group, whose follower (or new leader, before it commits in its term)
        may answer a high watermark below an acknowledged write. Partitions not served
        here are skipped (they answer -1). RaftError / TimeoutError when a group cannot
        confirm (no leader reachable).

        A replica hosted here that does not serve yet (one that started empty, behind its
        catch-up gate: HostedGroup.caught_up) gets a read index too, on a best-effort
        basis: once applied, it holds every write committed before this call, which is the
        gate's own condition, so it serves from then on. Without this, a topic's followers
        answered -1 to a linearizable read just after the topic was created and written
        until their catch-up task's retries came round (CI: test_read_api_over_tls). The
        same best-effort read index covers a replica past its gate whose SERVE is
        committed but not applied here yet, and a group placed here that this node's
        reconcile has not started yet (waited for up to GATED_READ_INDEX_S)."""
        hosted: list[HostedGroup] = []
        starting: set[int] = set()
        for topic, partition in partitions:
            g, h = self.groups.lookup(topic, partition)
            if h is not None:
                hosted.append(h)
            elif g is not None and self.groups.node_id in g.members:
                # Placed here, the group not started yet: this node applied the
                # placement (the caller's controller ReadIndex) but its reconcile pass
                # has not opened the group (CI: test_read_api_over_tls answered -1).
                starting.add(g.group)
        if starting:
            self.groups.wake()
            started = await asyncio.gather(
                *(self.groups.wait_hosted(gid, GATED_READ_INDEX_S) for gid in starting)
            )
            hosted.extend(h for h in started if h is not None)
        served: dict[int, HostedGroup] = {}
        waiting: dict[int, HostedGroup] = {}
        for h in hosted:
            (served if h.serves() else waiting)[id(h.group)] = h
        # Not serving yet: behind the catch-up gate, or SERVE committed but not applied
        # here. Either way the read index makes it apply what was committed before it.
        waiting = {k: h for k, h in waiting.items() if k not in served}
        answers = await asyncio.gather(
            asyncio.gather(*(h.group.read_index() for h in served.values())),
            *(h.group.read_index(timeout=GATED_READ_INDEX_S) for h in waiting.values()),
            return_exceptions=True,
        )
        if isinstance(answers[0], BaseException):
            raise answers[0]
        for h, answer in zip(waiting.values(), answers[1:], strict=True):
            if not isinstance(answer, BaseException):
                self.groups.mark_caught_up(h)

    def high_watermark(self, topic: str, partition: int) -> int:
        try:
            h = self.served(topic, partition)
        except KeyError:
            return NOT_HERE
        return h.fsm.high_watermark(h.topic_id, partition)

    def log_start_offset(self, topic: str, partition: int) -> int:
        try:
            h = self.served(topic, partition)
        except KeyError:
            return NOT_HERE
        return h.fsm.log_start_offset(h.topic_id, partition)

    def read_parts(
        self, topic: str, partition: int, offset: int, max_bytes: int
    ) -> Sequence[tuple[int, bytes, Any]]:
        h = self.served(topic, partition)
        return h.fsm.read_parts(h.topic_id, partition, offset, max_bytes)

    def offset_for_timestamp(
        self, topic: str, partition: int, timestamp: int
    ) -> time_lookup.TimeMatch | None:
        h = self.served(topic, partition)
        return h.fsm.offset_for_timestamp(h.topic_id, partition, timestamp)

    def partition_size(self, topic: str, partition: int) -> int:
        try:
            h = self.served(topic, partition)
        except KeyError:
            return 0
        return h.fsm.partition_size(h.topic_id, partition)

    def data_event(self) -> asyncio.Event:
        return self.groups.data_event()
