"""The read-only view of durable state that the core needs, and an in-memory one.

The core never writes storage. It reads *stable* (durable) entries through
`LogReader`; entries it appended but that the runtime has not yet reported
durable live in the core's `Unstable` buffer. The runtime implements
`LogReader` over its real storage; `MemoryStorage` is the reference
implementation used by tests and the simulator (it is pure Python, no I/O).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from raftlog.entry import HardState, LogEntry, SnapshotMeta

ENTRY_OVERHEAD = 16
"""Bytes charged per entry on top of its payload for batching limits."""


def entry_size(e: LogEntry) -> int:
    return len(e.data) + ENTRY_OVERHEAD


class Snapshot(NamedTuple):
    """A snapshot: its metadata (index, term, membership bytes) and the
    application's opaque state bytes."""

    meta: SnapshotMeta
    data: bytes


class LogReader(Protocol):
    """Read-only access to the durable log.

    Invariants the core relies on: entries are dense in
    [first_index(), last_index()]; term_at(first_index() - 1) is the snapshot term;
    everything visible here is durable.
    """

    def first_index(self) -> int:
        """First entry still in the log (snapshot.index + 1 when compacted)."""
        ...

    def last_index(self) -> int:
        """Last stable entry (snapshot.index when the log is empty)."""
        ...

    def term_at(self, index: int) -> int | None:
        """Term of entry `index`; snapshot.index -> snapshot.term; None if out of range."""
        ...

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[LogEntry]:
        """Entries [lo, hi), at least one if lo < hi, stopping once max_bytes is reached."""
        ...

    def snapshot_meta(self) -> SnapshotMeta:
        """Metadata of the latest snapshot (0/0 if none)."""
        ...

    def snapshot_chunk(self, offset: int, max_bytes: int) -> tuple[bytes, bool]:
        """Up to max_bytes of the latest snapshot's data from `offset`, and
        whether that chunk reaches the end. (Extension used by InstallSnapshot.)"""
        ...


class MemoryStorage:
    """In-memory durable state: hard state, snapshot, entries after it.

    Implements `LogReader` and the writes a runtime performs for a `Ready`:
    `apply_snapshot`, `append`, `set_hard_state`, and `compact` for
    application snapshots. Each write is "durable" as soon as it returns.
    """

    def __init__(self) -> None:
        self.hard_state = HardState()
        self.snapshot = Snapshot(SnapshotMeta(), b"")
        self._ents: list[LogEntry] = []  # _ents[i] has index snapshot.index + 1 + i

    # LogReader -----------------------------------------------------------
    def first_index(self) -> int:
        return self.snapshot.meta.index + 1

    def last_index(self) -> int:
        return self.snapshot.meta.index + len(self._ents)

    def term_at(self, index: int) -> int | None:
        off = self.snapshot.meta.index
        if index == off:
            return self.snapshot.meta.term
        if index < off or index > off + len(self._ents):
            return None
        return self._ents[index - off - 1].term

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[LogEntry]:
        off = self.snapshot.meta.index
        if lo <= off or hi > self.last_index() + 1:
            raise IndexError(f"entries [{lo}, {hi}) outside ({off}, {self.last_index()}]")
        out: list[LogEntry] = []
        size = 0
        for e in self._ents[lo - off - 1 : hi - off - 1]:
            size += entry_size(e)
            if out and size > max_bytes:
                break
            out.append(e)
        return out

    def snapshot_meta(self) -> SnapshotMeta:
        return self.snapshot.meta

    def snapshot_chunk(self, offset: int, max_bytes: int) -> tuple[bytes, bool]:
        data = self.snapshot.data
        chunk = data[offset : offset + max(1, max_bytes)]
        return chunk, offset + len(chunk) >= len(data)

    # writes ----------------------------------------------------------------
    def set_hard_state(self, hs: HardState) -> None:
        self.hard_state = hs

    def append(self, entries: list[LogEntry]) -> None:
        """Append, replacing any existing suffix from entries[0].index."""
        if not entries:
            return
        off = self.snapshot.meta.index
        first = entries[0].index
        if first > self.last_index() + 1:
            raise ValueError(f"gap: appending {first} after {self.last_index()}")
        if first <= off:  # already covered by the snapshot
            entries = [e for e in entries if e.index > off]
            if not entries:
                return
            first = entries[0].index
        del self._ents[first - off - 1 :]
        self._ents.extend(entries)

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Install a snapshot received from the leader: the whole log is replaced."""
        if snap.meta.index <= self.snapshot.meta.index:
            return
        self.snapshot = snap
        self._ents = []

    def compact(self, snap: Snapshot) -> None:
        """Record an application snapshot and drop the entries it covers."""
        off = self.snapshot.meta.index
        if snap.meta.index <= off:
            return
        if snap.meta.index > self.last_index():
            raise ValueError("compacting past the last stable entry")
        del self._ents[: snap.meta.index - off]
        self.snapshot = snap

    def all_entries(self) -> list[LogEntry]:
        """Test/simulator helper: the stable entries after the snapshot."""
        return list(self._ents)
