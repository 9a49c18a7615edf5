"""Version windows against clients that do not negotiate per API (issue 19).

Real clients, run as their own processes, against a real 3-node cluster of `raftsink serve`
processes (SinkProcessCluster) whose Kafka traffic passes through a recording proxy
(tests/helpers/recorded_cluster.py), so each test knows exactly which (API, version) the
client sent and what the server answered:
- Sarama 1.22.1 (Debian, built offline) at its default Config.Version (V0_8_2_0) and at the
  newest it knows (MaxVersion, V2_2_0_0): its request versions follow Config.Version only;
- KafkaJS 2.2.4 (npm): min(its newest, the broker's max) per API, broker minimums ignored;
- kcat 1.7.1 with librdkafka 2.0.2 (Debian): the old windows of a negotiating client.
kcat cannot create topics (it has no admin mode; it relies on auto-creation through
Metadata), so it has no create test.

Every test checks two things:
1. the window contract on every request the client sent: a version the server advertises in
   ApiVersions gets a response that decodes strictly with that version's schema; a version
   (or API) it does not advertise gets what Kafka gives it: the connection is closed;
2. the operation's result: records read back identical (keys, values, order per partition,
   offsets dense from 0), topics created with their partitions, metadata naming every broker.
Records are seeded and read back with confluent-kafka (librdkafka 2.16) where the client under
test is only the writer or only the reader.

The window table (which versions each client sent, and what came back) is written to
`windows.md` in the cluster's directory, and to $RAFTSINK_WINDOWS_REPORT when that is set.
"""

from __future__ import annotations

import io
import json
import os
import socket
import struct
import subprocess
import time
from collections import defaultdict

import pytest
from kio.serial import entity_writer

from sink.kafka.protocol import build, request_schema
from tests.helpers import client_tools
from tests.helpers.kafka_recorder import API_NAMES, NO_RESPONSE, Exchange
from tests.helpers.partition_groups import metadata as partition_metadata
from tests.helpers.recorded_cluster import RecordedSinkCluster, served_versions

ck = pytest.importorskip("confluent_kafka")

N = 60  # records per produce: 3 partitions, keyed
PARTITIONS = 3
SARAMA_VERSIONS = ["default", "newest"]

# client label -> api name -> version -> set of outcomes; filled by every test, written at the end
WINDOWS: dict[str, dict[str, dict[int, set[str]]]] = defaultdict(
    lambda: defaultdict(lambda: defaultdict(set))
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = RecordedSinkCluster(str(tmp_path_factory.mktemp("windows")), default_partitions=PARTITIONS)
    try:
        c.start_all()
        yield c
    finally:
        c.stop_all()
        _write_windows(os.path.join(c.base_dir, "windows.md"))


@pytest.fixture(scope="module")
def served(cluster) -> dict[int, tuple[int, int]]:
    """What the server advertises: asked over the wire, not imported (the front end may move)."""
    return served_versions(next(iter(cluster.hidden_kafka.values())))


@pytest.fixture(scope="module")
def seeded(cluster) -> tuple[str, list[tuple[str, str]]]:
    """A 3-partition topic holding N keyed records, written by confluent-kafka."""
    topic = "seeded"
    recs = [(f"k{i}", f"{topic}-v{i}") for i in range(N)]
    p = ck.Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "client.id": "seeder", "linger.ms": 5}
    )
    errors: list = []
    for k, v in recs:
        p.produce(topic, key=k, value=v, on_delivery=lambda e, m: e and errors.append(e))
    assert p.flush(30) == 0 and not errors, errors
    del p  # librdkafka's handle goes now, not when a traceback holding this frame goes
    return topic, recs


@pytest.fixture(scope="module")
def sarama() -> str:
    return client_tools.sarama_binary()


@pytest.fixture(scope="module")
def kafkajs() -> tuple[str, str]:
    return client_tools.kafkajs_script()


@pytest.fixture(scope="module")
def kcat() -> str:
    return client_tools.kcat_path()


# ------------------------------------------------------------------ running clients


class Run:
    """One client process: its JSON result (Sarama, KafkaJS) or raw output (kcat), and the
    exchanges the proxy recorded under its client id."""

    def __init__(self, label: str, proc: subprocess.CompletedProcess, exchanges: list[Exchange]):
        self.label = label
        self.proc = proc
        self.exchanges = exchanges
        self.result: dict = {}
        if proc.stdout.startswith("{"):
            self.result = json.loads(proc.stdout.splitlines()[0])

    @property
    def ok(self) -> bool:
        return bool(self.result.get("ok"))

    def why(self) -> str:
        counts: dict[str, int] = {}  # in first-seen order: a client's retry loop is one line
        for e in self.exchanges:
            counts[e.describe()] = counts.get(e.describe(), 0) + 1
        sent = "\n  ".join(t + (f" (x{c})" if c > 1 else "") for t, c in counts.items())
        sent = sent or "(nothing)"
        err = self.result.get("error") or self.proc.stderr[-1500:]
        log = "\n  ".join(self.result.get("log", [])[-5:])
        return f"{self.label}: {err}\n log:\n  {log}\n requests:\n  {sent}"


def _wait_settled(cluster, client_id: str, timeout: float = 5.0) -> list[Exchange]:
    """The client's exchanges once none is pending (the proxy sees a close a moment later)."""
    deadline = time.monotonic() + timeout
    while True:
        ex = cluster.recorder.exchanges(client_id)
        if all(e.outcome != "pending" for e in ex) or time.monotonic() > deadline:
            return ex
        time.sleep(0.02)


def run_client(cluster, label: str, client_id: str, argv: list[str], env=None, timeout=60) -> Run:
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    run = Run(label, proc, _wait_settled(cluster, client_id))
    for e in run.exchanges:
        WINDOWS[label.split(" ")[0]][e.api][e.api_version].add(_short(e))
    return run


def _short(e: Exchange) -> str:
    if e.outcome == "response":
        return "ok" if not e.decode else "undecodable"
    return "closed" if e.outcome == NO_RESPONSE else e.outcome.removeprefix("no response: ")


def run_sarama(
    cluster,
    binary: str,
    version: str,
    op: str,
    topic: str,
    n: int = N,
    codec: str = "none",
    timeout: str = "25s",
) -> Run:
    cid = f"sarama-{version}-{op}-{topic}"
    argv = [binary, "-brokers", cluster.bootstrap_servers, "-version", version, "-op", op]
    argv += ["-topic", topic, "-n", str(n), "-client-id", cid, "-timeout", timeout]
    argv += ["-compression", codec]
    label = f"sarama-{version}" if version in SARAMA_VERSIONS else "sarama-sweep"
    return run_client(cluster, f"{label} {op}", cid, argv)


def run_kafkajs(
    cluster, js: tuple[str, str], op: str, topic: str, n: int = N, gzip: bool = False
) -> Run:
    cid = f"kafkajs-{op}-{topic}"
    env = {"KAFKAJS_CLIENT_ID": cid, "KAFKAJS_DEADLINE_MS": "20000"}
    if gzip:
        env["KAFKAJS_GZIP"] = "1"
    env["KAFKAJS_NO_PARTITIONER_WARNING"] = "1"
    argv = [js[0], js[1], cluster.bootstrap_servers, op, topic, str(n)]
    return run_client(cluster, f"kafkajs {op}", cid, argv, env=env)


def run_kcat(cluster, kcat: str, op: str, args: list[str], stdin: str | None = None) -> Run:
    cid = f"kcat-{op}-{len(cluster.recorder.exchanges())}"
    argv = [kcat, "-b", cluster.bootstrap_servers, "-X", f"client.id={cid}", *args]
    proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
    run = Run(f"kcat {op}", proc, _wait_settled(cluster, cid))
    for e in run.exchanges:
        WINDOWS["kcat"][e.api][e.api_version].add(_short(e))
    return run


# ------------------------------------------------------------------ checks


def check_window_contract(run: Run, served: dict[int, tuple[int, int]]) -> None:
    """Advertised (API, version): a strictly decodable response. Anything else: closed."""
    bad = []
    for e in run.exchanges:
        lo, hi = served.get(e.api_key, (1, 0))
        if lo <= e.api_version <= hi:
            if e.outcome not in ("response", "no response: client closed the connection"):
                bad.append(f"advertised but not answered: {e.describe()}")
            elif e.decode:
                bad.append(f"advertised but the response does not decode: {e.describe()}")
        elif e.outcome == "response":
            bad.append(f"not advertised, yet answered (Kafka closes): {e.describe()}")
    assert not bad, "\n".join(bad) + "\n" + run.why()


def unsupported_sent(run: Run, served: dict[int, tuple[int, int]]) -> list[str]:
    out = []
    for e in run.exchanges:
        lo, hi = served.get(e.api_key, (1, 0))
        if not lo <= e.api_version <= hi:
            out.append(f"{e.api} v{e.api_version}")
    return sorted(set(out))


def assert_sent(run: Run, *sent: str) -> None:
    """The client really used these old versions ("API vN"; Kafka 3.7 serves them, KIP-896
    removed them in 4.0), so the test's success proves they are served."""
    used = {f"{e.api} v{e.api_version}" for e in run.exchanges}
    missing = [s for s in sent if s not in used]
    assert not missing, f"not sent: {missing}\n" + run.why()


def assert_refused_by_client(run: Run, api: str, message: str) -> None:
    """The client itself declined the operation at its configured version: it failed with
    its own message and never sent the request (no broker could make it succeed)."""
    assert not run.ok and message in run.result.get("error", ""), run.why()
    assert all(e.api != api for e in run.exchanges), run.why()


def read_back(cluster, topic: str, timeout: float = 30.0) -> list[tuple[int, int, str, str]]:
    """Every record of every partition (partition, offset, key, value), with confluent-kafka."""
    c = ck.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"reader-{topic}",
            "client.id": f"reader-{topic}",
            "enable.auto.commit": False,
        }
    )
    deadline = time.monotonic() + timeout
    try:
        md = c.list_topics(topic, timeout=10)
        parts = sorted(md.topics[topic].partitions)
        high = {p: _high_watermark(c, topic, p, deadline) for p in parts}
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in parts if high[p]])
        out: list[tuple[int, int, str, str]] = []
        while len(out) < sum(high.values()) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.partition(), m.offset(), m.key().decode(), m.value().decode()))
    finally:
        c.close()
    return sorted(out)


def _high_watermark(c, topic: str, partition: int, deadline: float) -> int:
    """The partition's high watermark. A leader change under load (NOT_LEADER_OR_FOLLOWER
    from the old leader, a refused connection) is retried as a client would, until the
    deadline; librdkafka refreshes its metadata meanwhile."""
    while True:
        try:
            return c.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=10)[1]
        except ck.KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # back-off before asking again (not a synchronisation)


def check_records(got: list[tuple[int, int, str, str]], sent: list[tuple[str, str]]) -> None:
    """Identical records: the same (key, value) pairs, each once; per partition the offsets
    are dense from 0 and the records are in the order they were sent."""
    assert sorted((k, v) for _, _, k, v in got) == sorted(sent), "records differ"
    order = {kv: i for i, kv in enumerate(sent)}
    by_part: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    for p, o, k, v in got:
        by_part[p].append((o, k, v))
    for p, recs in by_part.items():
        recs.sort()
        assert [o for o, _, _ in recs] == list(range(len(recs))), f"partition {p}: offsets"
        idx = [order[(k, v)] for _, k, v in recs]
        assert idx == sorted(idx), f"partition {p}: order differs from the send order"


def decoded(records: list[dict]) -> list[tuple[int, int, str, str]]:
    """Sarama prints bytes as base64 (Go's []byte JSON form)."""
    import base64

    return sorted(
        (
            r["partition"],
            r["offset"],
            base64.b64decode(r.get("key") or "").decode(),
            base64.b64decode(r.get("value") or "").decode(),
        )
        for r in records
    )


def check_metadata(cluster, brokers: dict[str, str], topics: dict, topic: str) -> None:
    assert brokers == {str(i): p.kafka for i, p in cluster.peers.items()}
    assert sorted(p["id"] for p in topics[topic]) == list(range(PARTITIONS))
    # Each partition's leader as the client read it is a broker that leads that partition
    # by its own account (its Metadata, asked directly). With one Raft group that is the
    # same node for every partition; with partition groups each partition's group has its
    # own leader, so the client must read them per partition, as Kafka's clients do.
    leaders = {p["id"]: p["leader"] for p in topics[topic]}
    assert set(leaders.values()) <= {int(i) for i in brokers}, leaders
    for partition, leader in leaders.items():
        own = partition_metadata(cluster.hidden_kafka[leader], topic)
        assert own[partition][0] == leader, (partition, leader, own)


def _expected(topic: str, n: int = N) -> list[tuple[str, str]]:
    return [(f"k{i}", f"{topic}-v{i}") for i in range(n)]


# ------------------------------------------------------------------ Sarama


@pytest.mark.parametrize("version", SARAMA_VERSIONS)
def test_sarama_metadata(cluster, served, seeded, sarama, version):
    topic, _ = seeded
    run = run_sarama(cluster, sarama, version, "metadata", topic)
    check_window_contract(run, served)
    assert run.ok, run.why()
    check_metadata(cluster, run.result["brokers"], run.result["topics"], topic)


@pytest.mark.parametrize("version", SARAMA_VERSIONS)
def test_sarama_create_topic(cluster, served, sarama, version):
    topic = f"sarama-{version}-created"
    run = run_sarama(cluster, sarama, version, "create", topic)
    check_window_contract(run, served)
    if version == "default":
        # Sarama's ClusterAdmin needs Config.Version >= V0_10_0_0 (admin.go, client.Controller):
        # at V0_8_2_0 it refuses before sending CreateTopics, whatever the broker serves.
        assert_refused_by_client(run, "CreateTopics", "The version of API is not supported")
        return
    assert run.ok, run.why()
    assert sorted(p["id"] for p in run.result["topics"][topic]) == list(range(PARTITIONS))
    assert all(sorted(p["replicas"]) == [1, 2, 3] for p in run.result["topics"][topic])


@pytest.mark.parametrize("op", ["produce", "idempotent"])
@pytest.mark.parametrize("version", SARAMA_VERSIONS)
def test_sarama_produce(cluster, served, sarama, version, op):
    topic = f"sarama-{version}-{op}"
    run = run_sarama(cluster, sarama, version, op, topic)
    check_window_contract(run, served)
    if version == "default" and op == "idempotent":
        # Sarama's config check: "Idempotent producer requires Version >= V0_11_0_0".
        assert_refused_by_client(run, "InitProducerId", "Idempotent producer requires Version")
        return
    if version == "default":  # Sarama 1.22 at V0_8_2_0 produces with Produce v0 (magic 0)
        assert_sent(run, "Produce v0")
    assert run.ok, run.why()
    sent = _expected(topic)
    reported = decoded(run.result["records"])
    check_records(reported, sent)  # the offsets Sarama was told
    assert read_back(cluster, topic) == reported  # what is stored


@pytest.mark.parametrize("version", SARAMA_VERSIONS)
def test_sarama_consume(cluster, served, seeded, sarama, version):
    topic, recs = seeded
    run = run_sarama(cluster, sarama, version, "consume", topic)
    check_window_contract(run, served)
    if version == "default":  # V0_8_2_0: ListOffsets v0, Fetch v0 (magic 0 message sets)
        assert_sent(run, "ListOffsets v0", "Fetch v0")
    assert run.ok, run.why()
    check_records(decoded(run.result["records"]), recs)


@pytest.mark.parametrize(
    "op", ["commit", "commit-retention"], ids=["default-retention", "with-retention"]
)
def test_sarama_offset_commit(cluster, served, seeded, sarama, op):
    """Sarama's offset manager (no group join): FindCoordinator v0, OffsetFetch v1, then
    OffsetCommit v1 with the default Consumer.Offsets.Retention (0) at every Config.Version,
    v2 with a retention time. A committed offset must read back from a fresh manager."""
    topic, _ = seeded
    # a healthy commit takes well under a second; Sarama retries a refused one for ever
    run = run_sarama(cluster, sarama, "newest", op, topic, n=7, timeout="10s")
    check_window_contract(run, served)
    if op == "commit":  # OffsetCommit v1, whatever the Config.Version
        assert_sent(run, "OffsetCommit v1")
    assert run.ok, run.why()
    assert run.result["committed"] == 7


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_sarama_compressed_produce(cluster, served, sarama, codec):
    """Compressed batches at Sarama's newest version (Produce v3), read back by librdkafka."""
    topic = f"sarama-{codec}"
    run = run_sarama(cluster, sarama, "newest", "produce", topic, codec=codec)
    check_window_contract(run, served)
    assert run.ok, run.why()
    check_records(decoded(run.result["records"]), _expected(topic))
    check_records(read_back(cluster, topic), _expected(topic))


@pytest.mark.parametrize(
    "version, codec",
    [("default", "gzip"), ("default", "snappy")]
    + [("V0_10_0_0", c) for c in ("gzip", "snappy", "lz4")],
)
def test_sarama_old_compressed_produce(cluster, served, sarama, version, codec):
    """Compressed wrapper messages in message sets: magic 0 in Produce v0 (Sarama's default
    version; its lz4 needs V0_10_0_0) and magic 1 with relative inner offsets in Produce v2
    (V0_10_0_0), converted at ingest, read back by librdkafka (Fetch v4+) and by Sarama
    itself at the same version (Fetch v0 / v2, down-converted)."""
    topic = f"sarama-{version}-{codec}"
    produce, fetch = (
        ("Produce v0", "Fetch v0") if version == "default" else ("Produce v2", "Fetch v2")
    )
    run = run_sarama(cluster, sarama, version, "produce", topic, codec=codec)
    check_window_contract(run, served)
    assert_sent(run, produce)
    assert run.ok, run.why()
    check_records(decoded(run.result["records"]), _expected(topic))
    check_records(read_back(cluster, topic), _expected(topic))
    back = run_sarama(cluster, sarama, version, "consume", topic)
    check_window_contract(back, served)
    assert_sent(back, fetch)
    assert back.ok, back.why()
    check_records(decoded(back.result["records"]), _expected(topic))


def test_sarama_zstd_produce_v3_is_refused(cluster, sarama):
    """zstd needs Produce v7 (KIP-110): Kafka answers a zstd batch in Produce v3-v6 with
    UNSUPPORTED_COMPRESSION_TYPE (KafkaApis.handleProduceRequest). Sarama 1.22 sends zstd in
    Produce v3 at every Config.Version."""
    run = run_sarama(cluster, sarama, "newest", "produce", "sarama-zstd", codec="zstd")
    produce = [e for e in run.exchanges if e.api == "Produce"]
    assert produce and all(e.api_version < 7 for e in produce), run.why()
    assert all("unsupported_compression_type" in e.errors for e in produce), (
        "a zstd batch in Produce v3 was accepted (Kafka: UNSUPPORTED_COMPRESSION_TYPE)\n"
        + run.why()
    )
    assert not run.ok, run.why()


def test_zstd_fetch_below_v10_is_refused(cluster, sarama):
    """A Fetch below v10 cannot carry zstd data (KIP-110): Kafka answers the partition with
    UNSUPPORTED_COMPRESSION_TYPE rather than hand an old client batches it cannot read. The
    topic is written with zstd by librdkafka (Produce v10); Sarama reads with Fetch v4."""
    topic = "zstd-seeded"
    p = ck.Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "client.id": "zstd-seeder",
            "compression.type": "zstd",
            "linger.ms": 5,
        }
    )
    for k, v in _expected(topic, 10):
        p.produce(topic, key=k, value=v, partition=0)
    assert p.flush(30) == 0
    del p
    run = run_sarama(cluster, sarama, "newest", "consume", topic)
    fetch = [e for e in run.exchanges if e.api == "Fetch"]
    assert fetch and all(e.api_version < 10 for e in fetch), run.why()
    assert any("unsupported_compression_type" in e.errors for e in fetch), (
        "zstd batches were served in a Fetch below v10 (Kafka: UNSUPPORTED_COMPRESSION_TYPE)\n"
        + run.why()
    )


# Sarama's request versions change only at these Config.Version values (one per Kafka minor
# release it knows; its patch releases send the same versions).
SARAMA_SWEEP = [
    "V0_8_2_0",
    "V0_9_0_0",
    "V0_10_0_0",
    "V0_10_1_0",
    "V0_10_2_0",
    "V0_11_0_0",
    "V1_0_0_0",
    "V1_1_0_0",
    "V2_0_0_0",
    "V2_1_0_0",
    "V2_2_0_0",
]
SWEEP: dict[str, dict[str, str]] = {}  # Config.Version -> op -> "ok" or why not
SWEEP_OPS = ["produce", "idempotent", "consume", "create"]
# Sarama's own refusals below a Config.Version (no request sent; no broker can change them):
# ClusterAdmin needs V0_10_0_0 (client.Controller), idempotence V0_11_0_0 (Config.Validate).
SARAMA_REFUSES = {
    "create": "The version of API is not supported",
    "idempotent": "Idempotent producer requires Version >= V0_11_0_0",
}


def test_sarama_version_sweep(cluster, served, seeded, sarama):
    """Produce, idempotent produce, consume and create at every Sarama Config.Version: an
    operation whose requests are all advertised must succeed; the others must fail only by the
    server closing (as Kafka does) a request at a version it does not advertise, or by Sarama
    refusing the operation itself at that version. The rows go to the window table."""
    topic, recs = seeded
    bad = []
    for version in SARAMA_SWEEP:
        for op in SWEEP_OPS:
            t = topic if op == "consume" else f"sweep-{version}-{op}"
            run = run_sarama(cluster, sarama, version, op, t)
            check_window_contract(run, served)
            outside = unsupported_sent(run, served)
            refusal = SARAMA_REFUSES.get(op, "\0")
            if run.ok:
                if op == "create":
                    assert sorted(p["id"] for p in run.result["topics"][t]) == [0, 1, 2]
                else:
                    got = decoded(run.result["records"])
                    check_records(got, _expected(t) if op != "consume" else recs)
                SWEEP.setdefault(version, {})[op] = "ok"
            elif outside:
                SWEEP.setdefault(version, {})[op] = "closed: " + ", ".join(outside)
            elif refusal in run.result.get("error", ""):
                SWEEP.setdefault(version, {})[op] = "Sarama refuses"
            else:
                SWEEP.setdefault(version, {})[op] = "failed: " + run.result.get("error", "?")
                bad.append(run.why())
    assert not bad, "\n".join(bad)
    # Every version Sarama 1.22 sends is served (Kafka 3.7's windows, old versions included):
    # an operation fails only where Sarama itself refuses it (create below V0_10_0_0,
    # idempotence below V0_11_0_0). CreateTopics is v1 at V0_10-V0_11 (not served: v2+).
    for v in SARAMA_SWEEP:
        for op in ("produce", "consume"):
            assert SWEEP[v][op] == "ok", (v, op, SWEEP[v])
    works = {op: "ok" for op in SWEEP_OPS}
    assert all(SWEEP[v] == works for v in SARAMA_SWEEP[6:]), SWEEP


def test_unsupported_version_logged_with_client(cluster):
    """A refused version leaves one log line on the node that names the API, the version and
    the client (issue 19: "one clear log line naming the client software"). Every version
    Sarama sends is served now, so the probe is a raw Metadata v13 (Kafka 4.x; raftsink
    serves 0-12) whose request header names the client, as Sarama's do (no ApiVersions)."""
    client_id = "window-probe-unsupported"
    cls = request_schema(3, 13)
    hdr = cls.__header_schema__
    buf = io.BytesIO()
    header = {
        "request_api_key": 3,
        "request_api_version": 13,
        "correlation_id": 1,
        "client_id": client_id,
    }
    entity_writer(hdr)(buf, build(hdr, header))
    body = {
        "topics": None,
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    entity_writer(cls)(buf, build(cls, body))
    frame = buf.getvalue()
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert s.recv(4) == b"", "an unsupported version was answered (Kafka closes)"
    deadline = time.monotonic() + 10
    while True:
        logs = cluster.node_logs()
        lines = [ln for ln in logs.splitlines() if client_id in ln]
        if lines or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # polling the log files for the line, with a deadline
    assert lines, (
        f"no node log line names the client {client_id!r} whose Metadata v13 was refused; "
        "the lines about it:\n"
        + "\n".join(ln for ln in logs.splitlines() if "unsupported" in ln)[-1500:]
    )


# ------------------------------------------------------------------ KafkaJS


def test_kafkajs_metadata(cluster, served, seeded, kafkajs):
    topic, _ = seeded
    run = run_kafkajs(cluster, kafkajs, "metadata", topic)
    check_window_contract(run, served)
    assert run.ok, run.why()
    check_metadata(cluster, run.result["brokers"], run.result["topics"], topic)


def test_kafkajs_create_topic(cluster, served, kafkajs):
    topic = "kafkajs-created"
    run = run_kafkajs(cluster, kafkajs, "create", topic)
    check_window_contract(run, served)
    assert run.ok, run.why()
    check_metadata(cluster, run.result["brokers"], run.result["topics"], topic)
    assert all(sorted(p["replicas"]) == [1, 2, 3] for p in run.result["topics"][topic])


@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("op", ["produce", "idempotent"])
def test_kafkajs_produce(cluster, served, kafkajs, op, gzip):
    topic = f"kafkajs-{op}-{'gzip' if gzip else 'plain'}"
    run = run_kafkajs(cluster, kafkajs, op, topic, gzip=gzip)
    check_window_contract(run, served)
    assert run.ok, run.why()
    assert all(p["error"] == 0 and p["baseOffset"] == 0 for p in run.result["partitions"])
    got = read_back(cluster, topic)
    check_records(got, _expected(topic))
    # one send: one batch per partition, each from offset 0
    assert {p["partition"] for p in run.result["partitions"]} == {p for p, *_ in got}


def test_kafkajs_fetch(cluster, served, seeded, kafkajs):
    """ListOffsets and Fetch at KafkaJS's versions, without a consumer group."""
    topic, recs = seeded
    run = run_kafkajs(cluster, kafkajs, "fetch", topic)
    check_window_contract(run, served)
    assert run.ok, run.why()
    got = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in run.result["records"])
    check_records(got, recs)


def test_kafkajs_consume(cluster, served, seeded, kafkajs):
    """The public KafkaJS consumer is always a group member: FindCoordinator, JoinGroup,
    SyncGroup and Heartbeat at KafkaJS's fixed versions (issue 13 serves them), then
    Fetch; it reads every seeded record exactly once."""
    topic, recs = seeded
    run = run_kafkajs(cluster, kafkajs, "consume", topic)
    check_window_contract(run, served)
    assert run.ok, run.why()
    assert any(e.api_key == 11 for e in run.exchanges), run.why()  # it joined a group
    got = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in run.result["records"])
    check_records(got, recs)


# ------------------------------------------------------------------ kcat (librdkafka 2.0.2)


def test_kcat_metadata(cluster, served, seeded, kcat):
    topic, _ = seeded
    run = run_kcat(cluster, kcat, "metadata", ["-L", "-J", "-t", topic])
    check_window_contract(run, served)
    assert run.proc.returncode == 0, run.why()
    md = json.loads(run.proc.stdout)
    brokers = {str(b["id"]): b["name"] for b in md["brokers"]}
    assert brokers == {str(i): p.kafka for i, p in cluster.peers.items()}
    (t,) = md["topics"]
    assert t["topic"] == topic and "error" not in t
    assert sorted(p["partition"] for p in t["partitions"]) == list(range(PARTITIONS))
    # and the plain -L listing
    run = run_kcat(cluster, kcat, "metadata", ["-L"])
    check_window_contract(run, served)
    assert run.proc.returncode == 0 and "3 brokers:" in run.proc.stdout, run.why()


@pytest.mark.parametrize("idempotent", [False, True], ids=["produce", "idempotent"])
def test_kcat_produce(cluster, served, kcat, idempotent):
    topic = f"kcat-{'idempotent' if idempotent else 'produce'}"
    sent = _expected(topic)
    args = ["-P", "-t", topic, "-K", ":", "-X", "acks=all"]
    if idempotent:
        args += ["-X", "enable.idempotence=true"]
    stdin = "".join(f"{k}:{v}\n" for k, v in sent)
    run = run_kcat(cluster, kcat, "produce", args, stdin=stdin)
    check_window_contract(run, served)
    assert run.proc.returncode == 0, run.why()
    if idempotent:
        assert any(e.api == "InitProducerId" for e in run.exchanges), run.why()
    check_records(read_back(cluster, topic), sent)


def test_kcat_consume(cluster, served, seeded, kcat):
    topic, recs = seeded
    run = run_kcat(
        cluster,
        kcat,
        "consume",
        ["-C", "-t", topic, "-o", "beginning", "-e", "-f", "%p %o %k %s\\n"],
    )
    check_window_contract(run, served)
    assert run.proc.returncode == 0, run.why()
    got = sorted(
        (int(p), int(o), k, v)
        for p, o, k, v in (ln.split(" ") for ln in run.proc.stdout.split("\n") if ln)
    )
    check_records(got, recs)


# ------------------------------------------------------------------ librdkafka, no ApiVersions

# broker.version.fallback -> the Produce and Fetch version librdkafka then speaks (magic 0
# message sets, no timestamps, lz4 with KAFKA-3160's wrong header checksum). librdkafka 2.x
# accepts only 0.9.0 and 0.8.x here (0.10+ means "ask ApiVersions"); magic 1 (Produce v2,
# Fetch v2) is covered by Sarama at V0_10_0_0 and the sweep.
FALLBACKS = {"0.8.2": 0, "0.9.0": 1}


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("fallback", sorted(FALLBACKS))
def test_librdkafka_without_api_versions_round_trips(cluster, served, fallback, codec):
    """confluent-kafka (librdkafka 2.16) with api.version.request=false: an old client that
    never asks ApiVersions and speaks the versions of broker.version.fallback. Records with
    keys and null values, compressed as asked, produced with magic-0 message sets (Produce
    v0/v1), read back with message sets (Fetch v0/v1) and by a modern client."""
    version = FALLBACKS[fallback]
    topic = f"rdk-{fallback.replace('.', '_')}-{codec}"
    cid = f"rdk-old-{fallback}-{codec}"
    old = {
        "bootstrap.servers": cluster.bootstrap_servers,
        "client.id": cid,
        "api.version.request": False,
        "broker.version.fallback": fallback,
    }
    t0 = int(time.time() * 1000)  # recent: older than retention.ms would be expired
    sent = [(f"k{i}", None if i % 5 == 0 else f"{topic}-v{i}", t0 + i) for i in range(N)]
    p = ck.Producer({**old, "compression.codec": codec, "linger.ms": 20, "acks": "all"})
    errors: list = []
    for i, (k, v, ts) in enumerate(sent):
        p.produce(
            topic,
            key=k,
            value=v,
            partition=i % PARTITIONS,
            timestamp=ts,
            on_delivery=lambda e, m: e and errors.append(e),
        )
    assert p.flush(30) == 0 and not errors, errors
    del p
    c = ck.Consumer({**old, "group.id": cid, "enable.auto.commit": False})
    got: list[tuple] = []
    deadline = time.monotonic() + 30
    try:
        c.assign([ck.TopicPartition(topic, i, ck.OFFSET_BEGINNING) for i in range(PARTITIONS)])
        while len(got) < N and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            value = None if m.value() is None else m.value().decode()
            got.append((m.partition(), m.offset(), m.key().decode(), value, m.timestamp()))
    finally:
        c.close()
    exchanges = _wait_settled(cluster, cid)
    for e in exchanges:
        WINDOWS[f"librdkafka-{fallback}"][e.api][e.api_version].add(_short(e))
    versions = {(e.api, e.api_version) for e in exchanges}
    assert ("Produce", version) in versions and ("Fetch", version) in versions, versions
    assert all(e.api != "ApiVersions" for e in exchanges)
    bad = [
        e.describe()
        for e in exchanges
        if e.outcome not in ("response", "no response: client closed the connection") or e.decode
    ]
    assert not bad, bad  # close() ends a pending long poll: the client's own close
    by_key = {k: (v, ts) for k, v, ts in sent}
    assert sorted(k for _p, _o, k, _v, _t in got) == sorted(by_key), "records differ"
    for part in range(PARTITIONS):
        mine = sorted(r for r in got if r[0] == part)
        assert [r[1] for r in mine] == list(range(len(mine))), f"partition {part}: offsets"
        assert [int(r[2][1:]) for r in mine] == sorted(int(r[2][1:]) for r in mine)
    for _p, _o, k, v, (ts_type, _ts) in got:
        assert v == by_key[k][0], k
        assert ts_type == ck.TIMESTAMP_NOT_AVAILABLE, k  # magic 0 carries none
    # the modern path (RecordBatch v2, Fetch v4+) reads the converted batches too
    modern = read_back_with_nulls(cluster, topic)
    assert sorted((p, o, k) for p, o, k, _v in modern) == sorted((p, o, k) for p, o, k, *_ in got)
    assert all(v == by_key[k][0] for _p, _o, k, v in modern)


def read_back_with_nulls(cluster, topic: str) -> list[tuple[int, int, str, str | None]]:
    c = ck.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"modern-{topic}",
            "enable.auto.commit": False,
        }
    )
    out: list[tuple[int, int, str, str | None]] = []
    deadline = time.monotonic() + 30
    try:
        c.assign([ck.TopicPartition(topic, i, ck.OFFSET_BEGINNING) for i in range(PARTITIONS)])
        while len(out) < N and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            v = None if m.value() is None else m.value().decode()
            out.append((m.partition(), m.offset(), m.key().decode(), v))
    finally:
        c.close()
    return out


# ------------------------------------------------------------------ the window table


def _write_windows(path: str) -> None:
    """clients x APIs: the versions each client sent and what came back (ok / closed /
    undecodable), one line per client and API."""
    if not WINDOWS:
        return
    lines = ["| client | API | versions sent (outcome) |", "|---|---|---|"]
    for client in sorted(WINDOWS):
        for api in sorted(WINDOWS[client], key=lambda a: _key_of(a)):
            vers = WINDOWS[client][api]
            cells = ", ".join(f"v{v} ({'/'.join(sorted(vers[v]))})" for v in sorted(vers))
            lines.append(f"| {client} | {api} | {cells} |")
    if SWEEP:
        ops = SWEEP_OPS
        lines += ["", "| Sarama Config.Version | " + " | ".join(ops) + " |"]
        lines += ["|---" * (len(ops) + 1) + "|"]
        for v in SARAMA_SWEEP:
            if v in SWEEP:
                lines.append(f"| {v} | " + " | ".join(SWEEP[v].get(o, "-") for o in ops) + " |")
    text = "\n".join(lines) + "\n"
    for target in filter(None, [path, os.environ.get("RAFTSINK_WINDOWS_REPORT")]):
        with open(target, "w") as f:
            f.write(text)


def _key_of(api: str) -> int:
    return next((k for k, n in API_NAMES.items() if n == api), 999)
