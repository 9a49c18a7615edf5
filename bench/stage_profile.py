"""`python -m bench.stage_profile serve ...`: `raftsink serve` with a per-stage CPU account.

For bench/produce.py (and anyone asking "where does the CPU of a request go"), in
one node process. With RAFTSINK_STAGE_PROFILE set to a control file's path, the
produce path's stages are wrapped (instrument()) and a daemon thread looks for the
control file every 100 ms. While the file exists (it writes `<file>.<pid>.started`
when it starts) the wrappers charge the loop thread's CPU to the stages; when it is
removed, `<file>.<pid>.json` holds each stage's CPU and call count, every thread's CPU
over the window (from /proc, utime+stime: the disk writer, gRPC core's native
threads, ...), the process's CPU and the profiler's own. Switched off, a wrapper
costs an attribute test per call and the thread a stat() every 100 ms.

The stages are measured, not sampled: StageClock reads time.thread_time() (the
loop thread's own CPU clock) at each stage's entry and exit and charges the time
in between to the innermost stage. That clock does not advance while the thread
waits for the GIL or sits in epoll, so a stage's figure is CPU it used, not time
it waited (a sampling profiler inside the process cannot tell those apart: it
needs the GIL to read a stack, and gets it mostly where the loop thread hands it
over). Each timed call costs two clock reads (about 0.6 us each here), included in
its stage. What the wrappers do not cover (the event loop's C code, gRPC aio's
reads and completions, future callbacks) is the loop thread's CPU minus the stages.

RAFTSINK_STAGE_PROFILE_SAMPLE=1 also samples the loop thread's stack (mean interval
SAMPLE_MEAN_S, jittered) and reports the innermost project frames by line, with the
GIL switch interval lowered to SWITCH_INTERVAL_S meanwhile so a sample lands near its
instant: a hot-spot list to read with the bias above in mind, not CPU figures.

Without RAFTSINK_STAGE_PROFILE the wrapper changes nothing. It lives in bench/, not
sink/: to time the Raft stages it wraps raftlog's internals (RawNode, DiskQueue,
RaftGroup's private methods), which no sink module may touch
(tests/unit/sink/test_raftlog_surface.py).
"""

from __future__ import annotations

import functools
import json
import os
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

# Run as `python -m bench.stage_profile` (node processes) and imported as
# `bench.stage_profile` (bench/produce_cpu.py): find common.py either way.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import task_times

PROFILE_ENV = "RAFTSINK_STAGE_PROFILE"
SAMPLE_ENV = "RAFTSINK_STAGE_PROFILE_SAMPLE"
SAMPLE_MEAN_S = 0.002
"""Mean interval between samples (500 Hz); each sample costs tens of microseconds."""
SWITCH_INTERVAL_S = 0.00005
"""The GIL switch interval while sampling (see the module doc)."""
IDLE = "(loop in C or idle)"
POLL_S = 0.1
"""How often a disabled profiler looks for its control file."""

_TICKS = os.sysconf("SC_CLK_TCK")

# (path fragment under the repo, function name or "*") -> stage, first match wins.
RULES: list[tuple[str, str, str]] = [
    ("sink/kafka/conn_responses.py", "_write_ready", "kafka: response write"),
    ("sink/kafka/conn", "*", "kafka: connection read/dispatch"),
    ("sink/kafka/protocol/encoders.py", "*", "kafka: response encode"),
    ("sink/kafka/protocol/build.py", "*", "kafka: response encode"),
    ("sink/kafka/protocol/records.py", "*", "produce: batch parse + CRC check"),
    ("sink/kafka/protocol/record_check.py", "*", "produce: batch parse + CRC check"),
    ("sink/kafka/protocol/record_times.py", "*", "produce: batch parse + CRC check"),
    ("sink/kafka/protocol/messageset.py", "*", "produce: batch parse + CRC check"),
    ("sink/kafka/protocol/", "*", "kafka: request decode"),
    ("sink/kafka/handlers/produce.py", "_encode_response", "kafka: response encode"),
    ("sink/kafka/handlers/produce.py", "finish", "kafka: response encode"),
    ("sink/kafka/handlers/produce.py", "one_done", "kafka: response encode"),
    ("sink/kafka/handlers/produce.py", "*", "produce: handler"),
    ("sink/kafka/handlers/", "*", "kafka: other handlers"),
    ("sink/kafka/", "*", "kafka: connection read/dispatch"),
    ("sink/service.py", "produce", "proposal: sink (dedupe, encode)"),
    ("sink/service.py", "_propose_produce", "proposal: sink (dedupe, encode)"),
    ("sink/service.py", "finish", "apply: completions"),
    ("sink/state/commands.py", "encode_produce", "proposal: sink (dedupe, encode)"),
    ("sink/state/", "*", "apply: state machine"),
    ("raftlog/runtime/group_api.py", "*", "proposal: raft queue"),
    ("raftlog/runtime/group.py", "_apply_loop", "apply: raft apply loop"),
    ("raftlog/runtime/group.py", "_apply_entries", "apply: raft apply loop"),
    ("raftlog/runtime/group.py", "_release_committed", "apply: raft apply loop"),
    ("raftlog/runtime/group.py", "_persist_loop", "disk queue: loop side"),
    ("raftlog/runtime/group.py", "_tick", "raft: ticks, heartbeats"),
    ("raftlog/runtime/group.py", "_housekeep", "raft: ticks, heartbeats"),
    ("raftlog/runtime/", "*", "raft: loop, Ready handling"),
    ("raftlog/core/", "*", "raft: core (step, Ready)"),
    ("raftlog/storage/disk_queue.py", "*", "disk queue: loop side"),
    ("raftlog/storage/", "*", "disk writer: write, fsync, index"),
    ("raftlog/transport/", "*", "transport: raft gRPC (project code)"),
    ("raftlog/", "*", "raft: other"),
    ("sink/readapi/", "*", "read API"),
    ("sink/", "*", "node: other"),
]
LIBRARY_RULES: list[tuple[str, str]] = [
    ("/grpc/", "transport: grpc aio internals"),
    ("/asyncio/streams.py", "kafka: socket I/O (asyncio streams)"),
    ("/asyncio/", "event loop: asyncio Python code"),
]
_IDLE_FILES = ("/asyncio/runners.py", "/uvloop/__init__.py")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _project_path(filename: str) -> str | None:
    """The path under the repository of a project file (raftlog/, sink/), else None."""
    if filename.startswith(_ROOT + os.sep):
        rel = filename[len(_ROOT) + 1 :]
        if rel.startswith(("raftlog/", "sink/")):
            return rel
    return None


class Classifier:
    """Stack -> stage, by the innermost project frame (cached per code object)."""

    def __init__(self) -> None:
        self._code: dict[CodeType, str | None] = {}

    def code_stage(self, code: CodeType) -> str | None:
        try:
            return self._code[code]
        except KeyError:
            pass
        stage = None
        rel = _project_path(code.co_filename)
        if rel is not None:
            for path, func, name in RULES:
                if rel.startswith(path) and (func == "*" or func == code.co_name):
                    stage = name
                    break
        if stage == "node: other":  # name it: a stage the table should get
            stage = f"node: other ({rel}:{code.co_name})"
        self._code[code] = stage
        return stage

    def where(self, frame: FrameType | None) -> str:
        """The innermost project frame as path:function (line), for the hot-spot list."""
        f = frame
        while f is not None:
            rel = _project_path(f.f_code.co_filename)
            if rel is not None:
                return f"{rel}:{f.f_code.co_name}:{f.f_lineno}"
            f = f.f_back
        return "-"

    def stage(self, frame: FrameType | None) -> str:
        innermost = frame
        if frame is not None and frame.f_code.co_filename.endswith(_IDLE_FILES):
            return IDLE  # the loop's runner is the innermost Python frame: in C or idle
        f = frame
        while f is not None:
            stage = self.code_stage(f.f_code)
            if stage is not None:
                return stage
            f = f.f_back
        if innermost is None:
            return "(no Python frame)"
        name = innermost.f_code.co_filename
        for fragment, stage in LIBRARY_RULES:
            if fragment in name:
                return stage
        return f"other: {os.path.basename(name)}:{innermost.f_code.co_name}"


def _task_times() -> dict[int, tuple[str, int]]:
    """Every thread of this process: tid -> (comm, utime+stime ticks)."""
    return task_times("self")


class StageClock:
    """Exact CPU per instrumented stage of the loop thread (time.thread_time(), which
    does not advance while the thread waits for the GIL or in epoll).

    Stages nest (the produce handler calls the batch check and the proposal): the
    clock keeps a stack and charges each stretch of CPU to the innermost stage only
    (exclusive time). Only the loop thread is timed (the other threads' CPU comes
    from /proc), and only while `enabled`; a call entered while enabled is always
    exited, so the stack stays balanced when the profiler switches off mid-call."""

    def __init__(self) -> None:
        self.enabled = False
        self.cpu: Counter = Counter()
        self.calls: Counter = Counter()
        self._stack: list[str | None] = []
        self._current: str | None = None
        self._since = 0.0
        self._loop_ident = threading.main_thread().ident

    def enter(self, stage: str) -> bool:
        if not self.enabled or threading.get_ident() != self._loop_ident:
            return False
        now = time.thread_time()
        if self._current is not None:
            self.cpu[self._current] += now - self._since
        self._stack.append(self._current)
        self._current, self._since = stage, now
        self.calls[stage] += 1
        return True

    def exit(self) -> None:
        now = time.thread_time()
        if self._current is not None:
            self.cpu[self._current] += now - self._since
        self._current, self._since = self._stack.pop(), now

    def reset(self) -> None:
        self.cpu.clear()
        self.calls.clear()


CLOCK = StageClock()


def timed(stage: str, fn: Callable) -> Callable:
    """fn, its calls charged to stage."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not CLOCK.enter(stage):
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        finally:
            CLOCK.exit()

    return wrapper


class _TimedAwait:
    """A coroutine whose every resumption (not the time it is suspended) is charged
    to a stage: other tasks run while it waits, and must not be charged to it."""

    __slots__ = ("_coro", "_stage")

    def __init__(self, coro: Any, stage: str) -> None:
        self._coro, self._stage = coro, stage

    def __await__(self) -> Any:
        it = self._coro.__await__()
        send, exc = None, None
        while True:
            entered = CLOCK.enter(self._stage)
            try:
                yielded = it.send(send) if exc is None else it.throw(exc)
            except StopIteration as stop:
                return stop.value
            finally:
                if entered:
                    CLOCK.exit()
            try:
                send, exc = (yield yielded), None
            except BaseException as e:  # thrown into us (cancellation): pass it on
                send, exc = None, e


def timed_async(stage: str, fn: Callable) -> Callable:
    """An async function, its running time (not its waits) charged to stage. Only
    for coroutines that are awaited (the wrapper is an awaitable, not a coroutine)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return _TimedAwait(fn(*args, **kwargs), stage)

    return wrapper


def _patch(owner: Any, name: str, stage: str, is_async: bool = False) -> None:
    fn = getattr(owner, name)
    setattr(owner, name, (timed_async if is_async else timed)(stage, fn))


def instrument() -> None:
    """Wrap the produce path's stages (leader and follower) in CLOCK. Called in the
    node process before anything is built, so every instance uses the wrappers."""

    import grpc.aio._call as grpc_call

    from raftlog.core.node_state import RawNode
    from raftlog.runtime.group import RaftGroup
    from raftlog.storage.disk_queue import DiskQueue
    from raftlog.transport import grpc_transport
    from raftlog.transport.routing import GroupRouter
    from sink.kafka import handlers
    from sink.kafka.connection import Connection
    from sink.kafka.handlers import produce
    from sink.kafka.protocol.connection import ConnectionState
    from sink.service import SinkService
    from sink.state.machine import SinkStateMachine

    kafka_decode = "kafka: request framing + decode"
    _patch(ConnectionState, "receive_data", kafka_decode)
    _patch(ConnectionState, "next_event", kafka_decode)
    _patch(ConnectionState, "send", "kafka: response framing")
    # The Kafka connection is a BufferedProtocol (no StreamReader/Writer): its read
    # callback (the copy out of the head buffer, the event pump) and its writes.
    _patch(Connection, "buffer_updated", "kafka: socket read (protocol callback)")
    _patch(Connection, "_write_ready", "kafka: socket write")
    _patch(Connection, "_dispatch", "kafka: dispatch (Call, quotas)")
    api = handlers.REGISTRY[produce.API.key]
    object.__setattr__(api, "handle", timed_async("produce: handler", api.handle))
    _patch(produce, "parse_batches", "produce: batch parse + CRC check")
    _patch(produce, "check_records", "produce: batch parse + CRC check")
    _patch(produce, "_encode_response", "kafka: response encode")
    _patch(SinkService, "produce", "proposal: sink (dedupe, entry encode)")
    _patch(RaftGroup, "_enqueue_proposals", "proposal: raft queue")
    _patch(RaftGroup, "_propose_queued", "proposal: raft queue")
    for name in ("step", "ready", "has_ready", "advance", "tick", "propose_batch", "on_applied"):
        _patch(RawNode, name, "raft: core (step, Ready)")
    _patch(RaftGroup, "_handle_ready", "raft: runtime (Ready handling)", is_async=True)
    _patch(RaftGroup, "_on_messages", "raft: runtime (Ready handling)")
    _patch(GroupRouter, "deliver", "transport: receive (route)")
    _patch(grpc_transport, "decode_batch_known", "transport: receive (decode)")
    _patch(grpc_transport, "encode_batch_bytes", "transport: send (encode)")
    _patch(grpc_call._StreamRequestMixin, "write", "transport: send (gRPC aio write)", True)
    for name in ("append", "save_hard_state", "set_applied", "read", "_complete_round"):
        _patch(DiskQueue, name, "disk queue: loop side")
    _patch(RaftGroup, "_apply_entries", "apply: raft apply loop", is_async=True)
    _patch(SinkStateMachine, "on_apply", "apply: state machine")


class StageProfiler:
    def __init__(self, control: str, sample: bool = False) -> None:
        self.control = control
        self.sample = sample
        """Also sample the loop thread's stacks (hot spots by line; costs CPU)."""
        self.classify = Classifier()
        self.rounds = 0
        """Samples taken in the current (or last) window."""
        self._thread = threading.Thread(target=self._run, name="stage-profiler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while True:
            if not os.path.exists(self.control):
                time.sleep(POLL_S)
                continue
            switch = sys.getswitchinterval()
            if self.sample:
                sys.setswitchinterval(SWITCH_INTERVAL_S)
            try:
                self._window()
            finally:
                sys.setswitchinterval(switch)

    def _window(self) -> None:
        """Time the stages (and sample stacks, if asked) while the control file
        exists, then write the report."""
        loop_thread = threading.main_thread()
        loop_ident = loop_thread.ident
        t0, before = time.monotonic(), _task_times()
        cpu0, own0 = time.process_time(), time.thread_time()
        CLOCK.reset()
        CLOCK.enabled = True
        open(f"{self.control}.{os.getpid()}.started", "w").close()
        self.rounds = 0
        counts: Counter = Counter()
        spots: Counter = Counter()  # innermost project frame (file:function:line)
        rounds = 0
        next_check = 0.0
        while True:
            now = time.monotonic()
            if now >= next_check:
                if not os.path.exists(self.control):
                    break
                next_check = now + POLL_S
            if not self.sample:
                time.sleep(POLL_S)
                continue
            time.sleep(random.uniform(0.2, 1.8) * SAMPLE_MEAN_S)
            rounds += 1
            self.rounds = rounds
            frame = sys._current_frames().get(loop_ident)  # type: ignore[arg-type]
            stage = self.classify.stage(frame)
            counts[stage] += 1
            if stage != IDLE:
                spots[self.classify.where(frame)] += 1
        CLOCK.enabled = False
        after, wall = _task_times(), time.monotonic() - t0
        own = time.thread_time() - own0
        names = {t.native_id: t.name for t in threading.enumerate()}
        threads = []
        for tid, (comm, ticks) in after.items():
            cpu = (ticks - before.get(tid, (comm, 0))[1]) / _TICKS
            threads.append(
                {
                    "tid": tid,
                    "name": names.get(tid, comm),
                    "python": tid in names,
                    "loop": tid == loop_thread.native_id,
                    "cpu_s": round(cpu, 4),
                }
            )
        report = {
            "pid": os.getpid(),
            "wall_s": round(wall, 3),
            "rounds": rounds,
            "loop_samples": dict(counts.most_common()),
            "loop_hot_spots": dict(spots.most_common(60)),
            "loop_stages_cpu_s": {k: round(v, 6) for k, v in CLOCK.cpu.most_common()},
            "loop_stage_calls": dict(CLOCK.calls),
            "process_cpu_s": round(time.process_time() - cpu0, 4),
            "profiler_cpu_s": round(own, 4),
            "threads": threads,
        }
        path = f"{self.control}.{os.getpid()}.json"
        with open(path + ".tmp", "w") as f:
            json.dump(report, f)
        os.replace(path + ".tmp", path)


REMAINDER = "loop thread, not instrumented (event loop, gRPC aio, callbacks)"


def stage_table(report: dict) -> dict[str, float]:
    """CPU seconds per stage of one report: the loop thread's instrumented stages
    (exact, StageClock) and the rest of its CPU as REMAINDER; every other thread
    under its name (its CPU from /proc); the profiler's own thread as "(profiler)"."""
    out: Counter = Counter()
    for stage, cpu in report["loop_stages_cpu_s"].items():
        out[stage] += cpu
    for t in report["threads"]:
        if t["loop"]:
            out[REMAINDER] += t["cpu_s"] - sum(report["loop_stages_cpu_s"].values())
        elif t["name"] == "stage-profiler":
            out["(profiler)"] += t["cpu_s"]
        else:
            kind = "thread" if t["python"] else "native thread"
            out[f"{kind}: {t['name']}"] += t["cpu_s"]
    return dict(out)


def main(argv: list[str]) -> int:
    # gRPC core's settings for Raft, before anything imports grpc (raftlog/grpc_env.py):
    # what `raftsink serve` gets once sink/cli.py calls it too.
    from raftlog import grpc_env

    grpc_env.apply()
    control = os.environ.get(PROFILE_ENV)
    if control:
        instrument()
        StageProfiler(control, sample=bool(os.environ.get(SAMPLE_ENV))).start()
    from sink.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
