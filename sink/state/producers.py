"""Idempotent producer state, decided at apply time (KIP-98 broker rules).

Per (producer id, topic, partition): the producer epoch and the last
NUM_BATCHES_TO_RETAIN batches as (first_seq, last_seq, base_offset). The
rules, in order, for a batch with producer_id >= 0:

  * unknown (pid, partition)                 -> accept (state may have expired)
  * epoch < current                          -> INVALID_PRODUCER_EPOCH (47)
  * epoch > current: first_seq must be 0     -> accept and reset, else 45
  * same epoch, (first, last) cached         -> duplicate: NONE + ORIGINAL base offset
  * same epoch, first != last_seq + 1 (mod 2^31) -> OUT_OF_ORDER_SEQUENCE_NUMBER (45)
  * otherwise accept

DUPLICATE_SEQUENCE_NUMBER (46) is never returned: librdkafka then reports
bogus offsets. Everything here is a pure function of the applied log, so every
node (and a new leader after failover) reaches the same decisions.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import NamedTuple

from sink.kafka.protocol.errors import ErrorCode

NUM_BATCHES_TO_RETAIN = 5
SEQ_MODULUS = 1 << 31


class Verdict(NamedTuple):
    """check()'s decision: accept (error none), a duplicate of a cached batch
    (error none, duplicate, its ORIGINAL base offset), or a rejection (the error)."""

    error: ErrorCode
    base_offset: int = -1
    duplicate: bool = False


ACCEPT = Verdict(ErrorCode.none)
OUT_OF_ORDER = Verdict(ErrorCode.out_of_order_sequence_number)
INVALID_EPOCH = Verdict(ErrorCode.invalid_producer_epoch)


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    last_index: int = 0  # Raft log index of the last accepted batch (producer expiry)
    # (first_seq, last_seq, base_offset), oldest first
    batches: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )


class ProducerTable:
    """All (pid, topic, partition) entries of one state machine."""

    def __init__(self) -> None:
        self.entries: dict[tuple[int, str, int], ProducerEntry] = {}

    def check(
        self, pid: int, topic: str, partition: int, epoch: int, first_seq: int, last_seq: int
    ) -> Verdict:
        """ACCEPT, a duplicate (with the original base offset) or a rejection."""
        entry = self.entries.get((pid, topic, partition))
        if entry is None:
            return ACCEPT
        if epoch < entry.epoch:
            return INVALID_EPOCH
        if epoch > entry.epoch:
            return ACCEPT if first_seq == 0 else OUT_OF_ORDER
        for f, last, base in entry.batches:
            if f == first_seq and last == last_seq:
                return Verdict(ErrorCode.none, base, True)
        if entry.batches and first_seq != (entry.batches[-1][1] + 1) % SEQ_MODULUS:
            return OUT_OF_ORDER
        return ACCEPT

    def record(
        self,
        pid: int,
        topic: str,
        partition: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        base_offset: int,
        log_index: int = 0,
    ) -> None:
        """Remember an accepted batch (call only after check() said ACCEPT); log_index:
        the Raft entry holding it (what producer expiry compares with)."""
        key = (pid, topic, partition)
        entry = self.entries.get(key)
        if entry is None or entry.epoch != epoch:
            entry = self.entries[key] = ProducerEntry(epoch)
        entry.batches.append((first_seq, last_seq, base_offset))
        entry.last_index = log_index

    def last_indexes(self) -> dict[int, int]:
        """producer id -> the log index of its latest accepted batch, any partition."""
        out: dict[int, int] = {}
        for (pid, _t, _p), entry in self.entries.items():
            if entry.last_index > out.get(pid, -1):
                out[pid] = entry.last_index
        return out

    def expire(self, expired: list[tuple[int, int]]) -> int:
        """Forget each (pid, last index) producer's state in every partition, unless it
        appended after that index (it came back); returns how many entries went.
        A forgotten producer that returns is accepted as unknown (see check())."""
        cutoff = dict(expired)
        gone = [
            k for k, e in self.entries.items() if k[0] in cutoff and e.last_index <= cutoff[k[0]]
        ]
        for k in gone:
            del self.entries[k]
        return len(gone)

    def drop_partition(self, topic: str, partition: int) -> None:
        for key in [k for k in self.entries if k[1] == topic and k[2] == partition]:
            del self.entries[key]

    def to_json(self) -> list:
        return [
            [p, t, q, e.epoch, [list(b) for b in e.batches], e.last_index]
            for (p, t, q), e in self.entries.items()
        ]

    @classmethod
    def from_json(cls, rows: list) -> ProducerTable:
        table = cls()
        for p, t, q, epoch, batches, *rest in rows:
            entry = ProducerEntry(epoch, rest[0] if rest else 0)
            entry.batches.extend(tuple(b) for b in batches)
            table.entries[(p, t, q)] = entry
        return table
