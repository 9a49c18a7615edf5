"""Views by topic name of PartitionData's tables keyed by topic id, for the callers of
SinkStateMachine that speak names (the Kafka handlers, the produce path's dedupe
pre-check, DescribeProducers, producer expiry).

A view holds no state: every call resolves the name through the controller's topic
table (`resolve(name) -> topic id hex or None`) and reads the table the data part
holds *now* (a snapshot load replaces the tables). An unknown name reads as a
partition with no rows. Writes never go through a view: they are applied entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sink.state.epochs import EpochTable
from sink.state.producers import ACCEPT, ProducerEntry, Verdict

if TYPE_CHECKING:
    from sink.state.partition_data import PartitionData

Resolve = Callable[[str], "str | None"]
NameOf = Callable[[str], "str | None"]


class ProducersByName:
    """ProducerTable's read side by (pid, topic name, partition)."""

    def __init__(self, data: Callable[[], PartitionData], resolve: Resolve, name_of: NameOf):
        self._data, self._resolve, self._name_of = data, resolve, name_of

    def check(
        self, pid: int, topic: str, partition: int, epoch: int, first_seq: int, last_seq: int
    ) -> Verdict:
        tid = self._resolve(topic)
        if tid is None:
            return ACCEPT  # apply answers UNKNOWN_TOPIC_OR_PARTITION
        return self._data().producers.check(pid, tid, partition, epoch, first_seq, last_seq)

    def last_indexes(self) -> dict[int, int]:
        return self._data().producers.last_indexes()

    @property
    def entries(self) -> dict[tuple[int, str, int], ProducerEntry]:
        """A copy keyed (pid, topic name, partition)."""
        out = {}
        for (pid, tid, p), entry in self._data().producers.entries.items():
            name = self._name_of(tid)
            if name is not None:
                out[(pid, name, p)] = entry
        return out


class EpochsByName:
    """EpochTable's read side by topic name (OffsetForLeaderEpoch)."""

    def __init__(self, data: Callable[[], PartitionData], resolve: Resolve):
        self._data, self._resolve = data, resolve

    def _tid(self, topic: str) -> str:
        return self._resolve(topic) or ""  # "" is no topic id: no rows

    def terms(self, topic: str, partition: int) -> list[tuple[int, int]]:
        return self._data().epochs.terms(self._tid(topic), partition)

    def epoch_of(self, topic: str, partition: int, offset: int) -> int:
        return self._data().epochs.epoch_of(self._tid(topic), partition, offset)

    def end_offset_for(
        self, topic: str, partition: int, epoch: int, current_term: int, log_end: int
    ) -> tuple[int, int]:
        return self._data().epochs.end_offset_for(
            self._tid(topic), partition, epoch, current_term, log_end
        )

    def table(self) -> EpochTable:
        return self._data().epochs

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EpochsByName):
            return self.table() == other.table()
        return isinstance(other, EpochTable) and self.table() == other

    __hash__ = None  # type: ignore[assignment]
