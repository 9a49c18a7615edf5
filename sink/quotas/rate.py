"""Kafka's sampled rate and throttle-time maths, pure (the caller passes the time).

This is Kafka's `Rate` over a `SampledStat` (org.apache.kafka.common.metrics.stats),
as the ClientQuotaManager uses it with `quota.window.num` samples of
`quota.window.size.seconds` each:

- record(value, now): the current sample takes the value; a sample is complete once
  `window_ms` has passed since it started, and then the next one (in a ring of
  `samples`) is reset to start at `now`;
- samples older than `samples * window_ms` are reset before every measure (purge);
- the rate is the sum of the samples divided by the elapsed time since the oldest
  sample started, but never less than `(samples - 1)` full windows: a new client is
  measured over ten seconds by default, which is what lets it burst at first.

throttle_time_ms is QuotaUtils.throttleTime: how long the client must stay silent for
the measured rate to fall back to the bound, `(rate - bound) / bound * window`, where
window is the same elapsed time the rate was divided by. Byte-rate quotas use it
unbounded; the request-time quota bounds it by one window (boundedThrottleTime).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Sample:
    start_ms: float
    value: float = 0.0

    def reset(self, now_ms: float) -> None:
        self.start_ms = now_ms
        self.value = 0.0


class SampledRate:
    """A value per second over `samples` windows of `window_ms` (Kafka's Rate).

    Invariant: at most `samples` samples exist; `_current` indexes the one that
    takes records. Time only needs to be monotonic (any epoch, milliseconds).
    """

    __slots__ = ("_current", "_samples", "samples", "window_ms")

    def __init__(self, samples: int, window_ms: float) -> None:
        if samples < 2:
            raise ValueError("a sampled rate needs at least 2 samples")
        if window_ms <= 0:
            raise ValueError("window_ms must be positive")
        self.samples = samples
        self.window_ms = float(window_ms)
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        sample = self._samples[self._current]
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._samples):
                sample = _Sample(now_ms)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.reset(now_ms)
        sample.value += value

    def _purge(self, now_ms: float) -> None:
        expire = self.samples * self.window_ms
        for s in self._samples:
            if now_ms - s.start_ms >= expire:
                s.reset(now_ms)

    def total(self, now_ms: float) -> float:
        """Sum of the live samples (after purging the expired ones)."""
        self._purge(now_ms)
        return sum(s.value for s in self._samples)

    def window_size_ms(self, now_ms: float) -> float:
        """Elapsed time since the oldest sample started, at least samples-1 windows."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def rate(self, now_ms: float) -> float:
        """Value per second over the window."""
        return self.total(now_ms) / (self.window_size_ms(now_ms) / 1000.0)

    def idle_since(self) -> float | None:
        """Start of the newest sample (None: never recorded): for expiring sensors."""
        return max((s.start_ms for s in self._samples), default=None)


def throttle_time_ms(rate: float, bound: float, window_ms: float) -> int:
    """Kafka's throttle time for a measured rate over bound (0 when within it)."""
    if rate <= bound:
        return 0
    return round((rate - bound) / bound * window_ms)


def bounded_throttle_time_ms(rate: float, bound: float, window_ms: float, max_ms: int) -> int:
    """throttle_time_ms, at most max_ms (Kafka's request-time quota bounds it by one window)."""
    return min(throttle_time_ms(rate, bound, window_ms), max_ms)
