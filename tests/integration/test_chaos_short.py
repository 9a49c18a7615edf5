"""A short fault campaign (chaos) in CI: 3 real node processes behind the
fault-injecting proxy, idempotent producers, Kafka and read API consumers,
kill -9 / SIGSTOP / network partitions / fsync stalls / wiped and corrupted
storage, membership changes (remove and re-add, replace) from a fixed seed. The
checkers must report 0 anomalies, and the nemesis must really have injected
faults of every kind.

The cluster is the secure one (`raftsink chaos --secure`, issue 15): TLS on every
listener (Raft mutual TLS through the proxy, the read API with client certificates),
SASL_SSL SCRAM-SHA-512 clients, authorization on with ACLs for the workload's user.
This is CI's only campaign (not an extra one): every other test covers the plain path.

RAFTSINK_CHAOS_SEED overrides the seed; RAFTSINK_CHAOS_SECONDS the duration.
The report (summary.txt, report.json, plot.png, history) stays in tmp_path.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("confluent_kafka")
pytest.importorskip("aiokafka")

from chaos import run_campaign
from chaos.nemesis import ONE_GROUP_KINDS

SEED = int(os.environ.get("RAFTSINK_CHAOS_SEED", "20240607"))
SECONDS = float(os.environ.get("RAFTSINK_CHAOS_SECONDS", "150"))
MIN_FAULTS_PER_KIND = 2
SCHEDULE_GRACE_S = 120.0
"""Faults that wait for a node's re-admission (wipe, corrupt: twice, replace) take 10-30 s
on a loaded machine: the schedule ran late, and on session 9's machine (load 20 on 2 cores)
the plain and the secure campaigns both ended before their second `kill` (one kill only,
0 anomalies). The workload runs on until the schedule is done (at most this long), so the
kinds injected depend on the seed, not on the load."""


# CI's campaign: every kind, `membership` included (issue 12). It had been left out because
# `replace` left the replaced node unable to finish its final read (a node rebuilt by
# InstallSnapshot lacked the log below the leader's newest snapshot: fixed in session 7).
# Seed 20240607 with all seven kinds, 150 s: VALID three times (two in session 7, one on
# session 8's code with CI running beside it: 45,007 records, every kind injected 2-3 times).
# On the secure cluster (session 9, load average ~20 on the shared 2-core machine): without
# the grace, VALID but one kill only (13 of 18 faults; the plain campaign on the same code
# and load: 9 of 18, kill x1); with it, VALID twice: 59,965 and 58,880 records, all 18
# faults (every kind 2-3 times), the nemesis 49.8 / 46.2 s past the 150 s, 301 s / 300 s.
CAMPAIGNS = [pytest.param(ONE_GROUP_KINDS, SECONDS, id="all")]


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.timeout(540)
@pytest.mark.parametrize("kinds, seconds", CAMPAIGNS)
def test_short_chaos_campaign_finds_no_anomaly(tmp_path, kinds, seconds):
    print(f"seed={SEED} seconds={seconds} kinds={','.join(kinds)} secure out={tmp_path}")
    data = run_campaign(
        SEED,
        str(tmp_path),
        seconds=seconds,
        nemeses=kinds,
        keep_data=False,
        secure=True,
        schedule_grace_s=SCHEDULE_GRACE_S,
        fault_min_s=3.0,
        fault_max_s=6.0,
        gap_min_s=2.0,
        gap_max_s=4.0,
    )
    print((tmp_path / "summary.txt").read_text())
    for kind in kinds:
        assert data["fault_counts"].get(kind, 0) >= MIN_FAULTS_PER_KIND, (
            f"nemesis ran {data['fault_counts']}, wanted >= {MIN_FAULTS_PER_KIND} of {kind}"
        )
    assert data["anomaly_count"] == 0, (
        f"seed={SEED}: anomalies {data['anomaly_counts']}: {data['anomalies']}"
    )
    assert not data["crashes"], f"seed={SEED}: node crashes {data['crashes']}"
    assert data["verdict"] == "VALID", f"seed={SEED}: {data['liveness']} {data['notes']}"
    st = data["stats"]
    assert st["sends_ok"] > 2000, st
    assert st["acked_unverified"] == 0, st
    assert all(data["final_reads"].values()) and len(data["final_reads"]) == 4
    for source in ("kafka", "read_api", "read_api_lin"):
        assert st["hw_samples"].get(source, 0) > 20, st["hw_samples"]
    assert os.path.getsize(tmp_path / "plot.png") > 10_000
    assert data["options"]["secure"] is True


GROUPS_SECONDS = float(os.environ.get("RAFTSINK_CHAOS_GROUPS_SECONDS", "40"))
GROUPS_KINDS = ("kill", "pause", "partition", "disk", "move")
"""CI's partition-groups campaign (issue 16): short, so that it costs about a minute of CI
(the workload plus ~20 s of start, drain and final reads), on the plain 3-node cluster with
a Raft group per partition. 38 s fit the whole deck of 4 kinds for any seed (5 s warm-up,
4 faults of at most 5 s, 3 gaps of at most 3 s, 3 s cool-down). wipe and corrupt need their re-admission waits (10-40 s each
under load) and stay in the manual runs of docs/chaos.md; membership is refused with
groups."""


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.timeout(300)
def test_short_chaos_campaign_on_partition_groups(tmp_path):
    print(f"seed={SEED} seconds={GROUPS_SECONDS} partition groups out={tmp_path}")
    data = run_campaign(
        SEED,
        str(tmp_path),
        seconds=GROUPS_SECONDS,
        nemeses=GROUPS_KINDS,
        keep_data=False,
        partition_groups=True,
        schedule_grace_s=30.0,
        fault_min_s=3.0,
        fault_max_s=5.0,
        gap_min_s=2.0,
        gap_max_s=3.0,
    )
    print((tmp_path / "summary.txt").read_text())
    for kind in GROUPS_KINDS:
        assert data["fault_counts"].get(kind, 0) >= 1, data["fault_counts"]
    # "the leader" is the node leading the most data groups; every fault records them
    assert all(f.get("groups_led") for f in data["faults"]), data["faults"]
    for f in data["faults"]:
        if f["target"] == "leader" and f["leader"]:
            led = f["groups_led"]
            assert led[str(f["node"])] == max(led.values()), f
    assert data["anomaly_count"] == 0, (
        f"seed={SEED}: anomalies {data['anomaly_counts']}: {data['anomalies']}"
    )
    assert not data["crashes"], f"seed={SEED}: node crashes {data['crashes']}"
    assert data["verdict"] == "VALID", f"seed={SEED}: {data['liveness']} {data['notes']}"
    st = data["stats"]
    assert st["sends_ok"] > 1000 and st["acked_unverified"] == 0, st
    assert all(data["final_reads"].values()) and len(data["final_reads"]) == 4
    assert data["options"]["partition_groups"] is True
