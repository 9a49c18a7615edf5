"""read() of one OffsetRange: fetch from any replica that has applied it, decode, check.

Replicas are tried in the range's planned order (planning.assign_replicas: followers first,
then the leader), then the source's other nodes; the one that served last is asked first.

Invariant: the records returned for [start, end) are exactly the records the log holds in that
range (the same on every replica, since only committed, applied data is served), so a re-run
of the same range after a crash returns the same rows. When that is impossible the reader
raises; it never returns a short range silently. The one exception is data loss with
failOnDataLoss=false: removed offsets are then skipped with a warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pyarrow as pa

from connectors.spark.cluster import ReadCluster, _describe
from connectors.spark.decode import RangeDecoder
from connectors.spark.errors import (
    ClusterUnreachableError,
    DataLossError,
    OffsetOutOfRangeError,
    RaftsinkSourceError,
)
from connectors.spark.planning import OffsetRange
from sink.readapi import ERR_NONE, ERR_OFFSET_OUT_OF_RANGE, ERR_UNKNOWN_TOPIC_OR_PARTITION

log = logging.getLogger("connectors.spark")

# Emit an Arrow batch once this many rows or key/value bytes are pending (bounds worker memory
# per batch, and keeps binary columns far below Arrow's 2 GiB int32-offset limit).
CHUNK_ROWS = 32_768
CHUNK_BYTES = 64 * 1024 * 1024


def data_loss_message(topic: str, partition: int, needed: int, log_start: int) -> str:
    return (
        f"data loss in {topic}/{partition}: offsets [{needed}, {log_start}) were removed"
        f" (the log now starts at {log_start}) before this query read them. Set"
        " failOnDataLoss=false to skip them, or give the pipeline a pipelineId so retention"
        " keeps what it has not committed."
    )


def _next_offset(batch: Any) -> int:
    """The offset after a served RecordBatch v2: its base offset + lastOffsetDelta + 1."""
    return batch.base_offset + int.from_bytes(batch.data[23:27], "big") + 1


def read_range(
    cluster: ReadCluster,
    rng: OffsetRange,
    fail_on_data_loss: bool = True,
    include_headers: bool = True,
    max_bytes: int = 4 * 1024 * 1024,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of rng as Arrow batches (see the module invariant)."""
    dec = RangeDecoder(rng.topic, rng.partition, rng.start, rng.end, include_headers)
    deadline = time.monotonic() + cluster.retry_timeout_s
    delay = 0.02
    warn_at = time.monotonic() + 2.0
    # Where to read: the range's replicas as planned (followers first, then the leader),
    # then the source's other nodes (a replica list from an older node is empty, and an
    # advertised address may not be reachable from here). After a replica serves, it is
    # asked first for the rest: one that died is passed over once, not on every fetch.
    order = list(rng.replicas) + [
        a for a in (cluster.nodes[i] for i in cluster.order()) if a not in rng.replicas
    ]
    # The next Fetch, started before decoding the current reply: (address, offset, future).
    # Used only if the loop asks that address for that offset; dropped otherwise.
    prefetch: tuple[str, int, Future] | None = None
    while not dec.done:
        errors: dict[str, str] = {}
        reachable = 0
        lost_to = -1  # a node's log start past what we need: data loss
        served = False
        ahead, prefetch = prefetch, None
        for k, addr in enumerate(order):
            want = dec.next_offset
            try:
                if ahead is not None and ahead[:2] == (addr, want):
                    fut, ahead = ahead[2], None
                    reply = fut.result(cluster.request_timeout_s + 5.0)
                else:
                    reply = cluster.fetch(addr, rng.topic, rng.partition, want, max_bytes)
            except Exception as exc:
                errors[addr] = _describe(exc)
                continue
            reachable += 1
            if reply.error_code == ERR_OFFSET_OUT_OF_RANGE and reply.log_start_offset > want:
                lost_to = max(lost_to, reply.log_start_offset)
                errors[addr] = f"log starts at {reply.log_start_offset}"
                continue
            if reply.error_code == ERR_UNKNOWN_TOPIC_OR_PARTITION:
                errors[addr] = f"unknown topic or partition ({reply.error})"
                continue
            if reply.error_code not in (ERR_NONE, ERR_OFFSET_OUT_OF_RANGE):
                errors[addr] = f"error {reply.error_code}: {reply.error}"
                continue
            if reply.error_code == ERR_OFFSET_OUT_OF_RANGE or not reply.batches:
                # This replica has not applied offset `want` yet; another one may have.
                errors[addr] = f"applied up to {reply.high_watermark}"
                continue
            after = _next_offset(reply.batches[-1])
            if want < after < dec.end:
                prefetch = (
                    addr,
                    after,
                    cluster.fetch_soon(addr, rng.topic, rng.partition, after, max_bytes),
                )
            for b in reply.batches:
                dec.add(b.data)
            if dec.next_offset <= want:
                raise RaftsinkSourceError(
                    f"{addr} returned batches for {rng.topic}/{rng.partition} that do not cover"
                    f" offset {want}; refusing to return a short range"
                )
            if k:
                order = order[k:] + order[:k]
            if addr in cluster.nodes:
                cluster.preferred = cluster.nodes.index(addr)
            served = True
            break
        if ahead is not None:
            ahead[2].cancel()
        if served:
            delay = 0.02
            deadline = time.monotonic() + cluster.retry_timeout_s
            if dec.pending >= CHUNK_ROWS or dec.pending_bytes >= CHUNK_BYTES:
                yield dec.flush()  # type: ignore[misc]
            continue
        if lost_to > dec.next_offset:
            msg = data_loss_message(rng.topic, rng.partition, dec.next_offset, lost_to)
            if fail_on_data_loss:
                raise DataLossError(msg)
            log.warning("%s (failOnDataLoss=false: skipping)", msg)
            dec.next_offset = min(dec.end, lost_to)
            continue
        if time.monotonic() + delay > deadline:
            tried = "; ".join(f"{a} ({e})" for a, e in errors.items())
            what = f"{rng.topic}/{rng.partition} offsets [{dec.next_offset}, {rng.end})"
            if reachable == 0:
                raise ClusterUnreachableError(
                    f"cannot read {what}: no node reachable; tried {tried}. Check raftsink.nodes"
                    " (read API addresses) and that the nodes run."
                )
            raise OffsetOutOfRangeError(
                f"cannot read {what}: no replica holds them within"
                f" {cluster.retry_timeout_s:.0f} s; tried {tried}"
            )
        now = time.monotonic()
        if now >= warn_at:
            warn_at = now + 5.0
            log.warning(
                "waiting for a replica to serve %s/%s at offset %d (range end %d): %s",
                rng.topic,
                rng.partition,
                dec.next_offset,
                rng.end,
                errors,
            )
        time.sleep(delay)
        delay = min(0.5, delay * 2)
    last = dec.flush()
    if last is not None:
        yield last
