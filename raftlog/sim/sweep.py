"""Many seeds at once: run_seed over worker processes.

Seeds are independent and each is deterministic, so running them on several
cores changes nothing but the wall time: the same seeds pass or fail, and the
report lists failures in seed order whatever order the workers finished in.
Workers are spawned (not forked): a test process may hold gRPC or other threads,
and a forked copy of those can deadlock.

A job is (seed, keyword arguments of run_seed); only picklable arguments.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from raftlog.sim.runner import SimFailure, SimResult, run_seed

Job = tuple[int, dict[str, Any]]

WORKERS_ENV = "RAFTSINK_SIM_WORKERS"
"""Worker processes; default: the machine's cores, at most 4. 1 runs in this process."""

CHUNK = 25
"""Seeds per task: large enough that spawning and pickling stay negligible, small
enough that the cores finish together."""


@dataclass
class SweepReport:
    results: list[SimResult] = field(default_factory=list)
    """The passing seeds' results, in seed order."""
    failures: list[tuple[int, str]] = field(default_factory=list)
    """(seed, report) of every failing seed, in seed order."""

    def failure_text(self, limit: int = 3) -> str:
        shown = "\n\n".join(text for _seed, text in self.failures[:limit])
        more = len(self.failures) - limit
        return shown + (f"\n\n... and {more} more failing seeds" if more > 0 else "")


def default_workers() -> int:
    raw = os.environ.get(WORKERS_ENV)
    if raw:
        n = int(raw)
        if n < 1:
            raise ValueError(f"{WORKERS_ENV} must be >= 1, got {raw!r}")
        return n
    return max(1, min(4, os.cpu_count() or 1))


def _run_chunk(jobs: Sequence[Job]) -> list[tuple[int, SimResult | None, str | None]]:
    out: list[tuple[int, SimResult | None, str | None]] = []
    for seed, kwargs in jobs:
        try:
            out.append((seed, run_seed(seed, **kwargs), None))
        except SimFailure as e:
            out.append((seed, None, str(e)))
    return out


def sweep(jobs: Iterable[Job], workers: int | None = None) -> SweepReport:
    """Run every job; never stops early (a worker cannot be told cheaply), so a
    broken build reports all its failing seeds, sorted."""
    todo = list(jobs)
    n = workers if workers is not None else default_workers()
    chunks = [todo[i : i + CHUNK] for i in range(0, len(todo), CHUNK)]
    if n <= 1 or len(chunks) <= 1:
        rows = [row for chunk in chunks for row in _run_chunk(chunk)]
    else:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
            rows = [row for part in pool.map(_run_chunk, chunks) for row in part]
    rows.sort(key=lambda row: row[0])
    report = SweepReport()
    for seed, result, failure in rows:
        if failure is not None:
            report.failures.append((seed, failure))
        else:
            assert result is not None
            report.results.append(result)
    return report
