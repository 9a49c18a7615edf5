"""DescribeLogDirs: this node's one log directory (the data directory) with every
partition it holds (all of them: each node replicates every partition) and its
size: the stored record-batch bytes of the retained batches (an estimate: the Raft
framing, the command header and the index are not counted; DeleteRecords and
retention make it shrink). offset_lag is 0 on the leader, else the distance to
the leader's high watermark as far as this node knows it (0). v4 adds the
volume's total and usable bytes."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest

from sink.kafka.handlers.api import Api, Call, Response, answered
from sink.kafka.handlers.services import HandlerContext
from sink.kafka.protocol.build import encode_response
from sink.kafka.protocol.errors import ErrorCode


async def handle(ctx: HandlerContext, call: Call) -> asyncio.Future[Response]:
    lifecycle, fsm = ctx.lifecycle, ctx.partitions
    if lifecycle is None:
        return answered(
            error_response(call.version, call.corr, call.req, ErrorCode.unknown_server_error)
        )
    if call.req.topics is None:  # null: every partition
        wanted = [
            (name, list(range(info.partitions)))
            for name in sorted(fsm.topics())
            if (info := fsm.topic(name)) is not None
        ]
    else:
        wanted = [(t.topic, list(t.partitions)) for t in call.req.topics]
    topics = []
    for name, parts in wanted:
        rows = [
            {
                "partition_index": p,
                "partition_size": fsm.partition_size(name, p),
                "offset_lag": 0,
                "is_future_key": False,
            }
            for p in parts
            if fsm.has_partition(name, p)  # Kafka leaves out partitions it does not host
        ]
        if rows:
            topics.append({"name": name, "partitions": rows})
    total, usable = lifecycle.disk_usage()
    result = {
        "error_code": ErrorCode.none,
        "log_dir": lifecycle.log_dir or "data",
        "topics": topics,
        "total_bytes": total,
        "usable_bytes": usable,
    }
    return answered(_encode(call.version, call.corr, ErrorCode.none, [result]))


def _encode(version: int, corr: int, code: ErrorCode, results: list) -> bytes:
    body = {"throttle_time": 0, "error_code": code, "results": results}
    return encode_response(DescribeLogDirsRequest.__api_key__, version, corr, body)


def error_response(version: int, corr: int, req: Any, code: ErrorCode) -> bytes | None:
    # v1-2 have no top-level error code: one log dir carries it (none without a request).
    if req is None and version < 3:
        return None
    result = {
        "error_code": code,
        "log_dir": "",
        "topics": [],
        "total_bytes": -1,
        "usable_bytes": -1,
    }
    return _encode(version, corr, code, [result])


API = Api(
    DescribeLogDirsRequest,
    (1, 4),
    handle,
    error_response,
    summary=(
        "one log dir (the data directory), every partition with its retained batch bytes; "
        "v4 volume total/usable bytes"
    ),
)
