"""The read API's client: a thin leaf that needs grpc and the generated messages only.

Connectors (the Spark source on every executor) and tools import this module; it must not
import raftlog, storage or any server module (tests/unit/test_import_graph.py checks it,
tests/unit/connectors/test_spark_import.py checks sys.modules in a fresh interpreter).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import grpc

from sink.readapi import read_api_pb2 as pb
from sink.readapi.wire import MAX_FETCH_BYTES, SERVICE, FetchReplyView, decode_fetch_reply


def tls_credentials(
    ca_file: str = "", cert_file: str = "", key_file: str = ""
) -> grpc.ChannelCredentials:
    """Channel credentials from PEM files: trust ca_file (empty: the system roots) and,
    for mutual TLS, present cert_file + key_file (both or neither)."""
    if bool(cert_file) != bool(key_file):
        raise ValueError("a client certificate needs both its certificate and key file")

    def read(path: str) -> bytes | None:
        if not path:
            return None
        with open(path, "rb") as f:
            return f.read()

    return grpc.ssl_channel_credentials(
        root_certificates=read(ca_file),
        private_key=read(key_file),
        certificate_chain=read(cert_file),
    )


class ReadApiClient:
    """A small async client of the read API (used by `raftsink status` and connectors)."""

    def __init__(
        self,
        address: str,
        channel_options: Sequence[tuple[str, Any]] = (),
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        """channel_options: extra gRPC channel arguments (e.g. reconnect back-off).
        credentials: TLS (grpc.ssl_channel_credentials, see `tls_credentials`); None:
        plaintext."""
        self.address = address
        options = [
            ("grpc.max_receive_message_length", MAX_FETCH_BYTES + (1 << 20)),
            *channel_options,
        ]
        if credentials is None:
            self._channel = grpc.aio.insecure_channel(address, options=options)
        else:
            self._channel = grpc.aio.secure_channel(address, credentials, options=options)
        self._fetch = self._channel.unary_unary(
            f"/{SERVICE}/Fetch",
            request_serializer=pb.FetchRequest.SerializeToString,
            response_deserializer=decode_fetch_reply,
        )

    def _call(self, method: str, req_cls: Any, resp_cls: Any):
        return self._channel.unary_unary(
            f"/{SERVICE}/{method}",
            request_serializer=req_cls.SerializeToString,
            response_deserializer=resp_cls.FromString,
        )

    async def status(self, timeout: float = 5.0) -> dict:
        reply = await self._call("Status", pb.StatusRequest, pb.StatusReply)(
            pb.StatusRequest(), timeout=timeout
        )
        return json.loads(reply.json)

    async def partitions(
        self,
        topics: list[str] | None = None,
        linearizable: bool = False,
        timeout: float = 10.0,
        roles_since: int = 0,
    ) -> pb.PartitionsReply:
        """roles_since: the roles_version of this node's last full answer to the same
        topics; while still current the reply has no rows and `unchanged` set."""
        req = pb.PartitionsRequest(
            topics=topics or [], linearizable=linearizable, roles_since=roles_since
        )
        return await self._call("Partitions", pb.PartitionsRequest, pb.PartitionsReply)(
            req, timeout=timeout
        )

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = 4 * 1024 * 1024,
        max_wait_ms: int = 0,
        timeout: float = 40.0,
    ) -> FetchReplyView:
        """Batches come back as memoryviews into the received reply (no copies)."""
        return await self._fetch(  # type: ignore[no-any-return]
            pb.FetchRequest(
                topic=topic,
                partition=partition,
                offset=offset,
                max_bytes=max_bytes,
                max_wait_ms=max_wait_ms,
            ),
            timeout=timeout,
        )

    async def commit(
        self, pipeline: str, offsets: dict[tuple[str, int], int], timeout: float = 15.0
    ) -> pb.CommitReply:
        """Report a pipeline's consumed offsets ({(topic, partition): next offset})."""
        req = pb.CommitRequest(
            pipeline=pipeline,
            offsets=[
                pb.PartitionOffset(topic=t, partition=p, offset=o) for (t, p), o in offsets.items()
            ],
        )
        return await self.commit_request(req, timeout=timeout)

    async def commit_request(
        self, req: pb.CommitRequest, forwarded: bool = False, timeout: float = 15.0
    ) -> pb.CommitReply:
        metadata = (("raftsink-forwarded", "1"),) if forwarded else None
        return await self._call("Commit", pb.CommitRequest, pb.CommitReply)(
            req, timeout=timeout, metadata=metadata
        )

    async def members(
        self, request: dict[str, Any], forwarded: bool = False, timeout: float = 60.0
    ) -> pb.MembersReply:
        """A membership call (sink/members); the reply's json, code and error say how it went."""
        metadata = (("raftsink-forwarded", "1"),) if forwarded else None
        return await self._call("Members", pb.MembersRequest, pb.MembersReply)(
            pb.MembersRequest(json=json.dumps(request)), timeout=timeout, metadata=metadata
        )

    async def offsets_for_times(
        self, queries: dict[tuple[str, int], int], timeout: float = 10.0
    ) -> pb.OffsetsForTimesReply:
        """{(topic, partition): timestamp ms} -> the first record at or after each."""
        req = pb.OffsetsForTimesRequest(
            queries=[
                pb.TimeQuery(topic=t, partition=p, timestamp=ts) for (t, p), ts in queries.items()
            ]
        )
        return await self._call(
            "OffsetsForTimes", pb.OffsetsForTimesRequest, pb.OffsetsForTimesReply
        )(req, timeout=timeout)

    async def close(self) -> None:
        await self._channel.close()
