"""raftlog.latency.LatencyHistogram: bucket edges, quantiles within one bucket of the
truth, differences and sums of snapshots, the Prometheus view."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from raftlog.latency import BOUNDS_S, LatencyHistogram


def test_bounds_grow_by_sqrt2_from_100us_to_about_100s():
    assert BOUNDS_S[0] == pytest.approx(1e-4)
    assert BOUNDS_S[-1] == pytest.approx(104.8576, rel=1e-6)
    for a, b in itertools.pairwise(BOUNDS_S):
        assert b / a == pytest.approx(math.sqrt(2), rel=1e-3)


def test_an_observation_on_a_bound_counts_in_that_bound_and_beyond_the_last_in_overflow():
    h = LatencyHistogram()
    h.observe(BOUNDS_S[3])
    h.observe(BOUNDS_S[3] * 1.0001)
    h.observe(0.0)
    h.observe(500.0)
    assert h.counts[0] == 1 and h.counts[3] == 1 and h.counts[4] == 1 and h.counts[-1] == 1
    assert h.count == 4
    assert h.quantile(1.0) == 500.0  # beyond the last bound: the largest observation
    assert h.max_s == 500.0


def test_empty_histogram_has_no_quantiles_and_a_count_only_summary():
    h = LatencyHistogram()
    assert h.quantile(0.99) is None
    assert h.summary_ms() == {"count": 0}
    with pytest.raises(ValueError):
        h.quantile(1.5)
    with pytest.raises(ValueError):
        LatencyHistogram([1, 2, 3])


def test_quantiles_are_never_below_the_truth_and_within_sqrt2_above_it():
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    values = [rng.lognormvariate(math.log(0.005), 1.2) for _ in range(5000)]
    h = LatencyHistogram()
    for v in values:
        h.observe(v)
    ordered = sorted(values)
    for q in (0.5, 0.9, 0.99, 0.999):
        truth = ordered[max(1, math.ceil(q * len(values))) - 1]
        got = h.quantile(q)
        assert truth <= got <= truth * math.sqrt(2) * 1.0001, (q, truth, got)
    assert h.sum_s == pytest.approx(sum(values))


def test_snapshots_difference_and_add():
    h = LatencyHistogram()
    for v in (0.001, 0.002, 0.003):
        h.observe(v)
    before = h.snapshot()
    for v in (0.05, 0.06):
        h.observe(v)
    since = h.minus(before)
    assert since.count == 2 and since.quantile(0.0) >= 0.05
    assert since.sum_s == pytest.approx(0.11)
    both = since.plus(before)
    assert both.counts == h.counts
    again = LatencyHistogram.from_json(h.to_json())
    assert again.counts == h.counts and again.sum_s == pytest.approx(h.sum_s)


def test_prometheus_buckets_are_cumulative_and_end_with_inf():
    h = LatencyHistogram()
    for v in (0.0001, 0.001, 0.01, 1000.0):
        h.observe(v)
    buckets = list(h.cumulative())
    assert buckets[-1] == ("+Inf", 4)
    assert len(buckets) == len(BOUNDS_S) + 1
    counts = [n for _, n in buckets]
    assert counts == sorted(counts) and counts[0] == 1 and counts[-2] == 3
