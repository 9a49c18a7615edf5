"""Read-only integrity check of a data directory (`raftsink verify DIR`).

Scans every segment frame by frame (CRC-32C, dense indexes, monotonic terms),
checks the LMDB index against the frames it points to, and reports what a
restart would do: a torn tail it would cut, or, for damage, what a repair would
keep (the intact prefix) and fetch from the peers (`repair_plan`), or that the
node stops (storage.on_corruption=stop, a single-node cluster). Nothing is modified. Unlike LogStore.open this IS a full scan.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from raftlog.entry import HardState, SnapshotMeta
from raftlog.storage.errors import CorruptLogError, DataDirLockedError
from raftlog.storage.index import LogIndex
from raftlog.storage.options import StorageOptions
from raftlog.storage.repair import read_marker, write_marker
from raftlog.storage.segments import FILE_HEADER_SIZE, FrameInfo, Segment, parse_segment_name


@dataclass
class VerifyReport:
    directory: str
    segments: int = 0
    entries: int = 0
    bytes: int = 0
    first_index: int = 1
    last_index: int = 0
    indexed_entries: int = 0
    hard_state: tuple[int, int, int] = (0, 0, 0)
    snapshot_index: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    identity_stamp: int = 0
    """The incarnation stamped in the index (0: none)."""
    identity_file: int | None = None
    """The incarnation IDENTITY records for this log (None: no IDENTITY beside it)."""

    intact_last: int | None = None
    """Damage found: the last entry of the intact prefix a repair keeps (None: no damage)."""
    highest_seen: int = 0
    """The highest entry index any valid frame or the index names (what a repair cuts up to)."""

    def damaged(self, at_entry: int) -> None:
        """Damage affects entry at_entry: the intact prefix ends before it."""
        last = max(at_entry - 1, self.first_index - 1)
        self.intact_last = last if self.intact_last is None else min(self.intact_last, last)

    def repair_plan(self) -> dict | None:
        """What a repair would do (None: nothing damaged): the entries kept, the first
        entry fetched from the peers, and the last entry the damaged log held."""
        if self.intact_last is None:
            return None
        return {
            "kept": [self.first_index, self.intact_last],
            "fetched_from": self.intact_last + 1,
            "cut_up_to": max(self.highest_seen, self.intact_last + 1),
        }

    def repair(self) -> str:
        """What a restart and the cluster would do about this storage (issue 12)."""
        plan = self.repair_plan()
        if plan is not None:
            lo, hi = plan["kept"]
            kept = f"keeps entries {lo}..{hi}" if hi >= lo else "keeps no entries"
            return (
                f"{kept} (and the snapshots up to {hi}), cuts entries "
                f"{plan['fetched_from']}..{plan['cut_up_to']}, and runs as a replacement "
                "under a new incarnation (no vote, counts toward no quorum) until the leader "
                f"has sent it entries {plan['fetched_from']} onward (AppendEntries or a "
                "snapshot) and admitted it again. Only with storage.on_corruption=repair "
                "(the default), node identity on and another voter; otherwise (stop mode, "
                "a single-node cluster) the node stops at start, exit code 3"
            )
        if self.problems:
            return "the node stops at start, exit code 3 (not a raftsink data directory?)"
        commit = self.hard_state[2]
        floor = max(self.last_index, self.snapshot_index)
        if commit > floor:
            return (
                f"the log ends at {floor}, below its commit checkpoint {commit}: the node starts "
                f"as a replacement (new incarnation, keeps entries up to {floor}), votes only "
                "once the leader has caught it up and admitted it"
            )
        if self.identity_file is not None and self.identity_stamp != self.identity_file:
            return (
                "the index's identity stamp does not match IDENTITY (index lost or rebuilt, so "
                "the vote record too): the node starts as a replacement under a new incarnation"
            )
        return "nothing to repair"

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_text(self) -> str:
        term, vote, commit = self.hard_state
        lines = [
            f"data directory: {self.directory}",
            f"segments: {self.segments}   frames: {self.entries}   bytes: {self.bytes}",
            f"log: first={self.first_index} last={self.last_index} "
            f"(indexed in LMDB: {self.indexed_entries})",
            f"hard state: term={term} vote={vote} commit={commit}   snapshot: index={self.snapshot_index}",
        ]
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"PROBLEM: {p}" for p in self.problems]
        if self.identity_stamp or self.identity_file is not None:
            lines.append(
                f"identity: index stamp {self.identity_stamp:016x}, IDENTITY "
                + (f"{self.identity_file:016x}" if self.identity_file else "has no entry")
            )
        lines.append(f"repair: {self.repair()}")
        lines.append("result: OK" if self.ok else f"result: {len(self.problems)} problem(s)")
        return "\n".join(lines)


def verify_data_dir(
    directory: str,
    options: StorageOptions | None = None,
    progress: Callable[[str], None] | None = None,
) -> VerifyReport:
    """Check directory without changing it; DataDirLockedError if a node has it open."""
    opts = options or StorageOptions()
    report = VerifyReport(directory)
    seg_dir = os.path.join(directory, "segments")
    index_dir = os.path.join(directory, "index")
    if not os.path.isdir(seg_dir):
        report.problems.append("not a raftsink data directory (segments/ missing)")
        return report
    with _held(directory, "verifying"):
        if not os.path.isdir(index_dir):
            report.notes.append(
                "the LMDB index is missing: a restart rebuilds it from the segments; its "
                "vote record is lost, so the node runs as a replacement until re-admitted"
            )
            _verify(_EmptyIndex(), seg_dir, opts, report, progress or (lambda _msg: None))
            return report
        index = LogIndex(index_dir, opts.lmdb_map_bytes, readonly=True)
        try:
            _verify(index, seg_dir, opts, report, progress or (lambda _msg: None))
        finally:
            index.close()
    return report


@contextlib.contextmanager
def _held(directory: str, doing: str) -> Iterator[None]:
    """Hold the data directory's LOCK (the one a running node holds) for the block;
    DataDirLockedError at once if a node has it."""
    lock_fd = os.open(os.path.join(directory, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataDirLockedError(
                f"{directory} is open in a running node; stop it before {doing}"
            ) from None
        yield
    finally:
        os.close(lock_fd)


def schedule_repair(directory: str, report: VerifyReport) -> int | None:
    """Make the next start of the node repair the damage `report` found (`raftsink
    verify --repair`): durably record the REPAIR marker at the first entry the intact
    prefix does not hold, exactly as a read that found the damage at run time would.
    Cuts nothing itself: the start's recovery does the repair (keeping the prefix,
    new incarnation, caught up by the leader), under storage.on_corruption. Returns
    the entry the marker names, None when the report found no damage to repair.
    DataDirLockedError if a node has the directory open."""
    plan = report.repair_plan()
    if plan is None:
        return None
    with _held(directory, "repairing"):
        return write_marker(
            directory,
            plan["fetched_from"],
            f"raftsink verify --repair found damage from entry {plan['fetched_from']}",
        )


class _EmptyIndex:
    """What a lost index reads as (LogIndex's read surface that _verify uses)."""

    def first_index(self) -> None:
        return None

    def hard_state(self) -> HardState:
        return HardState()

    def identity(self) -> int:
        return 0

    def snapshot(self) -> SnapshotMeta:
        return SnapshotMeta()

    def truncate_intent(self) -> None:
        return None

    def iter_locations(self) -> list:
        return []

    def sealed_segments(self) -> dict:
        return {}


def _identity_file_incarnation(log_dir: str) -> int | None:
    """The incarnation the IDENTITY file next to a single-group log records for it."""
    import json

    from raftlog.storage.identity import FILE_NAME

    path = os.path.join(os.path.dirname(os.path.abspath(log_dir)), FILE_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return int(data.get("groups", {}).get("0", {}).get("incarnation", 0))
    except (OSError, ValueError, AttributeError):
        return None


def _verify(
    index: LogIndex | _EmptyIndex,
    seg_dir: str,
    opts: StorageOptions,
    report: VerifyReport,
    progress: Callable[[str], None],
) -> None:
    first = index.first_index()
    if first is not None:
        report.first_index = first[0]
    hs = index.hard_state()
    report.hard_state = (hs.term, hs.vote, hs.commit)
    report.identity_stamp = index.identity()
    report.identity_file = _identity_file_incarnation(os.path.dirname(seg_dir))
    report.snapshot_index = index.snapshot().index
    marker = read_marker(os.path.dirname(seg_dir))
    if marker is not None:
        report.problems.append(
            f"a read found entries from {marker[0]} on damaged ({marker[1]}); the next "
            "start repairs them"
        )
        report.damaged(marker[0])
    intent = index.truncate_intent()
    if intent is not None:
        report.notes.append(
            f"an interrupted truncation from entry {intent.from_index} will be redone on open"
        )
    firsts = sorted(
        f for f in (parse_segment_name(n) for n in os.listdir(seg_dir)) if f is not None
    )
    frames: dict[int, tuple[int, FrameInfo]] = {}
    expect: int | None = None
    term = 0
    if first is None and firsts and firsts[0] > report.first_index:
        report.problems.append(
            f"the index does not say where the log starts and the first segment starts at "
            f"entry {firsts[0]} (index lost?): entries before it cannot be vouched for"
        )
        report.damaged(report.first_index)
    for n, seg_first in enumerate(firsts):
        seg = Segment(seg_dir, seg_first)
        progress(f"scanning {seg.path} ({n + 1}/{len(firsts)})")
        report.segments += 1
        try:
            seg.read_header()
        except CorruptLogError as exc:
            report.problems.append(str(exc))
            report.damaged(expect if expect is not None else seg_first)
            expect = None  # the next file's frames are counted from its name
            continue
        if expect is not None and seg_first != expect:
            report.problems.append(f"{seg.path}: starts at entry {seg_first}, expected {expect}")
            report.damaged(min(seg_first, expect))
        found, stop = seg.scan(FILE_HEADER_SIZE, seg_first, term, opts.max_entry_bytes)
        for fr in found:
            frames[fr.index] = (seg_first, fr)
            report.bytes += fr.length
        report.entries += len(found)
        if found:
            expect, term = found[-1].index + 1, found[-1].term
        else:
            expect = seg_first
        if stop is not None:
            later = seg.highest_sync_base_after(stop.position, opts.max_entry_bytes)
            is_last = n == len(firsts) - 1
            if (later is None or later[0] <= expect) and is_last:
                report.notes.append(
                    f"torn tail in {seg.path} at byte {stop.position} ({stop.reason}); "
                    f"{seg.file_size() - stop.position} bytes would be cut on open"
                )
            else:
                report.problems.append(
                    str(CorruptLogError(seg.path, stop.position, stop.reason))
                    + (f"; a valid frame follows at byte {later[1]}" if later is not None else "")
                )
                report.damaged(expect)
                tail = seg.last_valid_frame_after(stop.position, opts.max_entry_bytes)
                if tail is not None:
                    report.highest_seen = max(report.highest_seen, tail[0])
        seg.close()
    report.last_index = (expect - 1) if expect is not None else report.first_index - 1
    report.highest_seen = max(report.highest_seen, report.last_index, hs.commit)

    progress("checking the LMDB index against the segments")
    for idx, loc in index.iter_locations():
        if idx < report.first_index:
            continue
        report.indexed_entries += 1
        got = frames.get(idx)
        report.highest_seen = max(report.highest_seen, idx)
        if got is None:
            report.problems.append(f"index entry {idx} points to a frame that does not exist")
            report.damaged(idx)
            continue
        seg_first, fr = got
        if (loc.segment, loc.position, loc.length, loc.term) != (
            seg_first,
            fr.position,
            fr.length,
            fr.term,
        ):
            report.problems.append(f"index entry {idx} disagrees with its frame: {loc} vs {fr}")
            report.damaged(idx)
    for seg_first, sealed in index.sealed_segments().items():
        if seg_first not in firsts and sealed.last_index >= report.first_index:
            report.problems.append(f"sealed segment starting at {seg_first} is missing")
            report.damaged(max(seg_first, report.first_index))
            report.highest_seen = max(report.highest_seen, sealed.last_index)
