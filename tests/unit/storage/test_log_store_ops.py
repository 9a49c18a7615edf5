"""LogStore operations and their boundaries, each followed by a reopen."""

from __future__ import annotations

import os

import pytest

from raftlog.entry import EntryType, HardState, LogEntry, SnapshotMeta
from raftlog.storage import (
    DataDirLockedError,
    LogRangeError,
    LogStore,
    StorageClosedError,
    StorageOptions,
)
from tests.helpers.storage import SMALL, entries, payload


def reopen(store: LogStore) -> LogStore:
    store.close()
    return LogStore.open(store.directory, store.options)


def seg_files(store: LogStore) -> list[str]:
    return sorted(os.listdir(os.path.join(store.directory, "segments")))


@pytest.fixture
def store(tmp_path):
    s = LogStore.open(str(tmp_path / "log"), SMALL)
    yield s
    s.close()


def test_empty_log(store):
    assert (store.first_index(), store.last_index(), store.last_term()) == (1, 0, 0)
    assert store.term_at(0) == 0
    assert store.term_at(1) is None
    with pytest.raises(LogRangeError):
        store.read(1, 10, 100)
    store = reopen(store)
    assert (store.first_index(), store.last_index()) == (1, 0)
    assert seg_files(store) == []
    store.close()


def test_one_entry(store):
    store.append([LogEntry(1, 3, EntryType.NOOP, b"")])
    assert store.last_index() == 1 and store.term_at(1) == 3
    store = reopen(store)
    assert store.read(1, 10, 10) == [LogEntry(1, 3, EntryType.NOOP, b"")]
    assert store.last_term() == 3
    store.close()


def test_read_bounds_count_and_bytes(store):
    store.append(entries(1, 20, size=100))
    assert [e.index for e in store.read(5, 3, 10**9)] == [5, 6, 7]
    # Stops once max_bytes is reached, but always returns at least one entry.
    assert [e.index for e in store.read(5, 100, 250)] == [5, 6, 7]
    assert [e.index for e in store.read(5, 100, 0)] == [5]
    assert [e.index for e in store.read(18, 100, 10**9)] == [18, 19, 20]
    assert store.read(5, 0, 100) == []
    with pytest.raises(LogRangeError):
        store.read(21, 1, 100)


def test_segment_roll_and_reads_across_segments(store):
    for b in range(10):
        store.append(entries(b * 9 + 1, 9, term=1 + b // 4))
    assert len(seg_files(store)) > 2
    got = store.read(1, 1000, 10**9)
    assert [e.index for e in got] == list(range(1, 91))
    assert all(e.data == payload(e.index, e.term, 100) for e in got)
    store = reopen(store)
    assert [e.index for e in store.read(1, 1000, 10**9)] == list(range(1, 91))
    assert store.term_at(90) == 3 and store.term_at(1) == 1
    store.close()


def test_entry_larger_than_segment_gets_own_segment(store):
    store.append(entries(1, 2, size=50))
    store.append(entries(3, 1, size=10_000))
    store.append(entries(4, 1, size=50))
    assert len(seg_files(store)) == 3
    store = reopen(store)
    assert len(store.read(3, 1, 1)[0].data) == 10_000
    assert store.last_index() == 4
    store.close()


def test_append_must_continue_the_log(store):
    store.append(entries(1, 3, term=2))
    with pytest.raises(ValueError, match="does not follow"):
        store.append(entries(5, 1, term=2))
    with pytest.raises(ValueError, match="below"):
        store.append(entries(4, 1, term=1))
    opts = StorageOptions(max_entry_bytes=10)
    with pytest.raises(ValueError, match="max_entry_bytes"):
        LogStore._validate_append(_with_opts(store, opts), entries(4, 1, term=2, size=11))
    assert store.last_index() == 3


def _with_opts(store: LogStore, opts: StorageOptions) -> LogStore:
    clone = LogStore.__new__(LogStore)
    clone.__dict__.update({k: getattr(store, k) for k in ("_last", "_last_term")})
    clone.options = opts
    return clone


def test_truncate_suffix_inside_segment(store):
    store.append(entries(1, 30))
    store.truncate_suffix(17)
    assert store.last_index() == 16
    store.append(entries(17, 5, term=2))
    store = reopen(store)
    got = store.read(1, 100, 10**9)
    assert [(e.index, e.term) for e in got] == [(i, 1) for i in range(1, 17)] + [
        (i, 2) for i in range(17, 22)
    ]
    store.close()


def test_truncate_suffix_at_segment_edge(store):
    for b in range(12):
        store.append(entries(b * 9 + 1, 9))
    firsts = [int(n[:20]) for n in seg_files(store)]
    edge = firsts[2]
    store.truncate_suffix(edge)
    assert store.last_index() == edge - 1
    assert [int(n[:20]) for n in seg_files(store)] == firsts[:2]
    store.append(entries(edge, 3, term=5))
    store = reopen(store)
    assert store.last_index() == edge + 2 and store.term_at(edge) == 5
    assert store.term_at(edge - 1) == 1
    store.close()


def test_truncate_everything(store):
    store.append(entries(1, 30))
    store.truncate_suffix(1)
    assert (store.first_index(), store.last_index()) == (1, 0)
    assert seg_files(store) == []
    store = reopen(store)
    assert store.last_index() == 0
    store.append(entries(1, 2, term=7))
    assert store.term_at(2) == 7
    store.close()


def test_truncate_suffix_noop_and_bounds(store):
    store.append(entries(1, 5))
    store.truncate_suffix(6)
    assert store.last_index() == 5
    store.truncate_prefix(2)
    with pytest.raises(LogRangeError):
        store.truncate_suffix(2)


def test_prefix_truncation_then_restart(store):
    for b in range(8):
        store.append(entries(b * 9 + 1, 9, term=1 + b // 3))
    before = len(seg_files(store))
    store.truncate_prefix(40)
    assert store.first_index() == 41 and store.term_at(40) == 2
    assert store.term_at(39) is None
    assert len(seg_files(store)) < before
    with pytest.raises(LogRangeError):
        store.read(40, 1, 1)
    store = reopen(store)
    assert (store.first_index(), store.last_index()) == (41, 72)
    assert store.term_at(40) == 2
    assert [e.index for e in store.read(41, 100, 10**9)] == list(range(41, 73))
    store.append(entries(73, 2, term=4))
    store.truncate_prefix(74)
    store = reopen(store)
    assert (store.first_index(), store.last_index(), store.last_term()) == (75, 74, 4)
    with pytest.raises(LogRangeError):
        store.truncate_prefix(80)
    store.close()


def test_prefix_truncation_released_later(store, monkeypatch):
    """release_later (the disk queue's cut): the call returns once the new first index
    is durable; the file deletes wait on the releaser thread without holding up the
    writer (appends and syncs go on meanwhile), then the files and the index rows below
    the first index are gone; close waits for a release still running."""
    import threading

    for b in range(8):
        store.append(entries(b * 9 + 1, 9, term=1 + b // 3))
    store.sync()
    store._checkpoint()  # index rows for every entry, so their deletion shows
    before = seg_files(store)
    gate, entered = threading.Event(), threading.Event()
    real_delete = store._delete_file

    def held_delete(first, sync_dir=True):
        entered.set()
        assert gate.wait(30), "test gate never opened"
        real_delete(first, sync_dir)

    monkeypatch.setattr(store, "_delete_file", held_delete)
    store.truncate_prefix(40, release_later=True)
    assert entered.wait(30), "the releaser never started"
    assert store.first_index() == 41 and store.term_at(39) is None
    # The releaser is blocked inside its first delete: the writer is not.
    store.append(entries(73, 3, term=3))
    store.sync()
    assert store.last_index() == 75
    assert set(before) <= set(seg_files(store))  # nothing deleted yet
    gate.set()
    store.wait_released()
    gone = set(before) - set(seg_files(store))
    assert gone and all(int(f.split(".")[0]) < 41 for f in gone)
    assert store._index.location(40) is None and store._index.location(41) is not None
    assert [e.index for e in store.read(41, 100, 10**9)] == list(range(41, 76))
    # A second release, then close without waiting: close waits for it.
    store.truncate_prefix(60, release_later=True)
    store = reopen(store)
    assert (store.first_index(), store.last_index()) == (61, 75)
    assert [e.index for e in store.read(61, 100, 10**9)] == list(range(61, 76))
    store.close()


def test_released_files_left_by_a_crash_go_at_open(store, monkeypatch):
    """A crash before the releaser ran leaves the cut files: the next open deletes them
    and the log starts at the durable first index."""
    for b in range(8):
        store.append(entries(b * 9 + 1, 9, term=1 + b // 3))
    before = seg_files(store)
    monkeypatch.setattr(store, "_release_below", lambda firsts: None)  # "crashed" first
    store.truncate_prefix(40, release_later=True)
    store.wait_released()
    assert seg_files(store) == before  # nothing deleted yet
    store = reopen(store)
    assert store.first_index() == 41
    assert len(seg_files(store)) < len(before)
    assert [e.index for e in store.read(41, 100, 10**9)] == list(range(41, 73))
    store.close()


def test_reset_for_snapshot_install(store):
    store.append(entries(1, 30))
    store.reset(501, SnapshotMeta(500, 9, b"membership"))
    assert (store.first_index(), store.last_index(), store.last_term()) == (501, 500, 9)
    store.append(entries(501, 3, term=9))
    store = reopen(store)
    assert (store.first_index(), store.last_index()) == (501, 503)
    assert store.term_at(500) == 9
    assert store.snapshot_meta() == SnapshotMeta(500, 9, b"membership")
    store.close()


def test_hard_state_round_trip(store):
    assert store.hard_state() == HardState()
    store.save_hard_state(HardState(term=7, vote=3, commit=12))
    store = reopen(store)
    assert store.hard_state() == HardState(7, 3, 12)
    store.close()


def test_second_opener_is_refused(store):
    with pytest.raises(DataDirLockedError, match="in use"):
        LogStore.open(store.directory)


def test_closed_store_refuses_use(tmp_path):
    s = LogStore.open(str(tmp_path / "x"))
    s.append(entries(1, 1))
    s.close()
    s.close()  # idempotent
    with pytest.raises(StorageClosedError):
        s.append(entries(2, 1))
    with pytest.raises(StorageClosedError):
        s.read(1, 1, 1)


def test_options_are_validated():
    with pytest.raises(ValueError, match="segment_bytes"):
        StorageOptions(segment_bytes=0)
    with pytest.raises(ValueError, match="must be a positive integer"):
        StorageOptions(index_checkpoint_entries=True)
    with pytest.raises(ValueError, match="queue_max_pending_bytes"):
        StorageOptions(queue_max_pending_bytes=1, queue_max_batch_bytes=2)


def test_restart_scans_only_the_tail(tmp_path):
    opts = StorageOptions(index_checkpoint_entries=100, index_checkpoint_bytes=1 << 30)
    s = LogStore.open(str(tmp_path / "t"), opts)
    for b in range(50):
        s.append(entries(b * 40 + 1, 40))
    # Simulate a crash: drop the store without the closing checkpoint.
    s._release()
    s = LogStore.open(str(tmp_path / "t"), opts)
    assert s.last_index() == 2000
    # Only entries after the last checkpoint (every 100) are scanned on open.
    assert s.stats.recovered_tail_entries < 100
    assert [e.index for e in s.read(1995, 10, 10**9)] == list(range(1995, 2001))
    s.close()
