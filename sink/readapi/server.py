"""The read API's server side: partitions, offsets and record batches by offset.

Served by every node from its applied state (followers too). Partitions with
linearizable=true first runs a Raft ReadIndex so the high watermarks it
reports include every write acknowledged before the call (with partition groups, one
on the controller and one on each data group serving a listed partition here). Partitions names, per
partition, the leader, epoch and replicas (with their read-API addresses) of the
Raft group that owns it (the PartitionRoles lookup the Kafka front end asks too),
so a reader can fail over among that partition's replicas. Fetch returns whole
Kafka RecordBatches starting with the one holding `offset` (like Kafka Fetch)
and waits up to max_wait_ms for data when the reader is caught up.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import grpc

from raftlog.runtime import RaftError
from sink.readapi import read_api_pb2 as pb
from sink.readapi.client import ReadApiClient
from sink.readapi.wire import (
    ERR_INVALID_REQUEST,
    ERR_NOT_LEADER,
    ERR_OFFSET_OUT_OF_RANGE,
    ERR_UNKNOWN_TOPIC_OR_PARTITION,
    MAX_FETCH_BYTES,
    MAX_WAIT_MS,
    SERVICE,
    encode_fetch_reply,
)

log = logging.getLogger("sink.readapi")


class ReadApiService:
    """gRPC handlers over a RaftNode and its SinkStateMachine.

    wait_for_data(topic, partition, offset, timeout_s) -> awaitable: resolves
    when data at offset may be available (or the timeout passed); supplied by
    the sink service, which is notified on every apply.
    """

    def __init__(
        self,
        node: Any,
        fsm: Any,
        wait_for_data: Callable[[str, int, int, float], Any] | None = None,
        leader_read_api: Callable[[int], str | None] | None = None,
        extra_status: Callable[[], dict[str, Any]] | None = None,
        members: Any = None,
        client_credentials: Callable[[], grpc.ChannelCredentials | None] | None = None,
        roles: Any = None,
        pipeline_commits: Any = None,
        roles_version: Callable[[], int] | None = None,
    ) -> None:
        """roles: each partition's leadership (sink.kafka.handlers.services.PartitionRoles,
        SinkService); None: PartitionInfo carries no leader or replicas (0 / empty), as
        before the fields existed. leader_read_api(node id) -> that node's read-API
        address (also the replicas' addresses).
        extra_status: more keys for Status (the node's other parts, e.g. "kafka").
        client_credentials: this node's TLS credentials as a read-API client (a Commit
        forwarded to the leader; the current ones, so a reload counts); None: plaintext.
        pipeline_commits: with partition groups, where Commit goes (an object with `async
        commit(pipeline, [(topic, partition, offset)], forwarded) -> pb.CommitReply`,
        sink.node.pipeline_commits.PipelineCommits: each partition's data group); None:
        Commit proposes to `node`, the one group.
        roles_version() -> a fingerprint of every leader, epoch and replica set the
        Partitions rows carry (sink.node.routing.PartitionRouting.roles_version; equal
        fingerprints, equal rows), so a leaders-table poll whose `roles_since` is still
        current gets no rows; None: every answer is full."""
        self.roles_version = roles_version
        self.client_credentials = client_credentials
        self.node = node
        self.fsm = fsm
        self.wait_for_data = wait_for_data
        self.leader_read_api = leader_read_api
        self.extra_status = extra_status  # more Status fields (e.g. the disk guard)
        # members: an object with `async call(json_text, forwarded) -> pb.MembersReply`
        # (sink.members.rpc.MembersEndpoint, wired by sink.node), or None.
        self._members = members
        self.roles = roles
        self.pipeline_commits = pipeline_commits

    async def status(self, req: pb.StatusRequest, ctx: grpc.aio.ServicerContext) -> pb.StatusReply:
        st = self.node.status()
        st["partitions"] = {
            f"{t}/{p}": self.fsm.high_watermark(t, p)
            for t, info in sorted(self.fsm.topics().items())
            for p in range(info.partitions)
        }
        if self.extra_status is not None:
            st.update(self.extra_status())
        return pb.StatusReply(json=json.dumps(st))

    async def partitions(
        self, req: pb.PartitionsRequest, ctx: grpc.aio.ServicerContext
    ) -> pb.PartitionsReply:
        if req.linearizable:
            try:
                await self.node.read_index()
            except RaftError as exc:
                await ctx.abort(grpc.StatusCode.UNAVAILABLE, f"linearizable read failed: {exc}")
        # Taken before the rows are built: a change after it (the linearizable reads below
        # await) makes the next poll's answer full; it is never hidden.
        version = self.roles_version() if self.roles_version is not None else 0
        if version and req.roles_since == version and not req.linearizable:
            return pb.PartitionsReply(
                leader_id=self.node.leader_id,
                leader_epoch=self.node.term,
                roles_version=version,
                unchanged=True,
            )
        topics = self.fsm.topics()
        wanted = list(req.topics) or sorted(topics)
        # With partition groups the high watermarks are the data groups': each needs its
        # own read point (sink.node.routed_reads.RoutedReads.read_index_partitions).
        data_read_index = getattr(self.fsm, "read_index_partitions", None)
        if req.linearizable and data_read_index is not None:
            pairs = [(t, p) for t in wanted if t in topics for p in range(topics[t].partitions)]
            try:
                await data_read_index(pairs)
            except (RaftError, TimeoutError) as exc:
                await ctx.abort(
                    grpc.StatusCode.UNAVAILABLE,
                    f"linearizable read of a data group failed: {type(exc).__name__} {exc}",
                )
        out = []
        for t in wanted:
            info = topics.get(t)
            if info is None:
                continue
            for p in range(info.partitions):
                out.append(self._partition_info(t, p))
        return pb.PartitionsReply(
            partitions=out,
            leader_id=self.node.leader_id,
            leader_epoch=self.node.term,
            roles_version=version,
        )

    def _partition_info(self, topic: str, partition: int) -> pb.PartitionInfo:
        """One partition: offsets from the applied state; leader (0: none known, as
        PartitionsReply.leader_id), epoch and replicas from its group's role."""
        info = pb.PartitionInfo(
            topic=topic,
            partition=partition,
            log_start_offset=self.fsm.log_start_offset(topic, partition),
            high_watermark=self.fsm.high_watermark(topic, partition),
        )
        if self.roles is None:
            return info
        role = self.roles.role(topic, partition)
        info.leader_id = max(role.leader, 0)
        info.leader_epoch = role.leader_epoch
        for node in role.replicas:
            address = self.leader_read_api(node) if self.leader_read_api else None
            info.replicas.add(node_id=node, read_api=address or "")
        info.isr.extend(role.isr)
        return info

    async def fetch(
        self, req: pb.FetchRequest, ctx: grpc.aio.ServicerContext
    ) -> pb.FetchReply | bytes:
        """Errors as pb.FetchReply; batches already encoded (sink/readapi/wire.py)."""
        info = self.fsm.topics().get(req.topic)
        if info is None or not 0 <= req.partition < info.partitions:
            return pb.FetchReply(
                error_code=ERR_UNKNOWN_TOPIC_OR_PARTITION,
                error=f"unknown topic or partition {req.topic}/{req.partition}",
            )
        t, p = req.topic, req.partition
        max_bytes = min(max(req.max_bytes, 1), MAX_FETCH_BYTES)
        hw = self.fsm.high_watermark(t, p)
        if req.offset == hw and req.max_wait_ms > 0 and self.wait_for_data is not None:
            wait_s = min(req.max_wait_ms, MAX_WAIT_MS) / 1000
            await self.wait_for_data(t, p, req.offset, wait_s)
            hw = self.fsm.high_watermark(t, p)
        start = self.fsm.log_start_offset(t, p)
        if req.offset < start or req.offset > hw:
            return pb.FetchReply(
                high_watermark=hw,
                log_start_offset=start,
                error_code=ERR_OFFSET_OUT_OF_RANGE,
                error=f"offset {req.offset} is outside [{start}, {hw}]",
            )
        parts = self.fsm.read_parts(t, p, req.offset, max_bytes) if req.offset < hw else []
        return encode_fetch_reply(parts, hw, start)

    async def commit(self, req: pb.CommitRequest, ctx: grpc.aio.ServicerContext) -> pb.CommitReply:
        """Propose the pipeline's offsets on the leader; a follower forwards once. With
        partition groups, in each named partition's data group (on its leader, forwarded
        once), answered when every group has (sink/node/pipeline_commits.py)."""
        from sink.state.commands import encode_commit_offsets

        if not req.pipeline:
            return pb.CommitReply(error_code=ERR_INVALID_REQUEST, error="pipeline id is required")
        if self.pipeline_commits is not None:
            forwarded = bool(dict(ctx.invocation_metadata() or ()).get("raftsink-forwarded"))
            rows = [(o.topic, o.partition, o.offset) for o in req.offsets]
            reply: pb.CommitReply = await self.pipeline_commits.commit(
                req.pipeline, rows, forwarded
            )
            return reply
        if self.node.is_leader():
            data = encode_commit_offsets(
                req.pipeline, [(o.topic, o.partition, o.offset) for o in req.offsets]
            )
            try:
                res = await self.node.apply(data)
            except RaftError as exc:
                return pb.CommitReply(error_code=ERR_NOT_LEADER, error=str(exc))
            return pb.CommitReply(partitions=int(res.result or 0))
        leader = self.node.leader_id
        address = self.leader_read_api(leader) if (leader and self.leader_read_api) else None
        forwarded = dict(ctx.invocation_metadata() or ()).get("raftsink-forwarded")
        if address is None or forwarded:
            return pb.CommitReply(error_code=ERR_NOT_LEADER, error="no leader reachable")
        creds = self.client_credentials() if self.client_credentials else None
        client = ReadApiClient(address, credentials=creds)
        try:
            return await client.commit_request(req, forwarded=True)
        except grpc.aio.AioRpcError as exc:
            return pb.CommitReply(
                error_code=ERR_NOT_LEADER, error=f"leader unreachable: {exc.details()}"
            )
        finally:
            await client.close()

    async def members(
        self, req: pb.MembersRequest, ctx: grpc.aio.ServicerContext
    ) -> pb.MembersReply:
        """Membership: list and changes (sink/members/rpc.py)."""
        if self._members is None:
            return pb.MembersReply(code="invalid", error="membership calls are not served here")
        forwarded = dict(ctx.invocation_metadata() or ()).get("raftsink-forwarded")
        return await self._members.call(req.json, bool(forwarded))

    async def offsets_for_times(
        self, req: pb.OffsetsForTimesRequest, ctx: grpc.aio.ServicerContext
    ) -> pb.OffsetsForTimesReply:
        """The first record at or after each timestamp (sink/state/time_lookup.py)."""
        out = []
        for q in req.queries:
            if not self.fsm.has_partition(q.topic, q.partition):
                out.append(
                    pb.TimeOffset(
                        topic=q.topic,
                        partition=q.partition,
                        offset=-1,
                        timestamp=-1,
                        error_code=ERR_UNKNOWN_TOPIC_OR_PARTITION,
                    )
                )
                continue
            try:
                match = self.fsm.offset_for_timestamp(q.topic, q.partition, q.timestamp)
            except KeyError:
                # Partition groups: no replica of it here (sink.node.routed_reads). That
                # row only: the caller asks one of its replicas (connectors/spark/cluster.py).
                out.append(
                    pb.TimeOffset(
                        topic=q.topic,
                        partition=q.partition,
                        offset=-1,
                        timestamp=-1,
                        error_code=ERR_NOT_LEADER,
                    )
                )
                continue
            except Exception as exc:  # compacted under the lookup, a damaged batch
                await ctx.abort(grpc.StatusCode.UNAVAILABLE, f"timestamp lookup failed: {exc}")
            offset, ts = (-1, -1) if match is None else (match.offset, match.timestamp)
            out.append(
                pb.TimeOffset(topic=q.topic, partition=q.partition, offset=offset, timestamp=ts)
            )
        return pb.OffsetsForTimesReply(offsets=out)

    def handler(self) -> grpc.GenericRpcHandler:
        def unary(fn, req_cls, resp_cls):
            return grpc.unary_unary_rpc_method_handler(
                fn,
                request_deserializer=req_cls.FromString,
                response_serializer=resp_cls.SerializeToString,
            )

        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Status": unary(self.status, pb.StatusRequest, pb.StatusReply),
                "Partitions": unary(self.partitions, pb.PartitionsRequest, pb.PartitionsReply),
                "Fetch": grpc.unary_unary_rpc_method_handler(
                    self.fetch,
                    request_deserializer=pb.FetchRequest.FromString,
                    response_serializer=_serialize_fetch_reply,
                ),
                "Commit": unary(self.commit, pb.CommitRequest, pb.CommitReply),
                "Members": unary(self.members, pb.MembersRequest, pb.MembersReply),
                "OffsetsForTimes": unary(
                    self.offsets_for_times, pb.OffsetsForTimesRequest, pb.OffsetsForTimesReply
                ),
            },
        )


def _serialize_fetch_reply(reply: pb.FetchReply | bytes) -> bytes:
    return reply if isinstance(reply, bytes) else reply.SerializeToString()
