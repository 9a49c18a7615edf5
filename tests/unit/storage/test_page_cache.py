"""The log keeps its synced data out of the page cache beyond a hot window
(StorageOptions.page_cache_drop / page_cache_keep_bytes), and every entry still
reads back, from the disk, exactly as written."""

from __future__ import annotations

import ctypes
import mmap
import os

import pytest

from raftlog.storage import LogStore, StorageOptions
from tests.helpers.storage import entries

MiB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
_libc = ctypes.CDLL(None, use_errno=True)


def resident(path: str, start: int = 0, stop: int | None = None) -> int:
    """Pages of path's byte range [start, stop) in the page cache (mincore(2))."""
    size = os.path.getsize(path)
    stop = size if stop is None else min(stop, size)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), size) as mm:
        pages = (size + PAGE - 1) // PAGE
        vec = (ctypes.c_ubyte * pages)()
        addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        try:
            if _libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            del addr  # the buffer export must end before the mmap closes
        return sum(vec[i] & 1 for i in range(start // PAGE, (stop + PAGE - 1) // PAGE))


def segments(store: LogStore) -> list[str]:
    d = os.path.join(store.directory, "segments")
    return [os.path.join(d, n) for n in sorted(os.listdir(d))]


def open_store(tmp_path, **kw) -> LogStore:
    return LogStore.open(str(tmp_path / "log"), StorageOptions(**kw))


def test_synced_bytes_older_than_the_window_leave_the_cache_and_read_back(tmp_path):
    store = open_store(tmp_path, page_cache_keep_bytes=1 * MiB)
    try:
        written = entries(1, 512, size=8192)  # 4 MiB in one segment
        for i in range(0, len(written), 32):
            store.append(written[i : i + 32])  # each append synced
        (path,) = segments(store)
        end = os.path.getsize(path)
        cold_end = end - 1 * MiB - (1 << 20)  # at most one drop step behind
        assert resident(path, 0, cold_end) == 0
        assert resident(path, end - 1 * MiB + PAGE, end) > 0  # the hot window stays
        assert store.read(1, 10**6, 1 << 40) == written
    finally:
        store.close()


def test_a_sealed_segment_leaves_the_cache_whole(tmp_path):
    store = open_store(tmp_path, segment_bytes=1 * MiB, page_cache_keep_bytes=8 * MiB)
    try:
        written = entries(1, 400, size=8192)  # about 3.2 MiB: 3 sealed segments
        for i in range(0, len(written), 16):
            store.append(written[i : i + 16])
        *sealed, active = segments(store)
        assert len(sealed) == 3
        assert [resident(p) for p in sealed] == [0, 0, 0]
        assert resident(active) > 0  # within its keep window
        assert store.read(1, 10**6, 1 << 40) == written
    finally:
        store.close()


def test_off_leaves_the_cache_to_the_kernel(tmp_path):
    store = open_store(tmp_path, page_cache_drop=False, page_cache_keep_bytes=0)
    try:
        store.append(entries(1, 256, size=8192))
        (path,) = segments(store)
        assert resident(path) == (os.path.getsize(path) + PAGE - 1) // PAGE
    finally:
        store.close()


def test_bytes_written_again_after_a_cut_are_dropped_again(tmp_path):
    store = open_store(tmp_path, page_cache_keep_bytes=0)
    try:
        store.append(entries(1, 512, size=8192))
        store.truncate_suffix(100)  # cut far below what was dropped
        again = entries(100, 512, term=2, size=8192)
        store.append(again)
        (path,) = segments(store)
        assert resident(path, 0, os.path.getsize(path) - (1 << 20) - PAGE) == 0
        assert store.read(100, 10**6, 1 << 40) == again
        assert store.read(1, 99, 1 << 40) == entries(1, 99, size=8192)
    finally:
        store.close()
    reopened = LogStore.open(str(tmp_path / "log"), StorageOptions(page_cache_keep_bytes=0))
    try:
        assert reopened.read(100, 10**6, 1 << 40) == again
    finally:
        reopened.close()


@pytest.mark.parametrize("bad", [-1, 1.5, True, "16M"])
def test_a_bad_window_is_refused_at_start_up(bad):
    with pytest.raises(ValueError, match="page_cache_keep_bytes"):
        StorageOptions(page_cache_keep_bytes=bad)


def test_a_filesystem_that_refuses_the_advice_fails_nothing(tmp_path, monkeypatch):
    """posix_fadvise is advice, given right after a sync: its error must not fail the
    append whose data is already durable."""

    def refuse(*_args):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "posix_fadvise", refuse)
    store = open_store(tmp_path, segment_bytes=1 * MiB, page_cache_keep_bytes=0)
    try:
        written = entries(1, 400, size=8192)  # several segments: drops at syncs and seals
        for i in range(0, len(written), 16):
            store.append(written[i : i + 16])
        assert store.read(1, 10**6, 1 << 40) == written
    finally:
        store.close()
