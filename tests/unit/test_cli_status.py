"""`raftsink status`'s partition-groups table, merged from every node's own rows."""

from __future__ import annotations

from sink.cli_status import latency_line, partition_group_lines


def _row(group, partition, role, term, leader, commit, applied, replicas=(1, 2, 3)):
    return {
        "group": group,
        "topic": "orders",
        "partition": partition,
        "replicas": list(replicas),
        "role": role,
        "term": term,
        "leader": leader,
        "commit": commit,
        "applied": applied,
        "serving": True,
    }


def test_one_line_per_partition_with_the_leader_and_each_replicas_lag():
    sts = {
        1: {"data_groups": {"groups": [_row(7, 0, "leader", 4, 1, 100, 100)]}},
        2: {"data_groups": {"groups": [_row(7, 0, "follower", 4, 1, 95, 90)]}},
        3: {"error": "unavailable"},
    }
    lines = partition_group_lines(sts)
    assert lines[0].startswith("partition groups (1)")
    cols = lines[2].split()
    assert cols[:6] == ["orders", "0", "7", "1", "4", "100"]
    # the leader marked, the follower 10 behind the leader's commit, node 3 down
    assert cols[6:] == ["1*:0", "2:10", "3:down"]


def test_a_stale_leader_loses_to_the_higher_term_and_no_leader_says_none():
    sts = {
        1: {"data_groups": {"groups": [_row(3, 1, "leader", 2, 1, 50, 50)]}},
        2: {"data_groups": {"groups": [_row(3, 1, "leader", 5, 2, 60, 60)]}},
        3: {"data_groups": {"groups": [_row(4, 0, "candidate", 6, 0, 10, 10)]}},
    }
    lines = partition_group_lines(sts)
    by_group = {ln.split()[2]: ln.split() for ln in lines[2:]}
    assert by_group["3"][3:6] == ["2", "5", "60"]
    assert by_group["3"][6:] == ["1:10", "2*:0", "3:?"]
    assert by_group["4"][3] == "none"
    # sorted by topic and partition
    assert [ln.split()[1] for ln in lines[2:]] == ["0", "1"]


def test_no_partition_groups_no_table():
    assert partition_group_lines({1: {"role": "leader"}, 2: {"error": "x"}}) == []


def test_latency_line_shows_produce_fetch_and_disk_rounds_that_ran():
    st = {
        "kafka_requests": {
            "Produce": {"count": 12, "p50_ms": 1.6, "p99_ms": 6.4},
            "Metadata": {"count": 3, "p50_ms": 0.8, "p99_ms": 0.8},
        },
        "host": {"disk_round_ms": {"count": 40, "p50_ms": 0.8, "p99_ms": 3.2}},
    }
    line = latency_line(2, st)
    assert line == (
        "   2 latency since start: Produce p50 1.6 / p99 6.4 ms (12); "
        "disk rounds p50 0.8 / p99 3.2 ms (40)"
    )
    assert latency_line(1, {"kafka_requests": {}, "host": {"disk_round_ms": {"count": 0}}}) is None
