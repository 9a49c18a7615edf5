import pytest

from connectors.spark.errors import InvalidOptionError
from connectors.spark.offsets import EARLIEST, LATEST
from connectors.spark.options import parse_options

NODES = {"raftsink.nodes": "127.0.0.1:1, 127.0.0.1:2"}


def test_defaults_streaming_and_batch():
    s = parse_options({**NODES, "subscribe": "b,a"}, streaming=True)
    assert s.nodes == ("127.0.0.1:1", "127.0.0.1:2")
    assert s.subscription.topics == ("a", "b")
    assert s.starting.default == LATEST and s.ending is None
    assert s.fail_on_data_loss and s.include_headers
    assert s.max_offsets_per_trigger is None and s.min_partitions is None
    assert s.pipeline_id is None
    b = parse_options({**NODES, "subscribe": "a"}, streaming=False)
    assert b.starting.default == EARLIEST and b.ending is not None and b.ending.default == LATEST


def test_keys_are_case_insensitive():
    s = parse_options(
        {
            "RAFTSINK.NODES": "h:1",
            "SubscribePattern": "ev.*",
            "MAXOFFSETSPERTRIGGER": "100",
            "failondataloss": "False",
            "minPartitions": "4",
            "includeHeaders": "false",
            "pipelineId": "p1",
        },
        streaming=True,
    )
    assert s.subscription.kind == "subscribePattern"
    assert s.subscription.matches(("events", 0)) and not s.subscription.matches(("x", 0))
    assert s.max_offsets_per_trigger == 100 and not s.fail_on_data_loss
    assert s.min_partitions == 4 and not s.include_headers and s.pipeline_id == "p1"


def test_assign():
    s = parse_options({**NODES, "assign": '{"t": [1, 0], "u": [3]}'}, streaming=True)
    assert s.subscription.assigned == (("t", 0), ("t", 1), ("u", 3))
    assert s.subscription.matches(("t", 1)) and not s.subscription.matches(("t", 2))
    assert s.subscription.topic_filter() == ["t", "u"]
    with pytest.raises(InvalidOptionError, match="assign"):
        parse_options({**NODES, "assign": "t:0"}, streaming=True)


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        ({"subscribe": "a"}, "raftsink.nodes is required"),
        ({"subscribe": "a", "kafka.bootstrap.servers": "h:9092"}, "read API"),
        ({"raftsink.nodes": "nohostport", "subscribe": "a"}, "host:port"),
        ({**NODES}, "exactly one"),
        ({**NODES, "subscribe": "a", "assign": '{"a":[0]}'}, "exactly one"),
        ({**NODES, "subscribePattern": "("}, "subscribePattern"),
        ({**NODES, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, "positive"),
        ({**NODES, "subscribe": "a", "minPartitions": "x"}, "positive"),
        ({**NODES, "subscribe": "a", "failOnDataLoss": "maybe"}, "true or false"),
        ({**NODES, "subscribe": "a", "endingOffsets": "latest"}, "batch"),
    ],
)
def test_streaming_errors(opts, match):
    with pytest.raises(InvalidOptionError, match=match):
        parse_options(opts, streaming=True)


def test_batch_errors():
    with pytest.raises(InvalidOptionError, match="latest"):
        parse_options({**NODES, "subscribe": "a", "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(InvalidOptionError, match="earliest"):
        parse_options({**NODES, "subscribe": "a", "endingOffsets": "earliest"}, streaming=False)
    with pytest.raises(InvalidOptionError, match="streaming"):
        parse_options({**NODES, "subscribe": "a", "maxOffsetsPerTrigger": "5"}, streaming=False)
