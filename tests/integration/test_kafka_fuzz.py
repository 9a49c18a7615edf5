"""The Kafka front end under fuzzing, against a real 3-node cluster of
`raftsink serve` processes (leader and followers).

RAFTSINK_FUZZ_SEED sets the seed (printed at the start), RAFTSINK_FUZZ_FRAMES
the number of mutants (20,000 by default). Mutants come from valid requests of
every (API, version) the nodes advertise (tests/helpers/kafka_mutate.py); after
each one the node must answer ApiVersions (tests/helpers/kafka_fuzz.py). At the
end: records produced before the fuzzing read back identical, no node logged a
traceback or internal error, every node process is alive. A node that dies is
restarted so the run goes on; afterwards the mutants that were in flight on it
are replayed one at a time to name the killer, printed in hex for
REGRESSION_FRAMES below.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import struct
import time
from collections.abc import Iterator

import pytest

from sink.kafka.protocol import request_schema
from tests.helpers.kafka_fuzz import HOLD_S, FuzzStats, NodeDown, Worker, run_fuzz
from tests.helpers.kafka_harness import (
    Conn,
    Harness,
    advertised,
    call,
    log_sizes,
    new_problems,
    running_cluster,
)
from tests.helpers.kafka_mutate import Mutant, build_corpus, mutate
from tests.helpers.kafka_values import Context, valid_request
from tests.helpers.partition_groups import metadata as partition_metadata
from tests.integration.kafka_regressions import REGRESSION_FRAMES, REGRESSION_SEEDS
from tests.unit.sink.batches import make_batch

SEED = int(os.environ.get("RAFTSINK_FUZZ_SEED", random.randrange(1 << 32)))
FRAMES = int(os.environ.get("RAFTSINK_FUZZ_FRAMES", "20000"))
KEEP = "fuzz-keep"


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Iterator[Harness]:
    with running_cluster(str(tmp_path_factory.mktemp("fuzz")), ("harness", KEEP)) as h:
        yield h


def restart(h: Harness, node: int) -> int:
    """Kill (if hung) and restart `node`; returns its Kafka port once it answers."""
    h.cluster.kill(node)
    h.cluster.start(node)
    deadline = time.monotonic() + 60
    while True:
        try:
            advertised(h.port(node))
            return h.port(node)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # polling a starting process's port, bounded above


def current_leader(h: Harness) -> int:
    h.leader = asyncio.run(h.cluster.wait_ready(60))
    h.followers = [i for i in h.cluster.nodes if i != h.leader]
    return h.leader


def keep_leader(h: Harness, timeout: float = 30.0) -> int:
    """KEEP partition 0's leader, as a client finds it: Metadata names it and it says so
    itself. With one Raft group that is the cluster's leader; with partition groups the
    partition's data group's, which may be another node."""
    deadline = time.monotonic() + timeout
    while True:
        named = partition_metadata(h.port(current_leader(h)), KEEP).get(0, (-1,))[0]
        if named > 0 and partition_metadata(h.port(named), KEEP).get(0, (-1,))[0] == named:
            return named
        if time.monotonic() > deadline:
            raise AssertionError(f"no leader of {KEEP} partition 0 within {timeout} s")
        time.sleep(0.05)  # polling Metadata for a condition, bounded above


NOT_LEADER_OR_FOLLOWER = 6


def produce_keep(h: Harness, timeout: float = 60.0) -> list[bytes]:
    """Three batches on KEEP through its partition's leader; the batches as sent. A batch
    answered NOT_LEADER_OR_FOLLOWER (nothing appended: with partition groups the balancer
    may hand the new partition to its preferred replica between Metadata and Produce)
    goes again to the leader Metadata names then, as a client's would."""
    batches = [make_batch([f"keep-{i}-{j}".encode() for j in range(i + 1)]) for i in range(3)]
    deadline = time.monotonic() + timeout
    for i, b in enumerate(batches):
        while True:
            leader = keep_leader(h)
            cls = request_schema(0, advertised(h.port(leader))[0][1])
            c = Conn(h.port(leader))
            try:
                req = valid_request(cls, Context(topic=KEEP, records=b))
                _hdr, resp = call(c, req, 10 + i)
            finally:
                c.close()
            part = resp.responses[0].partition_responses[0]
            if int(part.error_code) != NOT_LEADER_OR_FOLLOWER or time.monotonic() > deadline:
                break
            time.sleep(0.05)  # the new leader's election, bounded by the deadline
        assert int(part.error_code) == 0, part
    return batches


def split_batches(records: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos + 12 <= len(records):
        (length,) = struct.unpack_from(">i", records, pos + 8)
        out.append(records[pos : pos + 12 + length])
        pos += 12 + length
    return out


def read_keep(h: Harness) -> list[bytes]:
    """The batches of KEEP from offset 0, as its partition's leader serves them (Fetch)."""
    leader = keep_leader(h)
    hi = min(advertised(h.port(leader))[1][1], 12)  # v13+ names topics by id
    req = valid_request(request_schema(1, hi), Context(topic=KEEP))
    c = Conn(h.port(leader))
    try:
        _hdr, resp = call(c, req, 99)
    finally:
        c.close()
    part = resp.responses[0].partitions[0]
    assert int(part.error_code) == 0, part
    return split_batches(bytes(part.records or b""))


def same_batch(sent: bytes, served: bytes) -> bool:
    """Identical but for baseOffset (0-7) and partitionLeaderEpoch (12-15),
    which the node patches; both lie outside the CRC."""
    return len(sent) == len(served) and sent[8:12] == served[8:12] and sent[16:] == served[16:]


def summarize_logs(problems: dict[int, str]) -> list[str]:
    """One line per distinct crash site: the innermost frame and the exception."""
    sites = set()
    for node, text in problems.items():
        for tb in text.split("Traceback (most recent call last):")[1:]:
            frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', tb)
            tail = [ln for ln in tb.splitlines() if ln and not ln.startswith(" ")]
            where = ":".join(frames[-1]) if frames else "?"
            sites.add(f"node {node}: {where}: {tail[0][:200] if tail else '?'}")
        for ln in text.splitlines():
            if "memory allocation" in ln or "panicked" in ln or "Fatal Python" in ln:
                sites.add(f"node {node}: {ln[:200]}")
    return sorted(sites)


def triage(h: Harness, suspects: list[tuple[int, Mutant]]) -> list[Mutant]:
    """Replay each suspect alone on a fresh connection (then ApiVersions, as in
    the run); those after which the node stops answering are killers (the node
    is restarted after each)."""

    async def replay(node: int, m: Mutant) -> bool:
        w = Worker(0, node, h.port(node), FuzzStats())
        try:
            await w.run_one(m)
            return False
        except NodeDown:
            return True
        finally:
            w._drop()

    killers = []
    for node, m in suspects:
        if asyncio.run(replay(node, m)):
            killers.append(m)
            restart(h, node)
    return killers


def fuzz(h: Harness, seed: int, frames: int) -> list[str]:
    """One seeded run; returns the findings (empty when the nodes held up)."""
    print(f"RAFTSINK_FUZZ_SEED={seed} RAFTSINK_FUZZ_FRAMES={frames}")
    adv = advertised(h.port(h.leader))
    corpus = build_corpus(adv, h.ctx, seed)
    mutants = [mutate(corpus, adv, seed, i) for i in range(frames)]
    ports = {n: h.port(n) for n in h.nodes}
    before = log_sizes(h.cluster)
    t0 = time.monotonic()
    stats = asyncio.run(run_fuzz(ports, mutants, lambda n: restart(h, n)))
    took = time.monotonic() - t0
    print(
        f"{stats.sent} frames in {took:.1f} s ({stats.sent / took:.0f}/s) over "
        f"{len(corpus)} seed requests; per node {stats.per_node}; "
        f"closed by the server {stats.closed_by_server}, held {stats.held}, "
        f"answers {stats.answers}, deaths {len(stats.deaths)}"
    )
    for m in stats.held_mutants[:5]:  # a long-poll Fetch may hold; shown, not judged
        print(f"held its connection > {HOLD_S} s: {m.describe()}")
    findings = [f"bad answer: {b}" for b in stats.bad_answers]
    if stats.sent < frames and not stats.deaths:
        findings.append(f"only {stats.sent} of {frames} frames sent")
    suspects = [(d.node, m) for d in stats.deaths for m in d.suspects]
    for d in stats.deaths:
        findings.append(f"node {d.node} stopped answering ({d.detail}); in flight:")
        findings += [f"  {m.describe()}" for m in d.suspects]
    if suspects:
        for m in triage(h, suspects[:40]):
            findings.append(f"KILLER (replayed alone): {m.describe()}")
    findings += [f"log: {s}" for s in summarize_logs(new_problems(h.cluster, before))]
    exited = h.cluster.exited()
    if exited:
        findings.append(f"node processes exited: {exited}")
    return findings


def test_fuzz_every_advertised_version(harness: Harness) -> None:
    kept = produce_keep(harness)
    findings = fuzz(harness, SEED, FRAMES)
    served = read_keep(harness)
    if len(served) < len(kept) or not all(map(same_batch, kept, served)):
        findings.append(f"records produced before the fuzzing changed: {served[:3]!r}")
    assert not findings, f"seed {SEED}: {len(findings)} findings:\n" + "\n".join(findings)


@pytest.mark.parametrize("seed, frames", REGRESSION_SEEDS)
def test_regression_seed(harness: Harness, seed: int, frames: int) -> None:
    for n in list(harness.cluster.exited()):
        restart(harness, n)
    findings = fuzz(harness, seed, frames)
    assert not findings, f"seed {seed}: {len(findings)} findings:\n" + "\n".join(findings)


@pytest.mark.parametrize("name, wire", REGRESSION_FRAMES, ids=[n for n, _ in REGRESSION_FRAMES])
def test_regression_frame(harness: Harness, name: str, wire: bytes) -> None:
    """Each frame that once killed a node or drew a traceback: every node
    still answers ApiVersions afterwards and logs no traceback."""
    for n in list(harness.cluster.exited()):
        restart(harness, n)
    before = log_sizes(harness.cluster)
    m = Mutant(-1, name, -1, -1, wire, eof=False)
    killers = triage(harness, [(n, m) for n in harness.nodes])
    problems = summarize_logs(new_problems(harness.cluster, before))
    assert not killers and not problems, f"{name}: killed {len(killers)} node(s); logs {problems}"
