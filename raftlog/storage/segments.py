"""Append-only segment files and the entry frame format.

A segment file is named after the index of its first entry
(`00000000000000000001.seg`) and holds a file header followed by frames:

    file header (16 bytes): magic b"RSLOGSEG", version u32, reserved u32
    frame:
      0   u32  frame magic 0x52534652 ("RFSR"): lets recovery find frames after damage
      4   u32  CRC-32C of bytes [8, 33 + length): every field below and the payload
      8   u32  payload length
      12  u32  unsynced: how many entries before this one were written since
               the last completed fdatasync (capped at 2**32-1)
      16  u64  term
      24  u64  index
      32  u8   entry type
      33  ...  payload

All integers are little-endian. The CRC covers the length, so a frame whose
length field was damaged fails its check instead of pointing into garbage.

Torn tail or corruption? A power cut can damage only bytes written after the
last completed fdatasync. For a damaged frame k followed by a valid frame j,
j's sync base (j.index - j.unsynced) tells whether a sync completed between
writing k and writing j: if j's sync base <= k, k was still unsynced when j
was written, so the damage is a torn write; otherwise k was synced and its
damage is real corruption that must stop the node.

Invariants a segment keeps:
- frames are contiguous, indexes are dense and start at the file's name;
- terms never decrease along the file;
- bytes are only ever added at the end, or cut off the end (truncate_suffix);
  a frame is never rewritten in place.
"""

from __future__ import annotations

import contextlib
import os
import struct
from typing import NamedTuple

import crc32c

from raftlog.entry import EntryType, LogEntry
from raftlog.storage.errors import CorruptLogError

FILE_MAGIC = b"RSLOGSEG"
FILE_VERSION = 1
FILE_HEADER = struct.Struct("<8sII")
FILE_HEADER_SIZE = FILE_HEADER.size  # 16

FRAME_MAGIC = 0x52534652
_MAGIC_BYTES = struct.pack("<I", FRAME_MAGIC)
FRAME_HEADER = struct.Struct("<IIIIQQB")
FRAME_HEADER_SIZE = FRAME_HEADER.size  # 33
# length, unsynced, term, index, type: the header part the CRC covers (bytes 8..33)
_CRC_FIELDS = struct.Struct("<IIQQB")
_CRC_START = 8
_U32_MAX = 2**32 - 1

SEGMENT_SUFFIX = ".seg"
_VALID_TYPES = frozenset(int(t) for t in EntryType)
_TYPE_BY_CODE = {int(t): t for t in EntryType}

# IOV_MAX on Linux; pwritev refuses more buffers than this in one call.
_IOV_MAX = 1024


def segment_name(first_index: int) -> str:
    return f"{first_index:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """First index encoded in a segment file name, None if it is not one."""
    if not name.endswith(SEGMENT_SUFFIX):
        return None
    stem = name[: -len(SEGMENT_SUFFIX)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def frame_crc(
    length: int, unsynced: int, term: int, index: int, etype: int, payload: bytes | memoryview
) -> int:
    head = _CRC_FIELDS.pack(length, unsynced, term, index, etype)
    return crc32c.crc32c(payload, crc32c.crc32c(head))


def encode_frame_header(entry: LogEntry, sync_base: int) -> bytes:
    """The header bytes of entry's frame (the payload follows unchanged).

    sync_base: the first index written since the last completed fdatasync.
    """
    data = entry.data
    n = len(data)
    unsynced = min(entry.index - sync_base, _U32_MAX)
    crc = frame_crc(n, unsynced, entry.term, entry.index, entry.type, data)
    return FRAME_HEADER.pack(FRAME_MAGIC, crc, n, unsynced, entry.term, entry.index, entry.type)


class FrameInfo(NamedTuple):
    """Where one frame lies: what the LMDB index stores per entry."""

    index: int
    term: int
    position: int  # byte offset of the frame header in its segment file
    length: int  # whole frame: header + payload
    etype: int = 1  # entry type code (EntryType)


class ScanStop(NamedTuple):
    """Why a scan of a segment stopped before the end of the file (None if it didn't)."""

    position: int
    reason: str


_READ_CHUNK = 256 * 1024


def _decode_into(
    out: list[LogEntry],
    buf: bytes,
    index: int,
    stop: int,
    budget: int,
    path: str,
    file_pos: int,
) -> tuple[int, int, int]:
    """Decode whole frames from buf into out, starting with entry `index`.

    Stops before `stop`, once `budget` payload bytes are used (the entry that
    crosses it is included), or at the first frame not wholly in buf.
    Returns (next index, bytes consumed, payload bytes used). Any defect is
    corruption: callers only read entries that are published as written.
    """
    view = memoryview(buf)
    unpack = FRAME_HEADER.unpack_from
    crc_of = crc32c.crc32c
    append = out.append
    size = len(buf)
    off = used = 0
    while index < stop and used < budget and size - off >= FRAME_HEADER_SIZE:
        magic, crc, n, _unsynced, term, fidx, etype = unpack(buf, off)
        end = off + FRAME_HEADER_SIZE + n
        if magic != FRAME_MAGIC:
            raise CorruptLogError(path, file_pos + off, "bad frame magic")
        if end > size:
            break
        if crc_of(view[off + _CRC_START : end]) != crc:
            raise CorruptLogError(
                path, file_pos + off, f"CRC-32C mismatch in the frame of entry {index}"
            )
        if fidx != index:
            raise CorruptLogError(
                path, file_pos + off, f"frame holds entry {fidx}, expected {index}"
            )
        etype_v = _TYPE_BY_CODE.get(etype)
        if etype_v is None:
            raise CorruptLogError(path, file_pos + off, f"unknown entry type {etype}")
        append(LogEntry(index, term, etype_v, buf[off + FRAME_HEADER_SIZE : end]))
        used += n
        off = end
        index += 1
    return index, off, used


_PAGE = os.sysconf("SC_PAGE_SIZE")


class Segment:
    """One segment file. Not thread-safe by itself: LogStore serialises writers.

    `end` is the byte length of the valid content (frames written by this
    process or accepted by recovery); `last_index` is first_index - 1 while empty.
    """

    def __init__(self, directory: str, first_index: int) -> None:
        self.first_index = first_index
        self.path = os.path.join(directory, segment_name(first_index))
        self.last_index = first_index - 1
        self.last_term = 0
        self.end = FILE_HEADER_SIZE
        self._read_fd: int | None = None
        self._write_fd: int | None = None
        self.uncached_below = 0
        """Bytes from the file's start that this process has advised the kernel to
        drop from the page cache (drop_cached); only synced bytes are ever advised.
        A truncation of the active segment lowers it to the cut (cut_at)."""

    # -- lifecycle ---------------------------------------------------------

    @classmethod
    def create(cls, directory: str, first_index: int) -> Segment:
        """Create a new empty segment file; durable (file and directory synced)."""
        seg = cls(directory, first_index)
        fd = os.open(seg.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, FILE_HEADER.pack(FILE_MAGIC, FILE_VERSION, 0))
            os.fdatasync(fd)
        except BaseException:
            os.close(fd)
            raise
        seg._write_fd = seg._read_fd = fd
        fsync_dir(directory)
        return seg

    # Invariant: a segment holds at most ONE descriptor; while it is appendable the
    # write descriptor (O_RDWR) is also the read descriptor (_write_fd is None or
    # _write_fd == _read_fd). A process hosting 1,000 group logs thus needs 1,000
    # descriptors for their active segments, not 2,000 (a common limit is 1,024).

    def open_for_append(self) -> None:
        if self._write_fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR)
        if self._read_fd is not None:
            # Turn the read descriptor into this read-write one in place: dup2 swaps
            # what the number refers to atomically, so a pread racing with it (readers
            # run on other threads) reads the same file either way.
            os.dup2(fd, self._read_fd, inheritable=False)
            os.close(fd)
            fd = self._read_fd
        self._write_fd = self._read_fd = fd

    def close(self) -> None:
        if self._read_fd is not None:
            os.close(self._read_fd)
        self._read_fd = self._write_fd = None

    def seal(self) -> None:
        """No more appends (data is already synced): close the descriptor; a later read
        opens a read-only one. The caller holds the store's lock, under which every
        pread runs, because readers share this descriptor."""
        if self._read_fd is not None:
            os.close(self._read_fd)
        self._read_fd = self._write_fd = None

    def file_size(self) -> int:
        return os.stat(self.path).st_size

    # -- writing -----------------------------------------------------------

    def write(self, buffers: list[bytes], nbytes: int) -> int:
        """Write buffers at `end`; returns the position they start at. Not synced."""
        assert self._write_fd is not None, "segment is sealed"
        pos = self.end
        off = pos
        for i in range(0, len(buffers), _IOV_MAX):
            chunk = buffers[i : i + _IOV_MAX]
            want = sum(len(b) for b in chunk)
            written = os.pwritev(self._write_fd, chunk, off)
            if written != want:  # short write: finish it byte-exactly
                rest = b"".join(chunk)[written:]
                while rest:
                    k = os.pwrite(self._write_fd, rest, off + written)
                    written += k
                    rest = rest[k:]
            off += want
        self.end = pos + nbytes
        return pos

    def sync(self) -> None:
        assert self._write_fd is not None
        os.fdatasync(self._write_fd)

    def drop_cached(self, upto: int) -> None:
        """Advise the kernel to drop this file's cached pages below `upto` (whole
        pages). Only for bytes already synced: the kernel keeps dirty pages anyway,
        and a clean page it drops is read back from the disk if anyone asks."""
        whole = upto >= self.end  # the last, partial page too (a sealed file)
        upto = self.end if whole else upto - upto % _PAGE
        fd = self._write_fd
        if fd is None or upto <= self.uncached_below:
            return
        length = 0 if whole else upto - self.uncached_below  # 0: to the end of the file
        # Advice only, called right after a sync: a filesystem that refuses it must not
        # fail the sync's round (the data is durable either way), so an error is dropped.
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, self.uncached_below, length, os.POSIX_FADV_DONTNEED)
        self.uncached_below = upto

    def cut_at(self, position: int) -> None:
        """The file was truncated at position (log_truncate.py): what is written
        past it again is new, and dropped from the page cache anew."""
        self.end = position
        self.uncached_below = min(self.uncached_below, position - position % _PAGE)

    def truncate(self, position: int) -> None:
        """Cut the file at `position` and make the cut durable."""
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.ftruncate(fd, position)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.end = position

    # -- reading -----------------------------------------------------------

    def pread(self, length: int, position: int) -> bytes:
        fd = self._read_fd
        if fd is None:
            fd = self._read_fd = os.open(self.path, os.O_RDONLY)
        data = os.pread(fd, length, position)
        if len(data) != length:
            raise CorruptLogError(
                self.path, position, f"file ends before the {length} bytes the index points to"
            )
        return data

    def read_one(self, position: int, length: int, index: int) -> list[LogEntry]:
        """The single entry whose frame the index places at position/length."""
        out: list[LogEntry] = []
        _, consumed, _ = _decode_into(
            out, self.pread(length, position), index, index + 1, 1 << 62, self.path, position
        )
        if consumed != length:
            raise CorruptLogError(
                self.path, position, f"frame length disagrees with the index ({length})"
            )
        return out

    def read_entries(
        self, position: int, index: int, stop: int, budget: int, frame_hint: int = 1024
    ) -> tuple[list[LogEntry], int, int]:
        """Entries from the frame at `position` (entry `index`) onward, within
        this segment: before `stop`, until `budget` payload bytes are used.

        Returns (entries, position after them, payload bytes). Frames of
        consecutive entries are adjacent, so this needs no index lookups.
        frame_hint (a typical frame length, e.g. the first entry's) sizes the
        reads: a one-entry read costs one pread of about one frame.
        """
        out: list[LogEntry] = []
        used = 0
        while index < stop and used < budget and position < self.end:
            expect = (stop - index) * frame_hint + frame_hint // 4
            want = min(self.end - position, expect, budget - used + frame_hint + _READ_CHUNK)
            want = max(want, min(self.end - position, frame_hint))
            buf = self.pread(want, position)
            index, consumed, got = _decode_into(
                out, buf, index, stop, budget - used, self.path, position
            )
            if consumed == 0:
                # One frame larger than the chunk: read exactly that frame.
                if len(buf) < FRAME_HEADER_SIZE:
                    raise CorruptLogError(self.path, position, "frame header is cut short")
                n = FRAME_HEADER.unpack_from(buf, 0)[2]
                buf = self.pread(FRAME_HEADER_SIZE + n, position)
                index, consumed, got = _decode_into(
                    out, buf, index, index + 1, 1 << 62, self.path, position
                )
                if consumed == 0:
                    raise CorruptLogError(self.path, position, "frame is cut short")
            position += consumed
            used += got
        return out, position, used

    def read_header(self) -> None:
        """Check the file header; CorruptLogError if it is not a segment of ours."""
        try:
            head = self.pread(FILE_HEADER_SIZE, 0)
        except CorruptLogError:
            raise CorruptLogError(self.path, 0, "segment file header is missing") from None
        magic, version, _ = FILE_HEADER.unpack(head)
        if magic != FILE_MAGIC:
            raise CorruptLogError(self.path, 0, "not a raftsink segment (bad magic)")
        if version != FILE_VERSION:
            raise CorruptLogError(self.path, 0, f"unsupported segment version {version}")

    def scan(
        self, start: int, expect_index: int, prev_term: int, max_frame: int
    ) -> tuple[list[FrameInfo], ScanStop | None]:
        """Read frames from byte `start` to the end of the file.

        Returns the valid frames (dense indexes from expect_index, terms not
        decreasing from prev_term) and, if the file holds anything after them,
        where and why the scan stopped. The caller decides whether that stop is
        a torn tail (nothing valid after it) or corruption.
        """
        size = self.file_size()
        frames: list[FrameInfo] = []
        pos = start
        if size <= pos:
            return frames, None
        buf = memoryview(self.pread(size - pos, pos)) if size > pos else memoryview(b"")
        off = 0
        index, term = expect_index, prev_term
        while off < len(buf):
            stop = _check_frame(buf, off, index, term, max_frame)
            if stop is not None:
                return frames, ScanStop(start + off, stop)
            _, _, n, _, fterm, _, ftype = FRAME_HEADER.unpack_from(buf, off)
            flen = FRAME_HEADER_SIZE + n
            frames.append(FrameInfo(index, fterm, start + off, flen, ftype))
            off += flen
            index += 1
            term = fterm
        return frames, None

    def highest_sync_base_after(self, position: int, max_frame: int) -> tuple[int, int] | None:
        """(sync base, position) of the last valid frame after `position`, or None.

        Frames are found by their magic (a fast C search), then confirmed by
        CRC. Sync bases only grow along a file, so the last valid frame tells
        whether any sync completed after the damage (see the module docstring).
        """
        last = self.last_valid_frame_after(position, max_frame)
        return None if last is None else (last[0] - last[1], last[2])

    def last_valid_frame_after(self, position: int, max_frame: int) -> tuple[int, int, int] | None:
        """(index, unsynced, position) of the last CRC-valid frame after `position`."""
        size = self.file_size()
        if size <= position + 1:
            return None
        start = position + 1
        buf = self.pread(size - start, start)
        view = memoryview(buf)
        best: tuple[int, int, int] | None = None
        at = buf.find(_MAGIC_BYTES)
        while at != -1:
            info = _valid_frame_at(view, at, max_frame)
            if info is not None:
                best = (info[0], info[1], start + at)
                at = buf.find(_MAGIC_BYTES, at + FRAME_HEADER_SIZE + info[2])
            else:
                at = buf.find(_MAGIC_BYTES, at + 1)
        return best


def _check_frame(
    buf: memoryview, off: int, expect_index: int, min_term: int, max_frame: int
) -> str | None:
    """None if buf[off:] starts with a valid frame for expect_index, else why not."""
    if len(buf) - off < FRAME_HEADER_SIZE:
        return "frame header cut short"
    magic, crc, n, _unsynced, term, index, etype = FRAME_HEADER.unpack_from(buf, off)
    if magic != FRAME_MAGIC:
        return "bad frame magic"
    if n > max_frame:
        return f"frame length {n} exceeds the limit {max_frame}"
    end = off + FRAME_HEADER_SIZE + n
    if end > len(buf):
        return "frame payload cut short"
    if crc32c.crc32c(buf[off + _CRC_START : end]) != crc:
        return "CRC-32C mismatch"
    if index != expect_index:
        return f"frame holds entry {index}, expected {expect_index}"
    if term < min_term:
        return f"term {term} of entry {index} is below the previous term {min_term}"
    if etype not in _VALID_TYPES:
        return f"unknown entry type {etype}"
    return None


def _valid_frame_at(buf: memoryview, off: int, max_frame: int) -> tuple[int, int, int] | None:
    """(index, unsynced, payload length) if a CRC-valid frame starts at buf[off], else None."""
    if len(buf) - off < FRAME_HEADER_SIZE:
        return None
    magic, crc, n, unsynced, _term, index, _etype = FRAME_HEADER.unpack_from(buf, off)
    end = off + FRAME_HEADER_SIZE + n
    if magic != FRAME_MAGIC or n > max_frame or end > len(buf):
        return None
    if crc32c.crc32c(buf[off + _CRC_START : end]) != crc:
        return None
    return index, unsynced, n


def fsync_dir(directory: str) -> None:
    """Make creations, renames and deletions in directory durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
