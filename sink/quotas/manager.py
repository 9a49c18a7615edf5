"""ClientQuotaManager: measures each client against its quotas and says how long to
throttle it (Kafka's ClientQuotaManager and ClientRequestQuotaManager, one node).

What the Kafka front end does with it (KIP-219, Kafka 2.0+): the response is sent at
once carrying throttle_time_ms, and the connection is muted (no further request is
read from it) for that long. librdkafka does not hold back on produce throttle_time,
so the muting is what enforces the quota.

- Produce: the request's bytes are recorded when it is dispatched;
- Fetch: the response's bytes are recorded when it is formed, and a Fetch never asks
  for more than the quota's windows can absorb (max_fetch_bytes). A client already over
  its quota before this response (another connection of it was served meanwhile) gets
  it empty, its bytes unrecorded, as Kafka answers every throttled Fetch; one that goes
  over with this response gets the data and the throttle. (Kafka empties that one too,
  which starves a consumer whose single batch, always served whole under KIP-74, is
  more than the windows absorb: it would be throttled, emptied and asked again forever.)
- request_percentage: the event-loop time of each request's dispatch step, as a
  percentage of one thread (Kafka counts handler-thread time the same way); its
  throttle is bounded by one window, as Kafka's is.

Nothing is measured for a client no quota applies to, and with no quota configured
at all (the default) record_* return 0 after one truthiness check.

State per node only (rates are not replicated; a client is measured where it
connects). Sensors idle for an hour are dropped (Kafka's inactive-sensor expiry).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sink.quotas.entities import (
    ANONYMOUS,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaTable,
    Resolved,
)
from sink.quotas.rate import SampledRate, bounded_throttle_time_ms, throttle_time_ms

OTHER_CLIENTS = "__other__"
"""The client-id label that aggregates clients beyond quotas.max_client_metrics."""

_SENSOR_EXPIRY_MS = 3_600_000.0
_SWEEP_EVERY_MS = 60_000.0


@dataclass(frozen=True, slots=True)
class QuotaOptions:
    window_num: int = 11
    """Samples a client's rate is measured over (Kafka's quota.window.num)."""
    window_size_s: float = 1.0
    """Length of one sample in seconds (Kafka's quota.window.size.seconds). A new client
    is measured over (window_num - 1) windows, so it may burst that many seconds of its
    quota at first; the request-time throttle is bounded by one window."""
    max_client_metrics: int = 100
    """Client ids given their own label in the quota metrics (the first ones throttled
    or measured); later ones are summed under client_id="__other__" (bounded cardinality)."""

    def __post_init__(self) -> None:
        if self.window_num < 2:
            raise ValueError(f"quotas.window_num must be >= 2, got {self.window_num}")
        if not self.window_size_s > 0:
            raise ValueError(f"quotas.window_size_s must be positive, got {self.window_size_s}")
        if self.max_client_metrics < 0:
            raise ValueError(
                f"quotas.max_client_metrics must be >= 0, got {self.max_client_metrics}"
            )


class QuotaChannel:
    """One connection as quotas see it: who it is and until when it is muted.

    The connection sets client_id before each dispatch and reads no request while
    muted_for() > 0; the manager extends the deadline (never shortens it)."""

    __slots__ = ("_clock", "client_id", "muted_until", "user")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.user = ANONYMOUS
        self.client_id = ""
        self.muted_until = 0.0
        self._clock = clock

    def mute(self, ms: int) -> None:
        self.muted_until = max(self.muted_until, self._clock() + ms / 1000.0)

    def muted_for(self) -> float:
        """Seconds left before the connection may be read again (<= 0: not muted)."""
        return self.muted_until - self._clock()


class _Sensor:
    __slots__ = ("label", "rate", "throttled_ms")

    def __init__(self, rate: SampledRate, label: str) -> None:
        self.rate = rate
        self.label = label
        self.throttled_ms = 0


class ClientQuotaManager:
    """Rates and throttle times of every client of one node.

    table: returns the applied QuotaTable (the state machine's; it may be replaced by
    a snapshot load, so it is read at each call). clock: seconds, monotonic."""

    def __init__(
        self,
        table: Callable[[], QuotaTable],
        options: QuotaOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options or QuotaOptions()
        self._table = table
        self._clock = clock
        self._window_ms = self.options.window_size_s * 1000.0
        self._sensors: dict[tuple[str, str, str], _Sensor] = {}
        self._resolved: dict[tuple[str, str, str], Resolved | None] = {}
        self._resolved_of: tuple[int, int] = (0, -1)
        self._labels: set[str] = set()
        self._retired: dict[tuple[str, str], int] = {}
        self._last_sweep = 0.0

    # ---------------------------------------------------------------- recording

    def record_produce(self, channel: QuotaChannel, nbytes: int) -> int:
        """A Produce request of nbytes: its throttle time in ms (the channel is muted)."""
        return self._record(PRODUCER_BYTE_RATE, channel, float(nbytes))

    def record_fetch(self, channel: QuotaChannel, nbytes: int) -> tuple[int, bool]:
        """A Fetch response of nbytes: (throttle ms, whether it must go out empty: the
        client was over its quota already; then its bytes are unrecorded)."""
        ms = self._record(CONSUMER_BYTE_RATE, channel, float(nbytes), unrecord_if_over=True)
        return (-ms, True) if ms < 0 else (ms, False)

    def record_request_time(self, channel: QuotaChannel, seconds: float) -> int:
        """Event-loop time spent on one request: its throttle time (the channel is muted)."""
        return self._record(REQUEST_PERCENTAGE, channel, seconds * 100.0)

    def max_fetch_bytes(self, channel: QuotaChannel) -> int | None:
        """The most one Fetch may return: what the quota allows over window_num - 1
        windows (Kafka's getMaxValueInQuotaWindow), None when unlimited."""
        resolved = self._resolve(CONSUMER_BYTE_RATE, channel)
        if resolved is None:
            return None
        windows = (self.options.window_num - 1) * self.options.window_size_s
        return max(1, int(resolved.bound * windows))

    def _resolve(self, key: str, channel: QuotaChannel) -> Resolved | None:
        table = self._table()
        if not table:
            return None
        stamp = (id(table), table.version)
        if stamp != self._resolved_of:
            self._resolved.clear()
            self._resolved_of = stamp
        ck = (key, channel.user, channel.client_id)
        try:
            return self._resolved[ck]
        except KeyError:
            r = self._resolved[ck] = table.resolve(channel.user, channel.client_id, key)
            return r

    def _record(
        self, key: str, channel: QuotaChannel, value: float, unrecord_if_over: bool = False
    ) -> int:
        """Record value; the throttle time in ms (0: within the quota). With
        unrecord_if_over, a client over its bound BEFORE this value gets -ms and the
        value is taken back (the caller sends nothing for it)."""
        resolved = self._resolve(key, channel)
        if resolved is None:
            return 0
        now_ms = self._clock() * 1000.0
        sensor = self._sensor(key, resolved, channel, now_ms)
        rate = sensor.rate
        was_over = unrecord_if_over and rate.rate(now_ms) > resolved.bound
        rate.record(value, now_ms)
        measured = rate.rate(now_ms)
        if measured <= resolved.bound:
            return 0
        window = rate.window_size_ms(now_ms)
        if key == REQUEST_PERCENTAGE:
            ms = bounded_throttle_time_ms(measured, resolved.bound, window, int(self._window_ms))
        else:
            ms = throttle_time_ms(measured, resolved.bound, window)
        if was_over:
            rate.record(-value, now_ms)
        if ms > 0:
            channel.mute(ms)
            sensor.throttled_ms += ms
        return -ms if was_over else ms

    def _sensor(
        self, key: str, resolved: Resolved, channel: QuotaChannel, now_ms: float
    ) -> _Sensor:
        user_tag, client_tag = resolved.sensor
        sk = (key, user_tag, client_tag)
        sensor = self._sensors.get(sk)
        if sensor is None:
            if now_ms - self._last_sweep >= _SWEEP_EVERY_MS:
                self._sweep(now_ms)
            label = channel.client_id
            if label not in self._labels:
                if len(self._labels) < self.options.max_client_metrics:
                    self._labels.add(label)
                else:
                    label = OTHER_CLIENTS
            rate = SampledRate(self.options.window_num, self._window_ms)
            sensor = self._sensors[sk] = _Sensor(rate, label)
        return sensor

    def _sweep(self, now_ms: float) -> None:
        """Drop sensors idle for an hour (their throttled time stays in the totals)."""
        self._last_sweep = now_ms
        for sk, sensor in list(self._sensors.items()):
            newest = sensor.rate.idle_since()
            if newest is None or now_ms - newest >= _SENSOR_EXPIRY_MS:
                self._retired[sk[0], sensor.label] = (
                    self._retired.get((sk[0], sensor.label), 0) + sensor.throttled_ms
                )
                del self._sensors[sk]

    # ------------------------------------------------------------------ metrics

    def throttled_ms_by_client(self) -> dict[tuple[str, str], int]:
        """(quota key, client-id label) -> ms of throttle time given so far (monotonic)."""
        out: dict[tuple[str, str], int] = dict(self._retired)
        for (key, _user, _client), sensor in self._sensors.items():
            out[key, sensor.label] = out.get((key, sensor.label), 0) + sensor.throttled_ms
        return out

    def rates_by_client(self) -> dict[tuple[str, str], float]:
        """(quota key, client-id label) -> current measured rate (bytes/s or percent)."""
        now_ms = self._clock() * 1000.0
        out: dict[tuple[str, str], float] = {}
        for (key, _user, _client), sensor in self._sensors.items():
            out[key, sensor.label] = out.get((key, sensor.label), 0.0) + sensor.rate.rate(now_ms)
        return out


_EMPTY = QuotaTable()
NO_QUOTAS = ClientQuotaManager(lambda: _EMPTY)
"""A manager over an empty table: what a context without quotas uses."""
