"""Leader epochs per partition (KIP-320's leader epoch cache): (term, first offset).

The Kafka leader epoch of a partition is the Raft term (Metadata reports the current
term, and every served batch carries its entry's term in partitionLeaderEpoch). Per
partition this keeps, for each term that appended records to it, the offset of the
first of them, updated at apply time from each applied produce entry. So it is a pure
function of the log, identical on every node, and it goes into snapshots.

Invariants: terms strictly increase along a partition's list and so do start
offsets (a later term starts where an earlier one's records ended: Raft appends in
term order and committed entries never truncate). A term with no records of the
partition has no row; Kafka's cache also drops such an epoch when the next one
starts at the same offset.

end_offset_for() answers OffsetForLeaderEpoch as Kafka's LeaderEpochFileCache.endOffsetFor:
for a requested epoch E, the largest epoch <= E with records and the first offset of
the first later epoch with records (the log end when there is none). Since committed
data never truncates, an answer is never below an offset a consumer read in epoch E.
"""

from __future__ import annotations

import bisect
from typing import Any

UNDEFINED = (-1, -1)


class EpochTable:
    __slots__ = ("_parts",)

    def __init__(self) -> None:
        # (topic, partition) -> ([terms], [start offsets]), parallel, strictly increasing
        self._parts: dict[tuple[str, int], tuple[list[int], list[int]]] = {}

    def note(self, topic: str, partition: int, term: int, base_offset: int) -> None:
        """An applied batch of term starting at base_offset (call for every appended batch)."""
        rows = self._parts.get((topic, partition))
        if rows is None:
            self._parts[(topic, partition)] = ([term], [base_offset])
            return
        terms, starts = rows
        if term > terms[-1]:
            terms.append(term)
            starts.append(base_offset)

    def terms(self, topic: str, partition: int) -> list[tuple[int, int]]:
        """[(term, first offset)] of the partition, oldest first."""
        rows = self._parts.get((topic, partition))
        return [] if rows is None else list(zip(*rows, strict=True))

    def epoch_of(self, topic: str, partition: int, offset: int) -> int:
        """The term of the record at offset (-1: before any known term)."""
        rows = self._parts.get((topic, partition))
        if rows is None:
            return -1
        i = bisect.bisect_right(rows[1], offset) - 1
        return rows[0][i] if i >= 0 else -1

    def end_offset_for(
        self, topic: str, partition: int, epoch: int, current_term: int, log_end: int
    ) -> tuple[int, int]:
        """(leader epoch, end offset) for a requested epoch; (-1, -1) when undefined
        (epoch -1, or above the current term)."""
        if epoch < 0 or epoch > current_term:
            return UNDEFINED
        rows = self._parts.get((topic, partition))
        terms, starts = rows if rows is not None else ([], [])
        if epoch == current_term:
            return epoch, log_end  # the epoch being written: the log end
        higher = bisect.bisect_right(terms, epoch)  # first term > epoch
        end = starts[higher] if higher < len(terms) else log_end
        floor = terms[higher - 1] if higher > 0 else epoch
        return floor, end

    def trim_below(self, topic: str, partition: int, log_start: int) -> None:
        """Forget terms whose records all lie below log_start (kept: the one holding it)."""
        rows = self._parts.get((topic, partition))
        if rows is None:
            return
        terms, starts = rows
        keep = max(bisect.bisect_right(starts, log_start) - 1, 0)
        if keep:
            del terms[:keep]
            del starts[:keep]

    def drop(self, topic: str, partition: int) -> None:
        self._parts.pop((topic, partition), None)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EpochTable) and self._parts == other._parts

    __hash__ = None  # type: ignore[assignment]

    def to_json(self) -> list[list[Any]]:
        return [[t, p, terms, starts] for (t, p), (terms, starts) in self._parts.items()]

    @classmethod
    def from_json(cls, rows: list[list[Any]]) -> EpochTable:
        table = cls()
        table._parts = {(t, p): (list(terms), list(starts)) for t, p, terms, starts in rows}
        return table
