"""Many group logs in one process share one LMDB environment per data directory.

Before LogEnvironment every LogStore opened its own LMDB environment reserving
lmdb_map_bytes (64 GiB) of address space: about 2,000 logs exhausted the 128 TiB
user address space (measured: the 2,046th open failed with ENOMEM).
"""

from __future__ import annotations

import os

import pytest

from raftlog.entry import EntryType, HardState, LogEntry
from raftlog.storage import DataDirLockedError, LogEnvironment, StorageError
from tests.helpers.storage import SMALL, entries

GiB = 1024**3


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize")


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
    env = LogEnvironment.open(str(tmp_path / "data"))
    for g in (0, 1, 517, 999):
        log = env.open_log(g)
        assert log.last_index() == 1
        assert log.entry(1).data == b"g%d" % g
        assert log.hard_state() == HardState(term=1, vote=g % 3, commit=1)
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
