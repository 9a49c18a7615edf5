"""Helpers shared by the benchmarks: machine description, percentiles, targets."""

from __future__ import annotations

import os
import platform
import sys
import time


def machine() -> str:
    """One line naming the CPU, core count and Python: printed by every benchmark."""
    cpu = "unknown cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def print_targets(targets: dict[str, bool]) -> None:
    print("targets: " + ", ".join(f"{k}: {'met' if v else 'MISSED'}" for k, v in targets.items()))
    sys.stdout.flush()


_TICKS = os.sysconf("SC_CLK_TCK")


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages (/proc/loadavg), for the figures' context."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the given processes have used so far, from /proc/<pid>/stat
    (steadier than wall time on a shared machine). A pid that has gone counts as 0."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                # The command name (field 2) may contain spaces: split after its ')'.
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / _TICKS


class CpuMeter:
    """CPU seconds used by a set of processes between start() and stop(), beside wall time."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.cpu_s = 0.0
        self.wall_s = 0.0

    def __enter__(self) -> CpuMeter:
        self._t0 = time.perf_counter()
        self._c0 = cpu_seconds(self.pids)
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self._t0
        self.cpu_s = cpu_seconds(self.pids) - self._c0


def task_times(pid: int | str = "self") -> dict[int, tuple[str, int]]:
    """Every thread of a process: tid -> (comm, utime+stime in clock ticks), from
    /proc/<pid>/task/*/stat. A thread that ends while being read is left out."""
    out = {}
    try:
        names = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for name in names:
        try:
            with open(f"/proc/{pid}/task/{name}/stat") as f:
                text = f.read()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        out[int(name)] = (comm, int(fields[11]) + int(fields[12]))
    return out


TICKS_PER_S = _TICKS


class CpuQuotaUnavailable(RuntimeError):
    """Neither cgroup v2 cpu.max nor v1 cpu.cfs_quota_us can be set here (the message
    says why)."""


class CpuQuota:
    """Caps processes at `cores` of CPU with a cgroup of their own: cgroup v2 `cpu.max`
    where the unified hierarchy has the cpu controller, else v1 `cpu.cfs_quota_us`
    (both need root). One cgroup per process: each is capped on its own, like a node
    process pinned to its share of a machine. release() moves them back and removes the
    cgroups (also on error, as a context manager)."""

    PERIOD_US = 100_000

    def __init__(self, pids: list[int], cores: float, name: str) -> None:
        self.kind = ""
        self.dirs: list[str] = []
        self._root = ""
        errors = []
        for kind, root, files in (
            ("v2 cpu.max", "/sys/fs/cgroup", "cpu.max"),
            ("v2 cpu.max", "/sys/fs/cgroup/unified", "cpu.max"),
            ("v1 cpu.cfs_quota_us", "/sys/fs/cgroup/cpu", "cpu.cfs_quota_us"),
        ):
            try:
                self._apply(kind, root, files, pids, cores, name)
                self.kind = kind
                return
            except OSError as exc:
                errors.append(f"{kind} under {root}: {exc}")
                self.release()
        raise CpuQuotaUnavailable("; ".join(errors))

    def _apply(
        self, kind: str, root: str, file: str, pids: list[int], cores: float, name: str
    ) -> None:
        quota = int(cores * self.PERIOD_US)
        if kind.startswith("v2"):
            with open(os.path.join(root, "cgroup.controllers")) as f:
                if "cpu" not in f.read().split():
                    raise OSError(f"no cpu controller in {root}/cgroup.controllers")
        elif not os.path.exists(os.path.join(root, file)):
            raise OSError(f"no {root}/{file}")
        self._root = root
        for pid in pids:
            d = os.path.join(root, f"{name}-{os.getpid()}-{pid}")
            os.mkdir(d)
            self.dirs.append(d)
            if kind.startswith("v2"):
                with open(os.path.join(d, "cpu.max"), "w") as f:
                    f.write(f"{quota} {self.PERIOD_US}")
            else:
                with open(os.path.join(d, "cpu.cfs_period_us"), "w") as f:
                    f.write(str(self.PERIOD_US))
                with open(os.path.join(d, "cpu.cfs_quota_us"), "w") as f:
                    f.write(str(quota))
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(str(pid))

    def release(self) -> None:
        for d in self.dirs:
            try:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    pids = f.read().split()
                for pid in pids:  # back to the root cgroup (a dead pid is simply gone)
                    try:
                        with open(os.path.join(self._root, "cgroup.procs"), "w") as f:
                            f.write(pid)
                    except OSError:
                        pass
                os.rmdir(d)
            except OSError:
                pass
        self.dirs = []

    def __enter__(self) -> CpuQuota:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
