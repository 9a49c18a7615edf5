"""Connection admission (sink.kafka.admission): limits, rate, logging once per interval."""

from __future__ import annotations

import pytest

from sink.kafka.admission import LOG_INTERVAL_S, Admission, RefuseReason, TokenBucket
from sink.kafka.limits import KafkaLimits


def test_token_bucket_allows_a_burst_then_the_rate():
    b = TokenBucket(rate=10.0, burst=10.0, now=0.0)
    assert sum(b.take(0.0) for _ in range(20)) == 10
    assert not b.take(0.05)  # half a token
    assert b.take(0.1)
    assert sum(b.take(100.0) for _ in range(50)) == 10  # refills to the burst, no more
    assert not b.take(50.0)  # a clock that runs backwards adds nothing


def test_total_per_address_and_overrides():
    lim = KafkaLimits(
        max_connections=5,
        max_connections_per_ip=2,
        max_connections_per_ip_overrides="10.0.0.9=4, ::1=0",
        max_connection_creation_rate=1000.0,
    )
    a = Admission(lim, now=0.0)
    assert [a.admit("10.0.0.1", 0.0) for _ in range(3)] == [None, None, RefuseReason.PER_IP]
    assert a.admit("::1", 0.0) is RefuseReason.PER_IP  # override 0: none from there
    assert [a.admit("10.0.0.9", 0.0) for _ in range(4)] == [None, None, None, RefuseReason.TOTAL]
    assert a.total == 5 and a.per_ip == {"10.0.0.1": 2, "10.0.0.9": 3}
    a.release("10.0.0.1")
    a.release("10.0.0.1")
    assert "10.0.0.1" not in a.per_ip and a.total == 3
    assert a.admit("10.0.0.1", 0.0) is None
    assert a.refused == {RefuseReason.PER_IP: 2, RefuseReason.TOTAL: 1}


def test_creation_rate_refuses_past_the_bucket():
    a = Admission(KafkaLimits(max_connection_creation_rate=100.0), now=0.0)
    verdicts = [a.admit("127.0.0.1", 0.0) for _ in range(150)]
    assert verdicts.count(None) == 100 and verdicts.count(RefuseReason.RATE) == 50
    for _ in range(100):
        a.release("127.0.0.1")
    assert a.admit("127.0.0.1", 0.5) is None  # 50 tokens back after half a second


def test_refusals_are_logged_once_per_interval_with_their_count():
    a = Admission(KafkaLimits(max_connections=1), now=0.0)
    assert a.admit("h", 0.0) is None
    lines = []
    for i in range(1000):
        t = i * 0.01  # 10 s of refusals
        a.admit("h", t)
        line = a.log_due(t)
        if line:
            lines.append((t, line))
    assert len(lines) == 1 + int(9.99 // LOG_INTERVAL_S)  # the first, then once per interval
    assert lines[0][1].startswith("refused 1 connection(s)")
    assert a.next_log_at() == lines[-1][0] + LOG_INTERVAL_S
    final = a.log_due(a.next_log_at())
    assert final is not None and "by max_connections;" in final
    assert sum(int(x[1].split()[1]) for x in lines) + int(final.split()[1]) == 1000
    assert a.next_log_at() is None


@pytest.mark.parametrize("bad", ["10.0.0.1", "host=3", "10.0.0.1=-1", "10.0.0.1=x"])
def test_bad_overrides_are_refused_clearly(bad):
    with pytest.raises(ValueError, match="max_connections_per_ip_overrides"):
        KafkaLimits(max_connections_per_ip_overrides=bad)
