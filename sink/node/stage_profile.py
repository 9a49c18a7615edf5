"""`python -m sink.node.stage_profile serve ...`: `raftsink serve` with a per-stage CPU account.

A sampling profiler for one node process, for bench/produce.py (and anyone asking
"where does the CPU of a request go"). Switched off it costs a stat() every 100 ms:
a daemon thread looks for the control file named by RAFTSINK_STAGE_PROFILE. While
that file exists (it writes `<file>.<pid>.started` when it starts) it samples the
event-loop thread's stack at random intervals (mean SAMPLE_MEAN_S, jittered so a
1 ms-periodic workload does not alias); when the file is removed it writes
`<file>.<pid>.json`: the stage counts, every thread's CPU over the window (from
/proc, utime+stime: the disk writer, gRPC core's native threads, ...), the
process's CPU and the profiler's own.

How the event loop's time is split: a sample stands for (window / rounds) seconds
of the loop thread; a stack whose innermost Python frame is the loop's runner is the
loop in C (uvloop/libuv: epoll, timers, socket callbacks) or idle, and is not
counted; every other stack is charged to its stage. The loop thread's CPU minus the
charged stages is reported as "event loop C (uvloop, libuv) + unattributed".

The GIL: the sampler needs it to read a stack, and CPython hands it over only after
the switch interval (5 ms by default) or when the holder blocks (epoll). A produce
request's work is a burst of a few hundred microseconds, so with the default
interval every sample would land after the burst, in epoll. While sampling, the
switch interval is SWITCH_INTERVAL_S (restored afterwards), so a sample lands within
that much of its random instant.

A stack's stage is its innermost frame in raftlog/ or sink/ (RULES), else the
library it is in (grpc, asyncio streams). The mapping is by module and function
name: cheap (cached per code object) and exact, unlike a guess from timing.

Without RAFTSINK_STAGE_PROFILE the wrapper changes nothing.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from collections import Counter
from types import CodeType, FrameType

PROFILE_ENV = "RAFTSINK_STAGE_PROFILE"
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
    ("sink/node/stage_profile.py", "*", "(profiler)"),
    ("sink/kafka/connection.py", "_write_loop", "kafka: response write"),
    ("sink/kafka/connection.py", "*", "kafka: connection read/dispatch"),
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
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
    out = {}
    for name in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{name}/stat") as f:
                text = f.read()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        out[int(name)] = (comm, int(fields[11]) + int(fields[12]))
    return out


class StageProfiler:
    def __init__(self, control: str) -> None:
        self.control = control
        self.classify = Classifier()
        self._thread = threading.Thread(target=self._run, name="stage-profiler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while True:
            if not os.path.exists(self.control):
                time.sleep(POLL_S)
                continue
            switch = sys.getswitchinterval()
            sys.setswitchinterval(SWITCH_INTERVAL_S)
            try:
                self._window()
            finally:
                sys.setswitchinterval(switch)

    def _window(self) -> None:
        """Sample while the control file exists, then write the report."""
        loop_thread = threading.main_thread()
        loop_ident = loop_thread.ident
        t0, before = time.monotonic(), _task_times()
        cpu0, own0 = time.process_time(), time.thread_time()
        open(f"{self.control}.{os.getpid()}.started", "w").close()
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
            time.sleep(random.uniform(0.2, 1.8) * SAMPLE_MEAN_S)
            rounds += 1
            frame = sys._current_frames().get(loop_ident)  # type: ignore[arg-type]
            stage = self.classify.stage(frame)
            counts[stage] += 1
            if stage != IDLE:
                spots[self.classify.where(frame)] += 1
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
            "process_cpu_s": round(time.process_time() - cpu0, 4),
            "profiler_cpu_s": round(own, 4),
            "threads": threads,
        }
        path = f"{self.control}.{os.getpid()}.json"
        with open(path + ".tmp", "w") as f:
            json.dump(report, f)
        os.replace(path + ".tmp", path)


def stage_table(report: dict) -> dict[str, float]:
    """CPU seconds per stage of one report. The loop thread: each stage's samples
    times the sample period, and the rest of its CPU as "event loop C (uvloop,
    libuv) + unattributed"; every other thread under its name (its own CPU)."""
    out: Counter = Counter()
    period = report["wall_s"] / max(report["rounds"], 1)
    for stage, n in report["loop_samples"].items():
        if stage not in (IDLE, "(profiler)"):
            out[stage] += n * period
    for t in report["threads"]:
        if t["loop"]:
            out["event loop C (uvloop, libuv) + unattributed"] += t["cpu_s"] - sum(out.values())
        elif t["name"] == "stage-profiler":
            out["(profiler)"] += t["cpu_s"]
        else:
            kind = "thread" if t["python"] else "native thread"
            out[f"{kind}: {t['name']}"] += t["cpu_s"]
    return dict(out)


def main(argv: list[str]) -> int:
    control = os.environ.get(PROFILE_ENV)
    if control:
        StageProfiler(control).start()
    from sink.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
