"""DiskGuard: reserve sizing, levels, hysteresis, the produce-side estimate, and the
fsyncgate rule (a failed fsync is never retried, not even by close())."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

import pytest

from raftlog.storage import (
    DiskGuard,
    DiskLevel,
    DiskQueue,
    LogStore,
    StorageClosedError,
    StorageOptions,
    reserve_for,
)
from tests.helpers.storage import entries

MiB = 1 << 20
GiB = 1 << 30


class FakeDisk:
    """statvfs of one volume whose free space the test sets."""

    def __init__(self, total: int, free: int) -> None:
        self.total, self.free, self.calls = total, free, 0
        self.fail = False

    def __call__(self, path: str) -> SimpleNamespace:
        self.calls += 1
        if self.fail:
            raise OSError(5, "Input/output error")
        return SimpleNamespace(
            f_blocks=self.total // 4096, f_bavail=self.free // 4096, f_frsize=4096
        )


def guard(disk: FakeDisk, reserve: int = 100 * MiB, percent: float = 0.0) -> DiskGuard:
    return DiskGuard(
        ["/data"],
        reserve_bytes=reserve,
        reserve_percent=percent,
        statvfs=disk,
        device_of=lambda p: 1,
    )


def test_reserve_is_the_larger_of_bytes_and_percent_and_bytes_is_capped_at_a_quarter():
    assert reserve_for(100 * GiB, 1 * GiB, 5.0) == 5 * GiB  # large volume: the percent
    assert reserve_for(10 * GiB, 1 * GiB, 5.0) == 1 * GiB  # mid volume: the bytes
    assert reserve_for(300 * 10**6, 1 * GiB, 5.0) == 75 * 10**6  # small: a quarter of it
    assert reserve_for(100 * GiB, 0, 0.0) == 0  # no guard


def test_levels_follow_the_reserve_and_half_of_it():
    disk = FakeDisk(1 * GiB, 500 * MiB)
    g = guard(disk)
    assert g.check() is DiskLevel.OK
    disk.free = 99 * MiB
    assert g.check() is DiskLevel.WRITES_REFUSED
    disk.free = 40 * MiB
    assert g.check() is DiskLevel.APPENDS_REFUSED
    v = g.worst()
    assert (v.path, v.free_bytes, v.reserve_bytes) == ("/data", 40 * MiB, 100 * MiB)
    disk.free = 500 * MiB
    assert g.check() is DiskLevel.OK  # resumes by itself


def test_hysteresis_needs_the_margin_to_clear_each_level():
    disk = FakeDisk(1 * GiB, 99 * MiB)
    g = guard(disk)
    assert g.check() is DiskLevel.WRITES_REFUSED
    disk.free = 101 * MiB  # above the reserve, not above reserve + 5%
    assert g.check() is DiskLevel.WRITES_REFUSED
    disk.free = 106 * MiB
    assert g.check() is DiskLevel.OK
    disk.free = 49 * MiB
    assert g.check() is DiskLevel.APPENDS_REFUSED
    disk.free = 51 * MiB  # above half, not above half + margin
    assert g.check() is DiskLevel.APPENDS_REFUSED
    disk.free = 60 * MiB
    assert g.check() is DiskLevel.WRITES_REFUSED


def test_accepted_bytes_lower_the_estimate_and_force_a_reading_at_the_reserve():
    disk = FakeDisk(1 * GiB, 300 * MiB)
    g = guard(disk)
    g.check()
    calls = disk.calls
    assert g.note_written(100 * MiB) is DiskLevel.OK  # estimate 200 MiB: no statvfs
    assert disk.calls == calls
    disk.free = 90 * MiB  # the disk really filled
    assert g.note_written(150 * MiB) is DiskLevel.WRITES_REFUSED  # estimate crossed: read now
    assert disk.calls == calls + 1


def test_a_failing_statvfs_keeps_the_last_reading():
    disk = FakeDisk(1 * GiB, 40 * MiB)
    g = guard(disk)
    assert g.check() is DiskLevel.APPENDS_REFUSED
    disk.fail = True
    assert g.check() is DiskLevel.APPENDS_REFUSED
    assert g.volumes[0].stat_errors == 1


def test_one_volume_per_device_and_the_worst_one_decides(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "log").mkdir(parents=True)
    b.mkdir()
    disks = {str(a): FakeDisk(1 * GiB, 500 * MiB), str(b): FakeDisk(1 * GiB, 10 * MiB)}
    g = DiskGuard(
        [str(a), str(a / "log"), str(b)],
        reserve_bytes=100 * MiB,
        reserve_percent=0,
        statvfs=lambda p: disks[p](p),
        device_of=lambda p: 2 if p == str(b) else 1,
    )
    assert [v.path for v in g.volumes] == [str(a), str(b)]
    assert g.check() is DiskLevel.APPENDS_REFUSED
    assert g.worst().path == str(b)


def test_real_statvfs_of_a_directory(tmp_path):
    g = DiskGuard([str(tmp_path / "not-yet")], reserve_bytes=0, reserve_percent=0)
    assert g.check() is DiskLevel.OK  # a missing directory is read through its parent
    assert g.volumes[0].total_bytes > 0


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        StorageOptions(reserve_bytes=-1)
    with pytest.raises(ValueError):
        StorageOptions(reserve_percent=50)
    with pytest.raises(ValueError):
        StorageOptions(space_check_ms=0)


# ---------------------------------------------------------------- fsyncgate


def test_failed_fsync_is_not_retried_by_close(tmp_path, monkeypatch):
    s = LogStore.open(str(tmp_path / "g"))
    s.append(entries(1, 2))
    calls = []

    def eio(fd):
        calls.append(fd)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", eio)
    with pytest.raises(OSError):
        s.append(entries(3, 1))
    assert len(calls) == 1
    s.close()  # must not fdatasync again (the kernel may have dropped those pages)
    assert len(calls) == 1
    monkeypatch.undo()
    s = LogStore.open(str(tmp_path / "g"))  # recovery decides what is on disk
    assert s.last_index() >= 2
    s.close()


def test_write_cache_flush_failure_fails_the_store_for_good(tmp_path, monkeypatch):
    async def main():
        store = LogStore.open(str(tmp_path / "w"), StorageOptions(write_caching=True))
        q = DiskQueue(store)
        await q.append(entries(1, 3))  # acknowledged from the page cache
        calls = []

        def eio(fd):
            calls.append(fd)
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fdatasync", eio)
        with pytest.raises(StorageClosedError, match="Input/output"):
            await q.sync()
        with pytest.raises(StorageClosedError):
            await q.append(entries(4, 1))
        await q.close()  # closes the store: no second fdatasync
        assert len(calls) == 1

    asyncio.run(asyncio.wait_for(main(), 30))
