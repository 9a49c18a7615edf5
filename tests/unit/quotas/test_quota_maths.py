"""sink.quotas: Kafka's sampled rate, throttle times, entity precedence, the manager,
all on an injected clock (no sleeping)."""

from __future__ import annotations

import random

import pytest

from sink.quotas import (
    CONSUMER_BYTE_RATE,
    OTHER_CLIENTS,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaManager,
    QuotaChannel,
    QuotaError,
    QuotaOptions,
    QuotaTable,
    SampledRate,
    alteration_of,
    entity_of,
    throttle_time_ms,
)
from sink.quotas.rate import bounded_throttle_time_ms


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# ------------------------------------------------------------------ rate maths


def test_throttle_time_matches_kafkas_examples() -> None:
    # QuotaUtilsTest: observed 100 over a quota of 50 with 3 samples (2 windows of 1 s) -> 2000.
    assert throttle_time_ms(100.0, 50.0, 2000.0) == 2000
    assert throttle_time_ms(18.2, 18.2, 10_000.0) == 0
    assert throttle_time_ms(16.5, 20.4, 10_000.0) == 0
    assert bounded_throttle_time_ms(1000.0, 10.0, 10_000.0, 1000) == 1000


def test_new_rate_is_measured_over_samples_minus_one_windows() -> None:
    r = SampledRate(11, 1000.0)
    r.record(10_000.0, 0.0)
    assert r.window_size_ms(0.0) == 10_000.0
    assert r.rate(0.0) == pytest.approx(1000.0)
    # 20.5 s later everything has expired (11 windows): the rate is back to zero.
    assert r.rate(20_500.0) == 0.0


def test_rate_over_full_windows_uses_elapsed_time() -> None:
    r = SampledRate(3, 1000.0)
    for t in range(0, 2500, 100):  # 100 bytes every 100 ms: 1000 B/s
        r.record(100.0, float(t))
    # Samples started at 0, 1000, 2000: elapsed 2400 ms >= 2 full windows.
    assert r.window_size_ms(2400.0) == pytest.approx(2400.0)
    assert r.rate(2400.0) == pytest.approx(2500.0 / 2.4)


def test_oldest_sample_is_reused_in_a_ring() -> None:
    r = SampledRate(3, 1000.0)
    r.record(1.0, 0.0)
    r.record(2.0, 1000.0)
    r.record(4.0, 2000.0)
    r.record(8.0, 3000.0)  # replaces the sample of t=0
    assert r.total(3000.0) == 14.0


@pytest.mark.parametrize("quota", [50_000.0, 200_000.0])
def test_a_client_obeying_its_throttle_converges_to_its_quota(quota: float) -> None:
    """Closed loop as a muted connection behaves: send, and wait out any throttle."""
    seed = random.randrange(1 << 30)
    print(f"seed={seed}")
    rng = random.Random(seed)
    clock = Clock()
    table = QuotaTable()
    table.apply(
        [alteration_of(entity_of([("client-id", "p")]), [(PRODUCER_BYTE_RATE, quota, False)])]
    )
    mgr = ClientQuotaManager(lambda: table, QuotaOptions(), clock)
    ch = QuotaChannel(clock)
    ch.client_id = "p"
    start = clock.t
    sent = 0.0
    while clock.t - start < 150.0:
        n = rng.randint(1000, 20_000)
        mgr.record_produce(ch, n)
        if clock.t - start >= 30.0:  # past the first burst Kafka's windows allow
            sent += n
        clock.t += 0.002  # 2 ms per request
        clock.t = max(clock.t, ch.muted_until)
    assert sent / (clock.t - start - 30.0) == pytest.approx(quota, rel=0.05)


# ---------------------------------------------------------------- entities


def test_entity_validation_errors_are_clear() -> None:
    with pytest.raises(QuotaError, match="at least one"):
        entity_of([])
    with pytest.raises(QuotaError, match="'ip' is not supported"):
        entity_of([("ip", "1.2.3.4")])
    with pytest.raises(QuotaError, match="unknown entity type 'group'"):
        entity_of([("group", "g")])
    with pytest.raises(QuotaError, match="given twice"):
        entity_of([("user", "a"), ("user", "b")])
    e = entity_of([("client-id", "c")])
    with pytest.raises(QuotaError, match="unknown quota key 'controller_mutation_rate'"):
        alteration_of(e, [("controller_mutation_rate", 1.0, False)])
    with pytest.raises(QuotaError, match="positive"):
        alteration_of(e, [(PRODUCER_BYTE_RATE, 0.0, False)])
    with pytest.raises(QuotaError, match="whole number"):
        alteration_of(e, [(PRODUCER_BYTE_RATE, 1.5, False)])
    alteration_of(e, [(REQUEST_PERCENTAGE, 12.5, False)])  # a double: fine
    alteration_of(e, [(PRODUCER_BYTE_RATE, 0.0, True)])  # removal ignores the value


def test_precedence_is_kafkas_and_per_key() -> None:
    t = QuotaTable()

    def setq(pairs, key, value):
        t.apply([alteration_of(entity_of(pairs), [(key, value, False)])])

    setq([("client-id", None)], PRODUCER_BYTE_RATE, 1)
    r = t.resolve("ANONYMOUS", "app", PRODUCER_BYTE_RATE)
    assert r is not None and (r.bound, r.sensor) == (1, ("", "app"))
    setq([("client-id", "app")], PRODUCER_BYTE_RATE, 2)
    assert t.resolve("ANONYMOUS", "app", PRODUCER_BYTE_RATE).bound == 2
    setq([("user", None)], PRODUCER_BYTE_RATE, 3)
    r = t.resolve("ANONYMOUS", "app", PRODUCER_BYTE_RATE)
    assert (r.bound, r.sensor) == (3, ("ANONYMOUS", ""))  # shared by every client of the user
    setq([("user", None), ("client-id", None)], PRODUCER_BYTE_RATE, 4)
    assert t.resolve("ANONYMOUS", "app", PRODUCER_BYTE_RATE).bound == 4
    setq([("user", "ANONYMOUS"), ("client-id", "app")], PRODUCER_BYTE_RATE, 5)
    assert t.resolve("ANONYMOUS", "app", PRODUCER_BYTE_RATE).bound == 5
    assert t.resolve("ANONYMOUS", "app", CONSUMER_BYTE_RATE) is None  # each key on its own
    t.apply(
        [
            alteration_of(
                entity_of([("user", "ANONYMOUS"), ("client-id", "app")]),
                [(PRODUCER_BYTE_RATE, 0, True)],
            )
        ]
    )
    assert entity_of([("user", "ANONYMOUS"), ("client-id", "app")]) not in t.quotas


def test_describe_filter_semantics() -> None:
    t = QuotaTable()
    for pairs in ([("client-id", "a")], [("client-id", None)], [("user", "u"), ("client-id", "a")]):
        t.apply([alteration_of(entity_of(pairs), [(PRODUCER_BYTE_RATE, 10, False)])])
    names = lambda res: [dict(e) for e, _ in res]  # noqa: E731
    assert names(t.describe([("client-id", 0, "a")], strict=True)) == [{"client-id": "a"}]
    assert len(t.describe([("client-id", 0, "a")], strict=False)) == 2
    assert names(t.describe([("client-id", 1, None)], strict=True)) == [{"client-id": None}]
    assert len(t.describe([("client-id", 2, None)], strict=True)) == 2
    assert len(t.describe([], strict=False)) == 3
    assert t.describe([], strict=True) == []
    with pytest.raises(QuotaError, match="needs a name"):
        t.describe([("client-id", 0, None)], strict=False)
    with pytest.raises(QuotaError, match="unknown entity type"):
        t.describe([("topic", 2, None)], strict=False)


def test_table_round_trips_through_json() -> None:
    t = QuotaTable()
    t.apply(
        [
            alteration_of(
                entity_of([("user", None), ("client-id", "x")]),
                [(CONSUMER_BYTE_RATE, 7, False), (REQUEST_PERCENTAGE, 2.5, False)],
            )
        ]
    )
    back = QuotaTable.from_json(t.to_json())
    assert back.quotas == t.quotas


# ------------------------------------------------------------------ manager


def _manager(clock: Clock, **quotas: float) -> tuple[ClientQuotaManager, QuotaTable]:
    table = QuotaTable()
    for client, rate in quotas.items():
        table.apply(
            [
                alteration_of(
                    entity_of([("client-id", client)]),
                    [
                        (PRODUCER_BYTE_RATE, rate, False),
                        (CONSUMER_BYTE_RATE, rate, False),
                        (REQUEST_PERCENTAGE, 10.0, False),
                    ],
                )
            ]
        )
    return ClientQuotaManager(lambda: table, QuotaOptions(max_client_metrics=1), clock), table


def _channel(clock: Clock, client: str) -> QuotaChannel:
    ch = QuotaChannel(clock)
    ch.client_id = client
    return ch


def test_no_quota_means_no_throttle_and_no_sensor() -> None:
    clock = Clock()
    mgr, _ = _manager(clock)
    ch = _channel(clock, "free")
    assert mgr.record_produce(ch, 10**9) == 0
    assert mgr.max_fetch_bytes(ch) is None
    assert mgr.rates_by_client() == {}


def test_throttle_mutes_the_channel_for_kafkas_throttle_time() -> None:
    clock = Clock()
    mgr, _ = _manager(clock, p=1000.0)
    ch = _channel(clock, "p")
    assert mgr.record_produce(ch, 10_000) == 0  # exactly 10 s worth: at the bound
    ms = mgr.record_produce(ch, 1000)
    # rate 11000/10 s = 1100 B/s over 1000: (1100 - 1000) / 1000 * 10 s = 1 s.
    assert ms == 1000
    assert ch.muted_for() == pytest.approx(1.0)
    assert mgr.throttled_ms_by_client()[PRODUCER_BYTE_RATE, "p"] == 1000


def test_throttled_fetch_is_unrecorded_and_fetch_size_is_capped() -> None:
    clock = Clock()
    mgr, _ = _manager(clock, c=1000.0)
    ch = _channel(clock, "c")
    assert mgr.max_fetch_bytes(ch) == 10_000
    assert mgr.record_fetch(ch, 10_000) == (0, False)
    # Within the quota before this response: served, throttled after it (never starved).
    assert mgr.record_fetch(ch, 5000) == (5000, False)
    # Over it already (another connection of the client): empty, its bytes not counted.
    ms, empty = mgr.record_fetch(ch, 5000)
    assert empty and ms > 5000
    assert mgr.rates_by_client()[CONSUMER_BYTE_RATE, "c"] == pytest.approx(1500.0)


def test_request_time_throttle_is_bounded_by_one_window() -> None:
    clock = Clock()
    mgr, _ = _manager(clock, r=1.0)
    ch = _channel(clock, "r")
    assert mgr.record_request_time(ch, 5.0) == 1000  # 500 %-seconds vs 10 %: bounded


def test_metric_labels_are_capped() -> None:
    clock = Clock()
    mgr, _ = _manager(clock, a=1.0, b=1.0)
    for client in ("a", "b"):
        mgr.record_produce(_channel(clock, client), 1000)
    labels = {label for _, label in mgr.throttled_ms_by_client()}
    assert labels == {"a", OTHER_CLIENTS}


def test_quota_change_applies_to_the_next_request() -> None:
    clock = Clock()
    mgr, table = _manager(clock, p=1000.0)
    ch = _channel(clock, "p")
    assert mgr.record_produce(ch, 20_000) > 0
    table.apply(
        [alteration_of(entity_of([("client-id", "p")]), [(PRODUCER_BYTE_RATE, 10**9, False)])]
    )
    assert mgr.record_produce(ch, 1) == 0


def test_idle_sensors_expire() -> None:
    clock = Clock()
    mgr, _ = _manager(clock, a=1.0, b=1.0)
    mgr.record_produce(_channel(clock, "a"), 1000)
    clock.t += 7200
    mgr.record_produce(_channel(clock, "b"), 1)  # a new sensor triggers the sweep
    assert len(mgr._sensors) == 1
    assert mgr.throttled_ms_by_client()[PRODUCER_BYTE_RATE, "a"] > 0  # totals stay
