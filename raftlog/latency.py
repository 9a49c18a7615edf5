"""LatencyHistogram: a fixed-bucket histogram of durations, cheap enough for every
request and every disk round, mergeable and differencable.

Where tails come from is what operators and benchmarks ask ("is the p99 the server,
the disk or the client?"); a mean or a max answers neither. Bounds grow by a factor
of sqrt(2) from 100 us to about 100 s (41 buckets and one for anything longer), so
a quantile read from the counts is within that factor of the true value, whatever the
load. Invariants:
- `counts[i]` counts observations d with BOUNDS_S[i-1] < d <= BOUNDS_S[i] (the last,
  d > BOUNDS_S[-1]); counts only grow, so two snapshots' difference is the histogram
  of what happened between them (`minus`), and snapshots of several processes add
  (`plus`);
- `observe` is O(log buckets) with no allocation: one bisect and two additions.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence

BOUNDS_S: tuple[float, ...] = tuple(round(1e-4 * 2 ** (k / 2), 7) for k in range(41))
"""Upper bounds of the buckets in seconds: 100 us x sqrt(2)^k, k = 0..40 (104.9 s)."""


class LatencyHistogram:
    """Counts of durations per bucket (BOUNDS_S), their sum and the largest seen."""

    __slots__ = ("counts", "max_s", "sum_s")

    def __init__(self, counts: Sequence[int] | None = None, sum_s: float = 0.0) -> None:
        self.counts = list(counts) if counts is not None else [0] * (len(BOUNDS_S) + 1)
        if len(self.counts) != len(BOUNDS_S) + 1:
            raise ValueError(f"a histogram has {len(BOUNDS_S) + 1} buckets, got {len(counts)}")
        self.sum_s = sum_s
        self.max_s = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BOUNDS_S, seconds)] += 1
        self.sum_s += seconds
        if seconds > self.max_s:
            self.max_s = seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the q-quantile, or the largest
        observation if that is less (seconds; never less than the truth, at most
        sqrt(2) above it); None when empty."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"a quantile is in [0, 1], got {q}")
        total = self.count
        if not total:
            return None
        rank = max(1, math.ceil(q * total))
        seen = 0
        for i, n in enumerate(self.counts):
            seen += n
            if seen >= rank:
                if i == len(BOUNDS_S):
                    return max(self.max_s, BOUNDS_S[-1])
                # max_s is known unless this is a difference of snapshots (minus)
                return min(BOUNDS_S[i], self.max_s) if self.max_s else BOUNDS_S[i]
        return None  # unreachable: seen reaches total

    def quantile_ms(self, q: float) -> float:
        """quantile(q) in ms, rounded to 0.01 (0.0 when empty)."""
        return round((self.quantile(q) or 0.0) * 1000, 2)

    def minus(self, earlier: LatencyHistogram) -> LatencyHistogram:
        """What was observed after `earlier` (a snapshot of this histogram)."""
        return LatencyHistogram(
            [a - b for a, b in zip(self.counts, earlier.counts, strict=True)],
            self.sum_s - earlier.sum_s,
        )

    def plus(self, other: LatencyHistogram) -> LatencyHistogram:
        out = LatencyHistogram(
            [a + b for a, b in zip(self.counts, other.counts, strict=True)],
            self.sum_s + other.sum_s,
        )
        out.max_s = max(self.max_s, other.max_s)
        return out

    def snapshot(self) -> LatencyHistogram:
        out = LatencyHistogram(self.counts, self.sum_s)
        out.max_s = self.max_s
        return out

    def summary_ms(self) -> dict[str, float | int]:
        """count, and p50/p99/p99.9/max in ms (bucket upper bounds), for status."""
        out: dict[str, float | int] = {"count": self.count}
        if out["count"]:
            for name, q in (("p50_ms", 0.5), ("p99_ms", 0.99), ("p999_ms", 0.999)):
                out[name] = self.quantile_ms(q)
            out["max_ms"] = round(self.max_s * 1000, 2)
        return out

    def to_json(self) -> dict[str, object]:
        """The raw counts (for a client that differences two reads: `from_json`)."""
        return {"counts": list(self.counts), "sum_s": round(self.sum_s, 6)}

    @classmethod
    def from_json(cls, data: dict) -> LatencyHistogram:
        return cls(data["counts"], float(data.get("sum_s", 0.0)))

    def cumulative(self) -> Iterable[tuple[str, int]]:
        """Prometheus buckets: (le, observations <= le), ending with +Inf."""
        seen = 0
        for bound, n in zip(BOUNDS_S, self.counts, strict=False):
            seen += n
            yield (repr(bound), seen)
        yield ("+Inf", seen + self.counts[-1])
