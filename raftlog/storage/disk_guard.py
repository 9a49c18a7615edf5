"""DiskGuard: a free-space reserve for the directories a node writes.

Why: with retention off a Raft log grows until its volume is full. Every node of a
group holds the same log, so they all hit ENOSPC within the same second and the whole
cluster stops at once (measured: issue 21). A reserve turns "the disk filled" into
"new writes are refused, reads and Raft traffic go on" well before any write fails,
and the node resumes by itself once space returns.

Levels, from a statvfs of each volume (DiskLevel, ordered):
  OK               free >= reserve
  WRITES_REFUSED   free < reserve: the application takes no NEW data (a leader refuses
                   produce); what was accepted before may still land on disk.
  APPENDS_REFUSED  free < reserve / 2: the node stops appending replicated entries (a
                   follower stops acknowledging; the leader commits with the others).
The lower half of the reserve is room for what a healthy node must still write after
it refused new data: entries the leader accepted just before it tripped, hard state
(term and vote), the no-op entry of each new term, snapshots, and the LMDB pages that
compaction and deletions need. Only an outside writer (another process filling the
volume) drives a node below it.

Hysteresis: a tripped level clears once free >= its threshold + resume margin
(reserve / 20), so a volume hovering at the threshold does not flap.

`free` is f_bavail (what an unprivileged writer may use): on ext4 the blocks reserved
for root are not counted, which only makes the guard trip earlier.

Invariant: level() is the worst level over all volumes; a volume whose statvfs fails
keeps its last reading (the failure is counted, not fatal: the guard only advises).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass


class DiskLevel(enum.IntEnum):
    OK = 0
    WRITES_REFUSED = 1
    APPENDS_REFUSED = 2


def reserve_for(total_bytes: int, reserve_bytes: int, reserve_percent: float) -> int:
    """The reserve of a volume of total_bytes: the larger of reserve_percent of the
    volume and reserve_bytes, where reserve_bytes is capped at a quarter of the volume
    (so a small volume is not reserved entirely: 1 GiB of a 300 MB test volume would
    refuse every write)."""
    fixed = min(reserve_bytes, total_bytes // 4)
    share = int(total_bytes * reserve_percent / 100)
    return max(fixed, share)


@dataclass(slots=True)
class Volume:
    """One volume the node writes to, named by the first guarded path on it."""

    path: str
    free_bytes: int = 0
    total_bytes: int = 0
    reserve_bytes: int = 0
    level: DiskLevel = DiskLevel.OK
    stat_errors: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "free_bytes": self.free_bytes,
            "total_bytes": self.total_bytes,
            "reserve_bytes": self.reserve_bytes,
            "level": self.level.name.lower(),
        }


StatVfs = Callable[[str], os.statvfs_result]


def _existing(path: str) -> str:
    """path, or its nearest existing parent (a directory the node creates later lives
    on the same volume as that parent until something is mounted there)."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


class DiskGuard:
    """The reserve of each volume under paths, checked on demand (check()) and
    estimated between checks from the bytes the caller says it accepted."""

    def __init__(
        self,
        paths: Iterable[str],
        *,
        reserve_bytes: int,
        reserve_percent: float,
        statvfs: StatVfs = os.statvfs,
        device_of: Callable[[str], int] | None = None,
    ) -> None:
        if reserve_bytes < 0 or not 0 <= reserve_percent < 50:
            raise ValueError("DiskGuard: reserve_bytes >= 0 and 0 <= reserve_percent < 50")
        self.reserve_bytes = reserve_bytes
        self.reserve_percent = reserve_percent
        self._statvfs = statvfs
        device = device_of or (lambda p: os.stat(_existing(p)).st_dev)
        self.volumes: list[Volume] = []
        self._paths: list[str] = []  # one existing path per volume, in self.volumes order
        seen: set[int] = set()
        for p in paths:
            dev = device(p)
            if dev in seen:
                continue
            seen.add(dev)
            self.volumes.append(Volume(os.path.abspath(p)))
            self._paths.append(p)
        if not self.volumes:
            raise ValueError("DiskGuard: no paths to guard")
        self.checks = 0

    # ------------------------------------------------------------------ reading

    def check(self) -> DiskLevel:
        """statvfs every volume and return the node's level (the worst volume's)."""
        self.checks += 1
        for vol, path in zip(self.volumes, self._paths, strict=True):
            try:
                st = self._statvfs(_existing(path))
            except OSError:
                vol.stat_errors += 1
                continue
            vol.total_bytes = st.f_blocks * st.f_frsize
            vol.free_bytes = st.f_bavail * st.f_frsize
            vol.reserve_bytes = reserve_for(
                vol.total_bytes, self.reserve_bytes, self.reserve_percent
            )
            vol.level = self._level_of(vol)
        return self.level()

    @staticmethod
    def _level_of(vol: Volume) -> DiskLevel:
        free, reserve = vol.free_bytes, vol.reserve_bytes
        margin = reserve // 20
        half = reserve // 2
        if free < half or (vol.level >= DiskLevel.APPENDS_REFUSED and free < half + margin):
            return DiskLevel.APPENDS_REFUSED
        if free < reserve or (vol.level >= DiskLevel.WRITES_REFUSED and free < reserve + margin):
            return DiskLevel.WRITES_REFUSED
        return DiskLevel.OK

    def level(self) -> DiskLevel:
        return max(v.level for v in self.volumes)

    def note_written(self, nbytes: int) -> DiskLevel:
        """The caller accepted nbytes of new data (a produce): lower every volume's
        free estimate; once an estimate falls under its reserve, statvfs now rather
        than at the next periodic check (a burst must not run far past the reserve)."""
        crossed = False
        for vol in self.volumes:
            vol.free_bytes -= nbytes
            if vol.level is DiskLevel.OK and vol.free_bytes < vol.reserve_bytes:
                crossed = True
        return self.check() if crossed else self.level()

    def worst(self) -> Volume:
        """The volume with the highest level (least free relative to its reserve on ties)."""
        return max(self.volumes, key=lambda v: (v.level, v.reserve_bytes - v.free_bytes))
