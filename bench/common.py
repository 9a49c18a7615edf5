"""Helpers shared by the benchmarks: machine description, percentiles, targets."""

from __future__ import annotations

import os
import platform
import sys


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
