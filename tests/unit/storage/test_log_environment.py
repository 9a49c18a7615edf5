"""Many group logs in one process share one LMDB environment per data directory.

Before LogEnvironment every LogStore opened its own LMDB environment reserving
lmdb_map_bytes (64 GiB) of address space: about 2,000 logs exhausted the 128 TiB
user address space (measured: the 2,046th open failed with ENOMEM).
"""

from __future__ import annotations

import os
import shutil
import threading

import pytest

from raftlog.entry import EntryType, HardState, LogEntry
from raftlog.storage import (
    DataDirLockedError,
    LogEnvironment,
    LogStore,
    StorageError,
    StorageOptions,
)
from tests.helpers.storage import SMALL, entries

GiB = 1024**3


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_thousand_group_logs_open_in_one_process(tmp_path):
    before = _vm_size()
    env = LogEnvironment.open(str(tmp_path / "data"))
    logs = [env.open_log(g) for g in range(1000)]
    grown = _vm_size() - before
    # One map for all of them (64 GiB), not 1,000 x 64 GiB.
    assert grown < 128 * GiB, f"address space grew by {grown / GiB:.0f} GiB"
    for g, log in enumerate(logs):
        log.append([LogEntry(1, 1, EntryType.DATA, b"g%d" % g)])
        log.save_hard_state(HardState(term=1, vote=g % 3, commit=1))
    for log in logs:
        log.close()
    env.close()
    fds = _open_fds()
    env = LogEnvironment.open(str(tmp_path / "data"))
    logs = [env.open_log(g) for g in range(1000)]  # a restart: every log recovers its tail
    # Within a common 1,024-descriptor limit: ONE descriptor per log (its active
    # segment, read and written through it) plus the shared index's few.
    assert _open_fds() - fds <= 1000 + 8, f"{_open_fds() - fds} descriptors for 1,000 logs"
    for g in (0, 1, 517, 999):
        log = logs[g]
        assert log.last_index() == 1
        assert log.entry(1).data == b"g%d" % g
        assert log.hard_state() == HardState(term=1, vote=g % 3, commit=1)
    assert _open_fds() - fds <= 1000 + 8
    env.close()


def test_groups_with_equal_indexes_keep_their_own_index_and_state(tmp_path):
    env = LogEnvironment.open(str(tmp_path / "data"), SMALL)
    a, b = env.open_log(2), env.open_log(1)  # b sorts first: its deletes must stop at a
    a.append(entries(1, 40, term=1))
    b.append([LogEntry(i, 2, EntryType.DATA, b"b%d" % i) for i in range(1, 31)])
    b.truncate_suffix(21)  # deletes b's index entries >= 21, never a's
    a.truncate_prefix(10)
    a.close()
    b.close()
    a, b = env.open_log(2), env.open_log(1)
    assert (a.first_index(), a.last_index(), a.term_at(40)) == (11, 40, 1)
    assert (b.first_index(), b.last_index(), b.term_at(20)) == (1, 20, 2)
    assert [e.data for e in b.read(19, 2, 1 << 20)] == [b"b19", b"b20"]
    assert a.read(39, 2, 1 << 20) == entries(39, 2, term=1)
    env.close()


def test_the_environment_guards_its_directory_and_its_groups(tmp_path):
    env = LogEnvironment.open(str(tmp_path / "data"))
    with pytest.raises(DataDirLockedError):
        LogEnvironment.open(str(tmp_path / "data"))
    env.open_log(5)
    with pytest.raises(StorageError, match="already open"):
        env.open_log(5)
    with pytest.raises(ValueError):
        env.open_log(-1)
    env.close()
    env.close()  # idempotent
    with pytest.raises(StorageError):
        env.open_log(6)
    assert os.path.isdir(tmp_path / "data" / "groups" / "5" / "segments")


# ------------------------------------------------------------ map growth


def _map_size(env: LogEnvironment) -> int:
    return env._index.env.info()["map_size"]


def test_a_full_lmdb_map_grows_instead_of_failing_the_logs(tmp_path):
    # A map far too small for what the groups write: every write that does not fit
    # must grow the map (lmdb.MapFullError -> resize -> retry), never fail the log.
    small = StorageOptions(
        segment_bytes=4096,
        index_checkpoint_entries=8,
        index_checkpoint_bytes=2048,
        lmdb_map_bytes=256 * 1024,
    )
    env = LogEnvironment.open(str(tmp_path / "data"), small)
    before = _map_size(env)
    logs = {g: env.open_log(g) for g in range(40)}
    for rnd in range(5):
        for g, log in logs.items():
            log.append(entries(rnd * 60 + 1, 60, term=1, size=20))
            log.save_hard_state(HardState(term=1, vote=g, commit=rnd * 60))
    LogStore.save_hard_states([(log, HardState(2, g, 300)) for g, log in logs.items()])
    assert _map_size(env) > before
    assert env.map_resizes >= 1
    for log in logs.values():
        log.close()
    env.delete_group(7)
    shutil.rmtree(env.group_directory(7))  # as RaftHost.remove_group(delete=True)
    env.close()
    env = LogEnvironment.open(str(tmp_path / "data"), small)  # the configured size is smaller
    for g in (0, 13, 39):
        log = env.open_log(g)
        assert (log.first_index(), log.last_index()) == (1, 300)
        assert log.read(299, 2, 1 << 20) == entries(299, 2, term=1, size=20)
        assert log.hard_state() == HardState(2, g, 300)
    assert env.open_log(7).last_index() == 0  # deleted: its keys are gone
    env.close()


# ------------------------------------------------------------ one env per log (old layouts)


def test_a_group_log_written_in_its_own_lmdb_environment_still_opens(tmp_path):
    # Compatibility, not migration: a groups/<id>/ directory written by LogStore.open
    # (one LMDB environment per log) is opened as it is, beside the shared index.
    root = tmp_path / "data"
    old = LogStore.open(str(root / "groups" / "3"), SMALL)
    old.append(entries(1, 30, term=2))
    old.save_hard_state(HardState(term=2, vote=1, commit=30))
    old.close()
    env = LogEnvironment.open(str(root), SMALL)
    log = env.open_log(3)
    # read through the shared index, the vote (and the index) would be lost
    assert log.hard_state() == HardState(term=2, vote=1, commit=30)
    assert (log.first_index(), log.last_index(), log.term_at(30)) == (1, 30, 2)
    assert env.own_environment_groups() == [3]
    log.append(entries(31, 5, term=2))
    fresh = env.open_log(4)  # new groups go to the shared index
    fresh.append(entries(1, 3))
    assert not os.path.exists(root / "groups" / "4" / "index")
    log.close()
    fresh.close()
    env.delete_group(3)  # its keys live in its own directory: removing that removes them
    shutil.rmtree(env.group_directory(3))
    env.close()
    env = LogEnvironment.open(str(root), SMALL)
    assert env.own_environment_groups() == []
    assert env.open_log(4).last_index() == 3
    assert env.open_log(3).last_index() == 0
    env.close()


def test_a_single_log_directory_is_refused_not_misread(tmp_path):
    # A directory laid out by LogStore.open (index/ with unprefixed keys, segments/)
    # must not be read as a shared index: its keys would be taken for group prefixes.
    root = tmp_path / "node"
    old = LogStore.open(str(root), SMALL)
    old.append(entries(1, 10))
    old.close()
    with pytest.raises(StorageError, match="single log"):
        LogEnvironment.open(str(root), SMALL)
    again = LogStore.open(str(root), SMALL)  # and it still opens as what it is
    assert again.last_index() == 10
    again.close()


def test_readers_on_other_threads_survive_map_growth(tmp_path):
    # The map is resized while another thread keeps reading the index: LMDB needs
    # no transaction active during a resize (a remap under a reader can crash it).
    small = StorageOptions(
        segment_bytes=4096,
        index_checkpoint_entries=4,
        index_checkpoint_bytes=1024,
        lmdb_map_bytes=128 * 1024,
    )
    env = LogEnvironment.open(str(tmp_path / "data"), small)
    reader_log = env.open_log(0)
    reader_log.append(entries(1, 20, term=1, size=20))
    reader_log.close()
    reader_log = env.open_log(0)  # its locations now come from the index
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]
    first_read = threading.Event()

    def read_forever() -> None:
        try:
            while not stop.is_set():
                assert reader_log._index.location(7) is not None
                assert reader_log.hard_state() == HardState()
                reads[0] += 1
                first_read.set()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=read_forever)
    t.start()
    try:
        assert first_read.wait(60), f"the reader thread never read: {errors}"
        writers = [env.open_log(g) for g in range(1, 30)]
        for rnd in range(6):
            for log in writers:
                log.append(entries(rnd * 40 + 1, 40, term=1, size=20))
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert env.map_resizes >= 1
    env.close()


def test_sealed_segments_hold_no_descriptor_until_read(tmp_path):
    env = LogEnvironment.open(str(tmp_path / "data"), SMALL)
    fds = _open_fds()
    log = env.open_log(1)
    for start in range(1, 401, 20):  # 4 KiB segments: about 20 of them
        log.append(entries(start, 20, size=200))
    assert len(log._segments) > 10
    assert _open_fds() - fds <= 1  # the active segment's only
    assert log.read(5, 1, 1 << 20) == entries(5, 1, size=200)  # opens one to read
    assert _open_fds() - fds <= 2
    log.close()
    env.close()
