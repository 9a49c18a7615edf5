"""The streaming reader's offset protocol over a fake cluster (no JVM)."""

import json

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from connectors.spark.cluster import PartitionState, ReadCluster
from connectors.spark.errors import DataLossError, OffsetOutOfRangeError, TopicNotFoundError
from connectors.spark.offsets import EARLIEST, LATEST, OffsetSpec
from connectors.spark.options import Subscription, parse_options
from connectors.spark.resolve import batch_range, check_exists, next_end
from connectors.spark.stream import RaftsinkStreamReader
from sink.readapi import ReadApiClient
from tests.unit.connectors.fakes import FakeCluster, FakeLog, Rec

SUB = Subscription("subscribe", topics=("a", "b"))


def add(log: FakeLog, topic: str, n: int, partition: int = 0) -> None:
    log.append(topic, partition, [Rec(None, b"v", 0)] * n)


def reader(log: FakeLog, **opts) -> RaftsinkStreamReader:
    base = {"raftsink.nodes": "n1:1", "subscribe": "a,b"}
    r = RaftsinkStreamReader(parse_options({**base, **opts}, streaming=True))
    r._cluster = FakeCluster({"n1:1": log})
    return r


def as_text(d: dict) -> str:
    return json.dumps(d)


def test_latest_is_resolved_once_by_an_empty_first_batch():
    log = FakeLog()
    add(log, "a", 5)
    add(log, "b", 7)
    r = reader(log)
    init = r.initialOffset()
    assert init == {"a": {"0": LATEST}, "b": {"0": LATEST}}
    end0 = r.latestOffset(init, ReadAllAvailable())
    assert end0 == {"a": {"0": 5}, "b": {"0": 7}}
    add(log, "a", 3)
    assert r.initialOffset() == init  # second call, same instance: same answer
    assert r.partitions(init, end0) == []  # batch 0 reads nothing, on every replay
    end1 = r.latestOffset(end0, ReadAllAvailable())
    assert end1 == {"a": {"0": 8}, "b": {"0": 7}}
    assert [(p.topic, p.start, p.end) for p in r.partitions(end0, end1)] == [("a", 5, 8)]
    assert r.reportLatestOffset() == end1
    assert as_text(end1) == json.dumps(end1, sort_keys=True)


def test_earliest_and_max_offsets_per_trigger():
    log = FakeLog()
    add(log, "a", 300)
    add(log, "b", 100)
    r = reader(log, startingOffsets="earliest", maxOffsetsPerTrigger="40")
    assert r.getDefaultReadLimit().max_rows == 40
    start = r.latestOffset(r.initialOffset(), r.getDefaultReadLimit())
    assert start == {"a": {"0": 0}, "b": {"0": 0}}
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert end == {"a": {"0": 30}, "b": {"0": 10}}
    assert r.reportLatestOffset() == {"a": {"0": 300}, "b": {"0": 100}}


def test_available_now_stops_at_target_and_new_topics_enter_at_log_start():
    log = FakeLog()
    add(log, "a", 10)
    r = reader(log, startingOffsets="earliest", subscribe="", subscribePattern="[ab]")
    r.prepareForTriggerAvailableNow()
    start = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    add(log, "a", 5)  # after the target
    add(log, "b", 4)  # a topic created after the query started
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"a": {"0": 10}, "b": {"0": 0}}
    assert r.latestOffset(end, ReadAllAvailable()) == end  # drained: availableNow ends


def test_missing_topic_and_bad_start():
    log = FakeLog()
    add(log, "a", 3)
    with pytest.raises(TopicNotFoundError, match="b"):
        reader(log).initialOffset()
    add(log, "b", 3)
    with pytest.raises(OffsetOutOfRangeError, match="beyond"):
        reader(log, startingOffsets='{"a": {"0": 99}}').initialOffset()
    with pytest.raises(TopicNotFoundError, match="a/5"):
        reader(log, startingOffsets='{"a": {"5": 1}}').initialOffset()


def test_next_end_never_goes_backwards_and_keeps_unknown_partitions():
    states = {("a", 0): PartitionState(0, 5)}  # a lagging node, and it does not know b
    end, _ = next_end({("a", 0): 9, ("b", 0): 4}, SUB, states)
    assert end == {("a", 0): 9, ("b", 0): 4}


def test_check_exists_for_assign():
    sub = Subscription("assign", assigned=(("a", 0), ("a", 1)))
    with pytest.raises(TopicNotFoundError, match="a/1"):
        check_exists(sub, {("a", 0): PartitionState(0, 0)}, ("h:1",))


def test_batch_range_validation_and_data_loss():
    states = {("a", 0): PartitionState(10, 50), ("b", 0): PartitionState(0, 5)}
    earliest, latest = OffsetSpec(EARLIEST), OffsetSpec(LATEST)
    assert batch_range(earliest, latest, SUB, states, True) == (
        {("a", 0): 10, ("b", 0): 0},
        {("a", 0): 50, ("b", 0): 5},
    )
    with pytest.raises(OffsetOutOfRangeError, match="beyond"):
        batch_range(earliest, OffsetSpec(LATEST, {("b", 0): 6}), SUB, states, True)
    early = OffsetSpec(EARLIEST, {("a", 0): 3})
    with pytest.raises(DataLossError, match="log start"):
        batch_range(early, latest, SUB, states, True)
    start, _ = batch_range(early, latest, SUB, states, False)
    assert start[("a", 0)] == 10


def test_commit_uses_read_api_commit_when_it_exists(monkeypatch):
    cluster = ReadCluster(["127.0.0.1:1"], request_timeout_s=1, retry_timeout_s=1)
    if not hasattr(ReadApiClient, "commit"):
        assert cluster.commit("p", {("a", 0): 1}) is False
    seen = []

    async def commit(self, pipeline_id, offsets, timeout=15.0):
        seen.append((self.address, pipeline_id, offsets))

    monkeypatch.setattr(ReadApiClient, "commit", commit, raising=False)
    r = reader(FakeLog(), pipelineId="pipe-1")
    r._cluster = cluster
    r.commit({"b": {"0": 4}, "a": {"0": 7}})
    assert seen == [("127.0.0.1:1", "pipe-1", {("a", 0): 7, ("b", 0): 4})]
    reader(FakeLog()).commit({"a": {"0": 1}})  # no pipelineId: nothing reported
    assert len(seen) == 1


def test_reader_pickles_without_sockets():
    import pickle

    r = reader(FakeLog())
    r._cluster = None
    clone = pickle.loads(pickle.dumps(r))
    assert clone.options == r.options


def test_commit_is_a_noop_without_a_commit_rpc(monkeypatch):
    monkeypatch.delattr(ReadApiClient, "commit", raising=False)
    cluster = ReadCluster(["127.0.0.1:1"], request_timeout_s=1, retry_timeout_s=1)
    assert cluster.commit("p", {("a", 0): 1}) is False
    r = reader(FakeLog(), pipelineId="pipe-1")
    r._cluster = cluster
    r.commit({"a": {"0": 7}})  # neither raises nor contacts the (absent) cluster
