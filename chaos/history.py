"""The campaign's history: every operation as invoke + completion, Jepsen style.

An operation is a dict with at least
    id       pairs an invocation with its completion
    type     "invoke", then one of "ok" (it happened), "fail" (it certainly did
             not happen) or "info" (unknown: it may or may not have happened)
    f        what it is: send, poll, hw, seek, caught_up, final_read, nemesis
    process  who did it (producer-0, kafka-consumer-1, read-api-0, hw-node-2, ...)
    time     seconds since the campaign started (monotonic clock)
and the fields of its kind (value, partition, offset, records, partitions...).

Kinds and their fields (completions):
    send        value, partition (asked for); ok: offset; info/fail: error
    poll        source ("kafka" | "read_api"), node (read API), records:
                [[partition, offset, value], ...] in the order received
    seek        partition, offset: the consumer's next position was set (resets
                the poll-order checks of that partition for this process)
    hw          source ("read_api" | "read_api_lin" | "kafka"), node, gen (the
                node process incarnation), partitions: {partition: high watermark}
    caught_up   ends: {partition: offset}: the consumer polled everything below
    final_read  node, complete (bool), ends: {partition: hw}, records as in poll
    nemesis     value: description; start/stop of a fault (type "info")

Thread-safe: producers' delivery callbacks, consumer threads and the asyncio
readers append concurrently.
"""

from __future__ import annotations

import gzip
import itertools
import json
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

Op = dict[str, Any]


class History:
    def __init__(self, t0: float | None = None) -> None:
        self.t0 = time.monotonic() if t0 is None else t0
        self.ops: list[Op] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def invoke(self, f: str, process: str, **fields: Any) -> int:
        op_id = next(self._ids)
        op = {"id": op_id, "type": "invoke", "f": f, "process": process, "time": self.now()}
        op.update(fields)
        with self._lock:
            self.ops.append(op)
        return op_id

    def complete(self, op_id: int, type_: str, f: str, process: str, **fields: Any) -> Op:
        assert type_ in ("ok", "fail", "info"), type_
        op = {"id": op_id, "type": type_, "f": f, "process": process, "time": self.now()}
        op.update(fields)
        with self._lock:
            self.ops.append(op)
        return op

    def record(self, type_: str, f: str, process: str, **fields: Any) -> int:
        """An invoke and its completion at once (for instant or local events)."""
        op_id = self.invoke(f, process, **{k: v for k, v in fields.items() if k == "partition"})
        self.complete(op_id, type_, f, process, **fields)
        return op_id

    def record_span(
        self, invoke_time: float, type_: str, f: str, process: str, **fields: Any
    ) -> None:
        """An operation invoked at invoke_time and completing now (both appended now:
        only checkers that sort by time may rely on invocation order)."""
        op_id = next(self._ids)
        inv = {"id": op_id, "type": "invoke", "f": f, "process": process, "time": invoke_time}
        op = {"id": op_id, "type": type_, "f": f, "process": process, "time": self.now()}
        op.update(fields)
        with self._lock:
            self.ops.append(inv)
            self.ops.append(op)

    def snapshot(self) -> list[Op]:
        with self._lock:
            return list(self.ops)

    def save(self, path: str) -> None:
        with gzip.open(path, "wt") as f:
            for op in self.snapshot():
                f.write(json.dumps(op, separators=(",", ":")))
                f.write("\n")


def load(path: str) -> list[Op]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def completions(ops: Iterable[Op], f: str | None = None) -> Iterator[Op]:
    for op in ops:
        if op["type"] != "invoke" and (f is None or op["f"] == f):
            yield op


def invocations(ops: Iterable[Op]) -> dict[int, Op]:
    return {op["id"]: op for op in ops if op["type"] == "invoke"}
