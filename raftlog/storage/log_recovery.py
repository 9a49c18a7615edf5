"""LogStore's crash recovery (split out of log_store.py; behaviour unchanged).

Run once by LogStore.open, before any other use: redo an interrupted suffix
truncation from its durable intent, then rebuild the segment table from the
files and the index, scanning the unindexed tail from the last checkpoint and
cutting a torn tail (bytes after the last completed fdatasync that never fully
reached the disk). Damage before the last sync is CorruptLogError, naming the
file and byte offset, with options.on_corruption "stop"; with "repair" (the
default) recovery keeps the intact prefix of the log and cuts the rest
(`_repair`, see repair.py for the marker that makes this crash-safe), and
`repair` tells the runtime, which then runs the group as a replacement.

A mixin: the state it fills in (segments, bounds, pending locations) is
LogStore's, documented there.
"""

from __future__ import annotations

import logging
import os

from raftlog.entry import EntryType
from raftlog.storage.errors import CorruptLogError
from raftlog.storage.index import Location
from raftlog.storage.repair import Repair, marker_path, read_marker, write_marker
from raftlog.storage.segments import FILE_HEADER_SIZE, Segment, fsync_dir, parse_segment_name

log = logging.getLogger("raftlog.storage")


class RecoveryMixin:
    """LogStore's recovery methods (see log_store.py for the fields they set)."""

    def _recover(self) -> None:
        self._hard_state = self._index.hard_state()
        self._snapshot = self._index.snapshot()
        first = self._index.first_index()
        if first is not None:
            self._first, self._prev_term = first
        intent = self._index.truncate_intent()
        if intent is not None:
            log.warning(
                "storage.recover redo_truncate from_index=%d segment=%d position=%d",
                *intent,
            )
            self._cut_files(intent)
            with self._index.writer(durable=True) as w:
                w.set_truncate_intent(None)
        marker = read_marker(self.directory)
        if marker is None:
            try:
                self._recover_segments()
                return
            except CorruptLogError as exc:
                if self.options.on_corruption != "repair":
                    raise
                limit, reason = None, str(exc)
        else:
            limit, reason = marker
            if self.options.on_corruption != "repair":
                raise CorruptLogError(
                    marker_path(self.directory),
                    0,
                    f"entries from {limit} on were found damaged ({reason})",
                )
        self._repair(limit, reason)

    # ---------------------------------------------------------------- repair

    def _forget_recovered(self) -> None:
        """Drop what a failed recovery attempt put in memory (not the files)."""
        for seg in self._segments:
            seg.close()
        self._segments, self._seg_firsts, self._active = [], [], None
        self._pending, self._pending_configs, self._pending_bytes = [], [], 0
        first = self._index.first_index()
        self._first, self._prev_term = first if first is not None else (1, 0)

    def _repair(self, limit: int | None, reason: str) -> None:
        """Keep the longest intact prefix of the log from the first index (every frame
        CRC-valid, dense, terms not decreasing, below `limit` if a read found entry
        `limit` damaged), cut everything after it, rebuild the index from the files.

        Order on disk (crash-safe at every step, see repair.py): the marker naming
        the first entry cut is durable first; then the files are cut; then the
        index forgets every location, sealed segment and the checkpoint, durably;
        then the normal recovery rescans the (now clean) files. The marker stays
        until the runtime has made the group's new incarnation durable."""
        self._forget_recovered()
        first = self._first
        sealed = self._index.sealed_segments()
        checkpoint = self._index.checkpoint()
        dropped_last = max(
            [first - 1, limit or 0]
            + [s.last_index for s in sealed.values()]
            + ([checkpoint.last_index] if checkpoint else [])
        )
        on_disk = self._segment_files()
        # The file holding `first` is the last one named at or below it (a prefix
        # truncation leaves entries below first in it; files wholly below are leftovers).
        start = [f for f in on_disk if f <= first]
        keep_from = start[-1] if start else None
        kept_last = first - 1
        cut: tuple[int, int] | None = None  # (segment, byte position) of the first byte cut
        if keep_from is not None:
            expect, term = keep_from, 0
            for f in (f for f in on_disk if f >= keep_from):
                if f != expect:
                    break  # a gap: the files from here on are cut
                seg = Segment(self._seg_dir, f)
                try:
                    seg.read_header()
                    frames, stop = seg.scan(FILE_HEADER_SIZE, f, term, self.options.max_entry_bytes)
                    if stop is not None:  # what the damaged file held after the damage
                        tail = seg.last_valid_frame_after(
                            stop.position, self.options.max_entry_bytes
                        )
                        dropped_last = max(dropped_last, tail[0] if tail else 0)
                except CorruptLogError:
                    break  # a damaged file header: this file and the later ones are cut
                finally:
                    seg.close()
                dropped_last = max(dropped_last, frames[-1].index if frames else 0)
                ok = [fr for fr in frames if limit is None or fr.index < limit]
                if ok:
                    expect, term = ok[-1].index + 1, ok[-1].term
                    kept_last = max(kept_last, ok[-1].index)
                if len(ok) < len(frames) or stop is not None:
                    nxt = frames[len(ok)].position if len(ok) < len(frames) else stop.position
                    cut = (f, nxt)
                    break
        if kept_last < first:
            kept_last, cut = first - 1, None  # nothing of [first, ...] is intact
        damaged_from = write_marker(self.directory, kept_last + 1, reason)
        if damaged_from <= kept_last:  # an earlier finding names a lower entry: cut there
            self._repair(damaged_from, reason)
            return
        log.error(
            "storage.repair dir=%s: %s; keeping entries %d..%d, cutting from %d on "
            "(the runtime fetches them from the leader)",
            self.directory,
            reason,
            first,
            kept_last,
            kept_last + 1,
        )
        self._cut_after(kept_last, keep_from, cut, on_disk)
        with self._index.writer(durable=True) as w:
            w.delete_from(0)
            for seg_first in sealed:
                w.forget_segment(seg_first)
            w.set_checkpoint(None)
            w.set_first_index(first, self._prev_term)
        self._recover_segments()
        self.repair = Repair(reason, first, self._last, self._last + 1, dropped_last)

    def _cut_after(
        self,
        kept_last: int,
        keep_from: int | None,
        cut: tuple[int, int] | None,
        on_disk: list[int],
    ) -> None:
        """Delete every segment file not needed for entries [first, kept_last] and cut
        the one holding kept_last after its frame; durable on return."""
        keep_files = set()
        if kept_last >= self._first and keep_from is not None:
            keep_files = {f for f in on_disk if keep_from <= f <= kept_last}
        for f in on_disk:
            if f not in keep_files:
                self._delete_file(f, sync_dir=False)
        if cut is not None and cut[0] in keep_files:
            seg = Segment(self._seg_dir, cut[0])
            if cut[1] <= FILE_HEADER_SIZE:
                self._delete_file(cut[0], sync_dir=False)
            elif seg.file_size() > cut[1]:
                seg.truncate(cut[1])
        fsync_dir(self._seg_dir)

    def _segment_files(self) -> list[int]:
        firsts = []
        for name in os.listdir(self._seg_dir):
            first = parse_segment_name(name)
            if first is not None:
                firsts.append(first)
        return sorted(firsts)

    def _recover_segments(self) -> None:
        on_disk = self._segment_files()
        sealed = self._index.sealed_segments()
        checkpoint = self._index.checkpoint()

        # Sealed segments wholly below the first index are leftovers of a prefix truncation.
        for first, info in sorted(sealed.items()):
            if info.last_index < self._first:
                self._delete_file(first)
                with self._index.writer(durable=False) as w:
                    w.forget_segment(first)
                del sealed[first]
                if first in on_disk:
                    on_disk.remove(first)

        for first, info in sorted(sealed.items()):
            if first not in on_disk:
                raise CorruptLogError(
                    os.path.join(self._seg_dir, f"{first:020d}.seg"),
                    0,
                    "sealed segment file is missing",
                )
            seg = Segment(self._seg_dir, first)
            seg.read_header()
            if seg.file_size() < info.end:
                raise CorruptLogError(
                    seg.path, seg.file_size(), f"file is shorter than its indexed end {info.end}"
                )
            seg.end, seg.last_index = info.end, info.last_index
            self._segments.append(seg)

        # Everything after the checkpoint is rebuilt by scanning: the rest of the
        # checkpoint's segment, then every later (unsealed) file.
        if checkpoint is not None:
            expect, prev_term = checkpoint.last_index + 1, checkpoint.last_term
            self._pending_base = expect
            if checkpoint.segment not in sealed:
                if checkpoint.segment not in on_disk:
                    raise CorruptLogError(
                        os.path.join(self._seg_dir, f"{checkpoint.segment:020d}.seg"),
                        0,
                        "segment file named by the index checkpoint is missing",
                    )
                seg = Segment(self._seg_dir, checkpoint.segment)
                seg.read_header()
                if seg.file_size() < checkpoint.end:
                    raise CorruptLogError(
                        seg.path,
                        seg.file_size(),
                        f"file is shorter than its checkpointed end {checkpoint.end}",
                    )
                seg.end, seg.last_index = checkpoint.end, checkpoint.last_index
                seg.last_term = checkpoint.last_term
                self._segments.append(seg)
            to_scan = [f for f in on_disk if f > checkpoint.segment]
            tail_seg = self._segments[-1] if self._segments else None
        else:
            sealed_last = self._segments[-1] if self._segments else None
            expect = (
                sealed_last.last_index + 1
                if sealed_last
                else (on_disk[0] if on_disk else self._first)
            )
            prev_term = self._prev_term
            self._pending_base = expect
            to_scan = [f for f in on_disk if f not in sealed]
            tail_seg = None
            if not sealed and on_disk and on_disk[0] > self._first:
                # no index locations: the files must hold every entry from the first
                # index (an index lost or rebuilt cannot say what the gap held)
                raise CorruptLogError(
                    os.path.join(self._seg_dir, f"{on_disk[0]:020d}.seg"),
                    0,
                    f"the log should start at entry {self._first}, its first segment "
                    f"starts at {on_disk[0]} (index lost?)",
                )

        # Scan the rest of the checkpoint's segment (unless it is sealed: then
        # its end is final), then each later file in order.
        plan: list[tuple[Segment, int, bool]] = []
        if tail_seg is not None and checkpoint is not None and checkpoint.segment not in sealed:
            plan.append((tail_seg, tail_seg.end, False))
        for first in to_scan:
            plan.append((Segment(self._seg_dir, first), FILE_HEADER_SIZE, True))

        max_frame = self.options.max_entry_bytes
        for i, (seg, start, is_new) in enumerate(plan):
            later = [p[0] for p in plan[i + 1 :]]
            if is_new:
                header_ok = self._check_new_file(seg, expect, later)
                if not header_ok:
                    break
            frames, stop = seg.scan(start, expect, prev_term, max_frame)
            for fr in frames:
                self._pending.append(Location(seg.first_index, fr.position, fr.length, fr.term))
                self._pending_bytes += fr.length
                if fr.etype == EntryType.CONFIG:
                    self._pending_configs.append(fr.index)
            if frames:
                expect = frames[-1].index + 1
                prev_term = frames[-1].term
                seg.last_index, seg.last_term = frames[-1].index, frames[-1].term
                seg.end = frames[-1].position + frames[-1].length
            elif is_new:
                seg.end = FILE_HEADER_SIZE
            if is_new:
                self._segments.append(seg)
            self.stats.recovered_tail_entries += len(frames)
            if stop is not None:
                self._cut_torn_tail(seg, stop.position, stop.reason, expect, later)
                break
        self._last, self._last_term = expect - 1, prev_term
        if self._last < self._first - 1:
            raise CorruptLogError(
                self._seg_dir, 0, f"log ends at {self._last} but the first index is {self._first}"
            )
        self._seg_firsts = [s.first_index for s in self._segments]
        # What the scan accepted may exist only in the page cache (a process
        # killed between write and fdatasync): make it durable before anyone
        # relies on it.
        for seg, _start, _new in plan:
            if seg in self._segments:
                fd = os.open(seg.path, os.O_RDONLY)
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
        self._written = self._last
        self._sync_base = self._last + 1
        if self._segments and self._segments[-1].first_index not in sealed:
            self._active = self._segments[-1]
            self._active.open_for_append()
        log.info(
            "storage.open dir=%s first=%d last=%d segments=%d scanned_tail_entries=%d",
            self.directory,
            self._first,
            self._last,
            len(self._segments),
            self.stats.recovered_tail_entries,
        )

    def _check_new_file(self, seg: Segment, expect: int, later: list[Segment]) -> bool:
        """Checks an unsealed file found after the checkpoint; False if it was a torn creation."""
        if seg.first_index != expect:
            raise CorruptLogError(
                seg.path,
                0,
                f"segment should start at entry {expect}, its name says {seg.first_index}",
            )
        try:
            seg.read_header()
        except CorruptLogError:
            if later or seg.file_size() > FILE_HEADER_SIZE:
                raise
            # Crash while creating the file: it never held an entry.
            log.warning("storage.recover remove_torn_segment path=%s", seg.path)
            os.unlink(seg.path)
            fsync_dir(self._seg_dir)
            return False
        return True

    def _cut_torn_tail(
        self, seg: Segment, position: int, reason: str, expect: int, later: list[Segment]
    ) -> None:
        """A scan stopped at position (entry `expect`): cut it if it is a torn
        tail, raise CorruptLogError if a sync completed after it was written."""
        max_frame = self.options.max_entry_bytes
        found = seg.highest_sync_base_after(position, max_frame)
        for other in later:
            other_found = other.highest_sync_base_after(FILE_HEADER_SIZE - 1, max_frame)
            if other_found is not None:
                raise CorruptLogError(
                    seg.path, position, f"{reason}; a later segment {other.path} holds valid data"
                )
        if found is not None and found[0] > expect:
            raise CorruptLogError(
                seg.path,
                position,
                f"{reason}; entry {expect} was synced (a valid frame written after a later "
                f"sync follows at byte {found[1]})",
            )
        size = seg.file_size()
        log.warning(
            "storage.recover cut_torn_tail path=%s position=%d bytes=%d entry=%d reason=%r",
            seg.path,
            position,
            size - position,
            expect,
            reason,
        )
        self.stats.torn_tail_bytes_cut += size - position
        seg.truncate(position)
        for other in later:
            log.warning("storage.recover remove_empty_segment path=%s", other.path)
            os.unlink(other.path)
        if later:
            fsync_dir(self._seg_dir)
