"""The core's view of the log: durable entries (via `LogReader`) + an unstable tail.

Layout, by index:

    [ reader: first_index .. ]  [ unstable.snapshot? ]  [ unstable.entries: offset .. ]

The unstable part is always the *tail* of the log: once an entry is appended
here, every later index comes from `unstable` too, and if `offset` is at or
below the reader's last index, the reader's entries from `offset` on are stale
(a truncation the runtime has not persisted yet) and are shadowed.

`stable_to(index, term)` drops unstable entries the runtime reports durable, so
the core never holds the whole log: only what is in flight to the disk.

Invariants:
  * committed <= last_index(); committed never decreases.
  * applied <= applying <= committed.
  * no entry at or below `committed` is ever truncated (a conflict there raises).
"""

from __future__ import annotations

from raftlog.core.log_reader import LogReader, Snapshot, entry_size
from raftlog.entry import LogEntry


class RaftSafetyError(AssertionError):
    """A condition Raft proves impossible happened: a bug or corrupt storage."""


class Unstable:
    """Entries (and possibly a received snapshot) not yet reported durable.

    `in_progress` is the last index already handed to the runtime in a Ready
    (so the next Ready carries only newer entries).
    """

    __slots__ = ("entries", "in_progress", "offset", "snapshot", "snapshot_in_progress")

    def __init__(self, offset: int) -> None:
        self.offset = offset
        self.entries: list[LogEntry] = []
        self.snapshot: Snapshot | None = None
        self.snapshot_in_progress = False
        self.in_progress = offset - 1

    def last_index(self) -> int | None:
        if self.entries:
            return self.offset + len(self.entries) - 1
        if self.snapshot is not None:
            return self.snapshot.meta.index
        return None

    def term_at(self, index: int) -> int | None:
        if index < self.offset:
            s = self.snapshot
            if s is not None and s.meta.index == index:
                return s.meta.term
            return None
        i = index - self.offset
        if i < len(self.entries):
            return self.entries[i].term
        return None

    def truncate_and_append(self, ents: list[LogEntry]) -> None:
        first = ents[0].index
        if first == self.offset + len(self.entries):
            self.entries.extend(ents)
        elif first <= self.offset:
            # replaces the whole unstable part (and shadows stale stable entries)
            self.offset = first
            self.entries = list(ents)
        else:
            del self.entries[first - self.offset :]
            self.entries.extend(ents)
        self.in_progress = min(self.in_progress, first - 1)

    def stable_to(self, index: int, term: int) -> None:
        t = self.term_at(index)
        if t is None or t != term or index < self.offset:
            return  # superseded by a truncation, or a snapshot index
        del self.entries[: index + 1 - self.offset]
        self.offset = index + 1
        self.in_progress = max(self.in_progress, index)

    def restore(self, snap: Snapshot) -> None:
        self.offset = snap.meta.index + 1
        self.entries = []
        self.snapshot = snap
        self.snapshot_in_progress = False
        self.in_progress = snap.meta.index


class RaftLog:
    """Log operations the protocol needs, over reader + unstable."""

    def __init__(self, reader: LogReader, committed: int = 0, applied: int = 0) -> None:
        self.reader = reader
        self.unstable = Unstable(reader.last_index() + 1)
        first = reader.first_index()
        self.committed = max(committed, first - 1)
        if self.committed > reader.last_index():
            raise RaftSafetyError(
                f"commit {self.committed} past last durable index {reader.last_index()}"
            )
        self.applied = max(applied, first - 1)
        if self.applied > self.committed:
            raise RaftSafetyError(f"applied {self.applied} > committed {self.committed}")
        self.applying = self.applied

    # indexes ---------------------------------------------------------------
    def first_index(self) -> int:
        s = self.unstable.snapshot
        if s is not None:
            return s.meta.index + 1
        return self.reader.first_index()

    def last_index(self) -> int:
        u = self.unstable.last_index()
        if u is not None:
            return u
        return self.reader.last_index()

    def stable_last(self) -> int:
        """Last index known durable locally (what the leader may count for itself).

        Everything below the unstable offset is stable, except while a received
        snapshot is pending: then the reader is stale and the min keeps the
        answer at or below the (committed) snapshot index.
        """
        return min(self.unstable.offset - 1, self.reader.last_index())

    def term_at(self, index: int) -> int | None:
        """Term of `index`, or None if compacted away or beyond the end."""
        if index < self.first_index() - 1 or index > self.last_index():
            return None
        if index == 0:
            return 0
        t = self.unstable.term_at(index)
        if t is not None:
            return t
        if index >= self.unstable.offset:
            return None
        return self.reader.term_at(index)

    def last_term(self) -> int:
        t = self.term_at(self.last_index())
        return t if t is not None else 0

    def match_term(self, index: int, term: int) -> bool:
        t = self.term_at(index)
        return t is not None and t == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Election restriction: the candidate's log is at least as up to date."""
        my_term = self.last_term()
        return last_term > my_term or (last_term == my_term and last_index >= self.last_index())

    # reading ---------------------------------------------------------------
    def slice(self, lo: int, hi: int, max_bytes: int) -> list[LogEntry] | None:
        """Entries [lo, hi) up to max_bytes (at least one); None if lo was compacted."""
        if lo >= hi:
            return []
        if lo < self.first_index():
            return None
        if hi > self.last_index() + 1:
            raise RaftSafetyError(f"slice [{lo}, {hi}) beyond last {self.last_index()}")
        out: list[LogEntry] = []
        u = self.unstable
        if lo < u.offset:
            stable_hi = min(hi, u.offset)
            out = self.reader.entries(lo, stable_hi, max_bytes)
            if not out:
                return None
            if len(out) < stable_hi - lo or stable_hi == hi:
                return out
        size = sum(entry_size(e) for e in out)
        start = max(lo, u.offset) - u.offset
        for e in u.entries[start : hi - u.offset]:
            size += entry_size(e)
            if out and size > max_bytes:
                break
            out.append(e)
        return out

    def find_conflict(self, ents: list[LogEntry]) -> int:
        """Index of the first entry that is new or conflicts (same index, other
        term); 0 if every entry already matches."""
        for e in ents:
            if not self.match_term(e.index, e.term):
                return e.index
        return 0

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """Largest i <= index with term_at(i) <= term, and that term (0 if unknown)."""
        while index > 0:
            t = self.term_at(index)
            if t is None:
                return index, 0
            if t <= term:
                return index, t
            index -= 1
        return 0, 0

    # writing ---------------------------------------------------------------
    def append(self, ents: list[LogEntry]) -> int:
        """Truncate from ents[0].index and append. Never below committed."""
        if not ents:
            return self.last_index()
        first = ents[0].index
        if first - 1 < self.committed:
            raise RaftSafetyError(f"truncating at {first} below commit {self.committed}")
        if first > self.last_index() + 1:
            raise RaftSafetyError(f"gap: append at {first} after {self.last_index()}")
        self.unstable.truncate_and_append(ents)
        return self.last_index()

    def maybe_append(
        self, prev_index: int, prev_term: int, commit: int, ents: list[LogEntry]
    ) -> int | None:
        """Follower side of AppendEntries. Returns the last index verified to match
        the leader, or None if (prev_index, prev_term) does not match.

        Only the suffix from the first CONFLICTING entry is replaced; entries that
        match are kept, so a stale or duplicated append never erases newer ones.
        """
        if not self.match_term(prev_index, prev_term):
            return None
        last_new = prev_index + len(ents)
        ci = self.find_conflict(ents)
        if ci:
            if ci <= self.committed:
                raise RaftSafetyError(f"conflict at {ci} <= committed {self.committed}")
            self.append(ents[ci - prev_index - 1 :])
        self.commit_to(min(commit, last_new))
        return last_new

    def commit_to(self, index: int) -> bool:
        if index <= self.committed:
            return False
        if index > self.last_index():
            raise RaftSafetyError(f"commit {index} beyond last index {self.last_index()}")
        self.committed = index
        return True

    def maybe_commit(self, index: int, term: int) -> bool:
        """Leader: commit `index` only if its entry is from the current `term`
        (Raft 5.4.2 / Figure 8)."""
        if index > self.committed and self.term_at(index) == term:
            return self.commit_to(index)
        return False

    def restore(self, snap: Snapshot) -> None:
        """Replace the log with a snapshot received from the leader."""
        self.unstable.restore(snap)
        self.committed = snap.meta.index
        self.applying = self.applied = snap.meta.index

    # ready bookkeeping -----------------------------------------------------
    def unsent_entries(self) -> list[LogEntry]:
        u = self.unstable
        start = u.in_progress + 1 - u.offset
        if start >= len(u.entries):
            return []
        return u.entries[max(0, start) :]

    def has_unsent_entries(self) -> bool:
        u = self.unstable
        return u.in_progress + 1 - u.offset < len(u.entries)

    def has_next_committed(self) -> bool:
        return self.committed > self.applying

    def next_committed(self, max_bytes: int) -> list[LogEntry]:
        if self.committed <= self.applying:
            return []
        ents = self.slice(self.applying + 1, self.committed + 1, max_bytes)
        if ents is None:
            raise RaftSafetyError(f"committed entry {self.applying + 1} was compacted")
        return ents
