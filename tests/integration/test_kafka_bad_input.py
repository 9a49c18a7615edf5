"""Bad input over real sockets: each case gets a clear outcome and the node
keeps serving (a produce afterwards succeeds and earlier data is intact)."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import uuid

import pytest

from sink.kafka import KafkaLimits
from sink.process_cluster import SinkProcessCluster
from tests.helpers.kafka_wire import encode_request, read_response
from tests.helpers.sink_cluster import SinkCluster
from tests.unit.sink.batches import make_batch
from tests.unit.sink.killer_frames import KILLER_FRAMES

LIMITS = KafkaLimits(max_frame_bytes=1 << 20, idle_timeout_s=0.5, max_connections=1000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = SinkCluster(
        str(tmp_path_factory.mktemp("bad")), n=1, auto_create_topics=False, limits=LIMITS
    )
    c.start()
    lead = c.leader_id()
    res = c.call(c.nodes[lead].service.create_topic("known", 1))
    assert res.error == 0
    yield c
    c.stop()


def connect(cluster) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", cluster.ports[1]), timeout=5)
    return s


def assert_closed(s: socket.socket, timeout: float = 5.0) -> None:
    s.settimeout(timeout)
    try:
        data = s.recv(1 << 16)
    except ConnectionResetError:
        return
    assert data == b"", f"expected the server to close, got {data[:40]!r}"


def produce(s: socket.socket, topic: str, records: bytes, corr: int = 1, version: int = 9):
    s.sendall(
        encode_request(
            0,
            version,
            corr,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": 5000,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": 0, "records": records}]}
                ],
            },
        )
    )
    hdr, resp = read_response(s, 0, version)
    assert hdr.correlation_id == corr
    return resp.responses[0].partition_responses[0]


def healthy(cluster) -> None:
    """The node still serves: a fresh connection can produce."""
    with connect(cluster) as s:
        r = produce(s, "known", make_batch([b"ok"]), corr=77)
        assert r.error_code == 0 and r.base_offset >= 0


def test_frame_larger_than_max_closed_before_body(cluster):
    with connect(cluster) as s:
        s.sendall(struct.pack(">i", 1 << 30))  # 1 GiB announced, nothing else sent
        assert_closed(s)
    healthy(cluster)


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">i", 100) + b"\x00\x03\x00\x0c" + b"\x00" * 6,  # truncated body, then EOF
        b"\x00\x00",  # truncated size
        struct.pack(">i", 4) + b"\x00\x00\x00\x00",  # too short for a header
        struct.pack(">i", 24) + bytes(range(24)),  # garbage (api 1 v515...)
        struct.pack(">i", 16)
        + struct.pack(">hhi", 3, 12, 5)
        + b"\xff" * 6,  # Metadata v12, garbage body
        struct.pack(">i", -5),  # negative size
    ],
)
def test_truncated_or_garbage_frames(cluster, payload):
    with connect(cluster) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        assert_closed(s)
    healthy(cluster)


@pytest.mark.parametrize("api_key, version", [(23, 3), (71, 0), (999, 0), (0, 2), (1, 99), (3, 99)])
def test_unknown_api_or_version_closes(cluster, api_key, version):
    with connect(cluster) as s:
        body = struct.pack(">hhih", api_key, version, 1, 1) + b"x"
        s.sendall(struct.pack(">i", len(body)) + body)
        assert_closed(s)
    healthy(cluster)


def test_api_versions_unsupported_version_falls_back_to_v0(cluster):
    with connect(cluster) as s:
        body = struct.pack(">hhih", 18, 9, 3, 1) + b"x"
        s.sendall(struct.pack(">i", len(body)) + body)
        hdr, resp = read_response(s, 18, 0)
        assert hdr.correlation_id == 3 and resp.error_code == 35
        assert {k.api_key for k in resp.api_keys} >= {0, 1, 3, 18, 22}
        # the connection stays usable
        s.sendall(
            encode_request(18, 3, 4, {"client_software_name": "t", "client_software_version": "1"})
        )
        hdr, resp = read_response(s, 18, 3)
        assert hdr.correlation_id == 4 and resp.error_code == 0


def test_unknown_tagged_fields_are_skipped(cluster):
    """KIP-482: a Metadata v12 request whose header carries tagged field 99 and whose
    body carries tagged field 1000 (kio refuses both) is answered; the connection stays."""
    head = struct.pack(">hhih", 3, 12, 8, 1) + b"x" + b"\x01" + b"\x63\x01\x00"
    # topics=null, allow_auto, include_topic_ops, one unknown tag (1000, 2 bytes)
    body = b"\x00" + b"\x01" + b"\x00" + b"\x01\xe8\x07\x02ab"
    with connect(cluster) as s:
        s.sendall(struct.pack(">i", len(head + body)) + head + body)
        hdr, resp = read_response(s, 3, 12)
        assert hdr.correlation_id == 8 and "known" in {t.name for t in resp.topics}
        assert produce(s, "known", make_batch([b"after tags"]), corr=9).error_code == 0
    healthy(cluster)


def test_crc_mismatch_is_corrupt_message(cluster):
    bad = bytearray(make_batch([b"a", b"b"]))
    bad[-1] ^= 0xFF
    with connect(cluster) as s:
        assert produce(s, "known", bytes(bad)).error_code == 2
        assert produce(s, "known", make_batch([b"fine"]), corr=2).error_code == 0


@pytest.mark.parametrize(
    "mutate, code",
    [
        (lambda b: b[:16] + b"\x05" + b[17:], 2),  # magic 5
        (lambda b: b[:8] + struct.pack(">i", 10) + b[12:], 2),  # batchLength
        (lambda b: b[:40], 2),  # truncated
    ],
)
def test_malformed_batch(cluster, mutate, code):
    with connect(cluster) as s:
        assert produce(s, "known", mutate(make_batch([b"a", b"b"]))).error_code == code


def test_bad_record_count_is_invalid_record(cluster):
    from crc32c import crc32c

    b = bytearray(make_batch([b"a", b"b"]))
    struct.pack_into(">i", b, 57, 7)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    with connect(cluster) as s:
        assert produce(s, "known", bytes(b)).error_code == 87


def test_unknown_topic_with_auto_create_off(cluster):
    with connect(cluster) as s:
        assert produce(s, "nope", make_batch([b"a"])).error_code == 3
        s.sendall(
            encode_request(
                3,
                12,
                9,
                {
                    "topics": [{"name": "nope", "topic_id": None}],
                    "allow_auto_topic_creation": True,
                    "include_topic_authorized_operations": False,
                },
            )
        )
        _, resp = read_response(s, 3, 12)
        assert [(t.name, t.error_code) for t in resp.topics] == [("nope", 3)]
    assert cluster.run(lambda: "nope" not in cluster.nodes[1].fsm.topics())


def test_idle_client_is_disconnected(cluster):
    with connect(cluster) as s:
        t0 = time.monotonic()
        assert_closed(s, timeout=10)
        assert time.monotonic() - t0 >= LIMITS.idle_timeout_s * 0.9


def test_thousands_of_idle_connections_and_connection_cap(tmp_path):
    """2000 idle connections against a cap of 1900: the extra ones are closed at
    accept, the node keeps serving, and closing them all frees everything."""
    cap = 1900
    # All from one address, faster than the default creation rate: only the total cap here.
    lim = KafkaLimits(
        max_connections=cap,
        idle_timeout_s=60,
        max_connections_per_ip=10_000,
        max_connection_creation_rate=100_000.0,
    )
    c = SinkCluster(str(tmp_path), n=1, limits=lim)
    c.start()
    socks = []
    try:
        c.leader_id()
        for _ in range(cap + 100):
            # A refused connection is reset (SO_LINGER 0) right after accept; on a loaded
            # machine that RST can reach the client before its connect() returned. The
            # server's counters below decide what was accepted and what refused.
            with contextlib.suppress(ConnectionResetError):
                socks.append(socket.create_connection(("127.0.0.1", c.ports[1]), timeout=5))
        server = c.nodes[1].server
        c.wait_for(lambda: server.rejected_connections >= 100, what="rejections")
        assert c.run(lambda: len(server.connections)) == cap
        for s in socks:
            s.close()
        socks = []
        c.wait_for(lambda: len(server.connections) == 0, what="connections released")
        healthy(c)
    finally:
        for s in socks:
            s.close()
        c.stop()


def test_data_intact_after_bad_input(cluster):
    def read_all():
        fsm = cluster.nodes[1].fsm
        return fsm.read("known", 0, 0, 1 << 30)

    batches = cluster.run(read_all)
    offsets = [b for b, _ in batches]
    assert offsets == list(range(len(offsets)))  # every accepted single-record batch, dense


def test_retry_while_original_uncommitted_waits_for_it(cluster):
    """Two identical idempotent batches pipelined on one connection: the second
    arrives while the first is uncommitted, shares its result (same base offset),
    and is appended once. A later retry is answered from the producer table."""
    svc = cluster.nodes[1].service
    before_hw = cluster.run(lambda: cluster.nodes[1].fsm.high_watermark("known", 0))
    before_inflight = cluster.run(lambda: svc.inflight_duplicates)
    batch = make_batch([b"r1", b"r2", b"r3"], producer_id=424242, epoch=0, base_sequence=0)

    def req(corr):
        return encode_request(
            0,
            9,
            corr,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": 5000,
                "topic_data": [
                    {"name": "known", "partition_data": [{"index": 0, "records": batch}]}
                ],
            },
        )

    with connect(cluster) as s:
        s.sendall(req(1) + req(2))
        r1 = read_response(s, 0, 9)[1].responses[0].partition_responses[0]
        r2 = read_response(s, 0, 9)[1].responses[0].partition_responses[0]
        assert (r1.error_code, r2.error_code) == (0, 0)
        assert r1.base_offset == r2.base_offset == before_hw
        r3 = produce(s, "known", batch, corr=3)
        assert (r3.error_code, r3.base_offset) == (0, before_hw)
    assert cluster.run(lambda: cluster.nodes[1].fsm.high_watermark("known", 0)) == before_hw + 3
    assert cluster.run(lambda: svc.inflight_duplicates) == before_inflight + 1


def test_backpressure_stops_reading_when_pending_full(tmp_path):
    """With max_inflight_requests=2 the server stops reading after two
    unanswered requests; everything is still answered, in order."""
    c = SinkCluster(str(tmp_path), n=1, limits=KafkaLimits(max_inflight_requests=2))
    c.start()
    try:
        c.leader_id()
        with connect(c) as s:
            n = 30
            s.sendall(
                b"".join(
                    encode_request(
                        0,
                        9,
                        100 + i,
                        {
                            "transactional_id": None,
                            "acks": -1,
                            "timeout": 5000,
                            "topic_data": [
                                {
                                    "name": "bp",
                                    "partition_data": [
                                        {"index": 0, "records": make_batch([b"x%d" % i])}
                                    ],
                                }
                            ],
                        },
                    )
                    for i in range(n)
                )
            )
            got = []
            for _ in range(n):
                hdr, resp = read_response(s, 0, 9)
                got.append(
                    (hdr.correlation_id, resp.responses[0].partition_responses[0].base_offset)
                )
        assert got == [(100 + i, i) for i in range(n)]
    finally:
        c.stop()


# ------------------------------------------------------------------ issue 19's killer frames


@pytest.fixture(scope="module")
def node_process(tmp_path_factory):
    """One REAL node process (kio's abort took the whole process down)."""
    with SinkProcessCluster(str(tmp_path_factory.mktemp("killer")), n=1, log_level="INFO") as c:
        yield c


def api_versions_ok(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(
            encode_request(18, 3, 5, {"client_software_name": "t", "client_software_version": "1"})
        )
        hdr, resp = read_response(s, 18, 3)
        assert hdr.correlation_id == 5 and resp.error_code == 0


@pytest.mark.parametrize("name", sorted(KILLER_FRAMES))
def test_impossible_lengths_close_the_connection_not_the_node(node_process, name):
    """Produce v9 / Fetch v12 / FindCoordinator v4 / Metadata v12 whose array length is
    the varint ff ff ff ff 0f: kio would allocate 34 GB and abort the process. The node
    closes that connection with a clear log line and answers ApiVersions on a new one."""
    port = int(node_process.peers[1].kafka.rsplit(":", 1)[1])
    frame = KILLER_FRAMES[name](corr=3)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert_closed(s)
    api_versions_ok(port)
    assert not node_process.exited()
    with open(node_process.nodes[1].log_path) as f:
        log = f.read()
    assert "elements, " in log and "kafka.close" in log


# ------------------------------------------------------------------ errors never cost the connection


def _api_versions_v3(s: socket.socket, corr: int) -> None:
    s.sendall(
        encode_request(
            18, 3, corr, {"client_software_name": "inject-test", "client_software_version": "9.9"}
        )
    )
    assert read_response(s, 18, 3)[1].error_code == 0


def _metadata(s: socket.socket, corr: int):
    topics = [{"name": "known", "topic_id": uuid.UUID(int=0)}]
    s.sendall(encode_request(3, 12, corr, {"topics": topics} | META_FLAGS))
    hdr, resp = read_response(s, 3, 12)
    assert hdr.correlation_id == corr
    return resp


META_FLAGS = {
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}


def inject(monkeypatch, api_key: int, handle) -> None:
    """Serve api_key with handle (the connection's dispatch looks the registry up per
    request)."""
    import dataclasses

    from sink.kafka import conn_dispatch
    from sink.kafka.handlers import REGISTRY

    patched = dict(REGISTRY)
    patched[api_key] = dataclasses.replace(REGISTRY[api_key], handle=handle)
    monkeypatch.setattr(conn_dispatch, "REGISTRY", patched)


def test_a_handler_that_raises_answers_unknown_server_error(cluster, monkeypatch, caplog):
    """Injected failure: the client gets UNKNOWN_SERVER_ERROR in the request's shape,
    and its next request on the same connection succeeds."""

    async def boom(ctx, call):
        raise RuntimeError("injected")

    server = cluster.nodes[1].server
    before = server.handler_errors
    with connect(cluster) as s:
        _api_versions_v3(s, 1)
        inject(monkeypatch, 3, boom)
        resp = _metadata(s, 2)
        assert [(t.name, int(t.error_code)) for t in resp.topics] == [("known", -1)]
        monkeypatch.undo()
        resp = _metadata(s, 3)
        assert [(t.name, int(t.error_code)) for t in resp.topics] == [("known", 0)]
    assert server.handler_errors == before + 1
    lines = [r.getMessage() for r in caplog.records if "kafka.handler_error" in r.getMessage()]
    assert lines and "inject-test/9.9" in lines[-1] and "metadata(3)" in lines[-1]


def test_a_handler_whose_future_fails_answers_unknown_server_error(cluster, monkeypatch):
    """The same for a failure after dispatch (the handler's task raises): Produce."""
    from sink.kafka.handlers import later

    async def late_boom(ctx, call):
        async def fail():
            raise ValueError("injected late")

        return later(fail())

    with connect(cluster) as s:
        inject(monkeypatch, 0, late_boom)
        assert produce(s, "known", make_batch([b"x"]), corr=4).error_code == -1
        monkeypatch.undo()
        assert produce(s, "known", make_batch([b"y"]), corr=5).error_code == 0


def test_null_where_the_schema_forbids_it(cluster):
    """Fetch v12 with topics=null: INVALID_REQUEST (a top-level error exists) and the
    connection goes on; Produce v9 with topic_data=null: no answer can say it, closed."""
    fetch = struct.pack(">hhih", 1, 12, 6, 1) + b"k" + b"\x00"
    fetch += struct.pack(">iiiibii", -1, 100, 1, 1 << 20, 0, 0, -1) + b"\x00\x01\x01\x00"
    with connect(cluster) as s:
        s.sendall(struct.pack(">i", len(fetch)) + fetch)
        hdr, resp = read_response(s, 1, 12)
        assert hdr.correlation_id == 6 and int(resp.error_code) == 42
        assert produce(s, "known", make_batch([b"z"]), corr=7).error_code == 0
    prod = struct.pack(">hhih", 0, 9, 8, 1) + b"k" + b"\x00" + b"\x00"
    prod += struct.pack(">hi", -1, 5000) + b"\x00\x00"
    with connect(cluster) as s:
        s.sendall(struct.pack(">i", len(prod)) + prod)
        assert_closed(s)
    healthy(cluster)


def test_unsupported_version_closes_with_one_log_line_naming_the_client(cluster, caplog):
    with connect(cluster) as s:
        _api_versions_v3(s, 1)
        body = struct.pack(">hhih", 1, 99, 2, 1) + b"x"
        s.sendall(struct.pack(">i", len(body)) + body)
        assert_closed(s)
    lines = [r.getMessage() for r in caplog.records if "unsupported version 99" in r.getMessage()]
    assert len(lines) == 1 and "fetch(1)" in lines[0] and "inject-test/9.9" in lines[0]


def test_create_topics_v7_error_paths(tmp_path):
    """v7 requires topic_id in every result: a create through a follower (relayed to
    the controller) answers the new topic's id; TOPIC_ALREADY_EXISTS and
    INVALID_TOPIC_EXCEPTION, from the leader or relayed, are answered too."""
    c = SinkCluster(str(tmp_path), n=3)
    c.start()
    try:
        lead = c.leader_id()
        follower = next(i for i in c.ids if i != lead)

        def create(node: int, name: str, corr: int) -> tuple[int, object]:
            with socket.create_connection(("127.0.0.1", c.ports[node]), timeout=5) as s:
                values = {
                    "topics": [
                        {
                            "name": name,
                            "num_partitions": 1,
                            "replication_factor": -1,
                            "assignments": [],
                            "configs": [],
                        }
                    ],
                    "timeout": 5000,
                    "validate_only": False,
                }
                s.sendall(encode_request(19, 7, corr, values))
                hdr, resp = read_response(s, 19, 7)
                assert hdr.correlation_id == corr
                return int(resp.topics[0].error_code), resp.topics[0].topic_id

        err, tid = create(follower, "v7", 1)
        assert err == 0 and tid.int != 0
        assert create(lead, "v7", 2)[0] == 36  # TOPIC_ALREADY_EXISTS
        assert create(follower, "v7", 3)[0] == 36
        assert create(lead, "bad/name", 4)[0] == 17  # INVALID_TOPIC_EXCEPTION
        assert create(follower, "bad/name", 5)[0] == 17
    finally:
        c.stop()


def test_a_sequence_gap_is_retriable_until_the_grace_ends(cluster):
    """An idempotent batch whose sequence skips ahead is not written and is answered
    NOT_LEADER_OR_FOLLOWER (retriable: clients resend the batch in front first; Kafka's
    OUT_OF_ORDER would make librdkafka bump its epoch and renumber, duplicating records
    of other partitions: sink/lifecycle/sequence_gaps.py). Once the batch in front
    arrives, the same batch is accepted; a gap that outlasts the grace is OUT_OF_ORDER."""
    node = cluster.nodes[1]
    svc = node.service

    def hw() -> int:
        return cluster.run(lambda: node.fsm.high_watermark("known", 0))

    def batch(seq: int, n: int) -> bytes:
        values = [b"gap-%d" % (seq + i) for i in range(n)]
        return make_batch(values, producer_id=535353, epoch=0, base_sequence=seq)

    with connect(cluster) as s:
        start = hw()
        assert produce(s, "known", batch(0, 2), corr=1).error_code == 0
        early = produce(s, "known", batch(5, 1), corr=2)
        assert early.error_code == 6, early  # NOT_LEADER_OR_FOLLOWER
        assert hw() == start + 2
        assert produce(s, "known", batch(2, 3), corr=3).error_code == 0
        late = produce(s, "known", batch(5, 1), corr=4)
        assert (late.error_code, late.base_offset) == (0, start + 5)
        grace = svc.sequence_gaps.grace_s
        cluster.run(lambda: setattr(svc.sequence_gaps, "grace_s", 0.0))
        try:
            lasting = produce(s, "known", batch(9, 1), corr=5)
        finally:
            cluster.run(lambda: setattr(svc.sequence_gaps, "grace_s", grace))
        assert lasting.error_code == 45, lasting  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert hw() == start + 6
    assert cluster.run(lambda: svc.sequence_gaps.refused) >= 1
