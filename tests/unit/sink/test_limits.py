import pytest

from sink.kafka.limits import KafkaLimits
from sink.service import SinkOptions
from sink.state import SinkStateMachine


def test_defaults_are_valid():
    lim = KafkaLimits()
    assert lim.max_frame_bytes == 16 << 20 and lim.max_connections == 10_000
    SinkOptions()


@pytest.mark.parametrize(
    "kw",
    [
        {"max_frame_bytes": 0},
        {"max_frame_bytes": 10},
        {"max_connections": 0},
        {"idle_timeout_s": 0},
        {"max_pending_produce_bytes": -1},
        {"max_inflight_requests": 0},
        {"max_fetch_wait_ms": -1},
    ],
)
def test_invalid_limits_rejected(kw):
    with pytest.raises(ValueError):
        KafkaLimits(**kw)


def test_invalid_options_rejected():
    with pytest.raises(ValueError):
        SinkOptions(produce_timeout_s=0)
    with pytest.raises(ValueError):
        SinkStateMachine(default_partitions=0)
