"""bench/stage_profile.py: stacks map to the stages of the produce path, the table
splits CPU as documented, and a window switched on and off by its control file
writes a report (the benchmark's per-stage CPU account depends on all three)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import pytest

from bench import stage_profile as sp
from sink.kafka.protocol import record_check


def test_project_frames_map_to_their_stage():
    c = sp.Classifier()
    assert c.code_stage(record_check._walk.__code__) == "produce: batch parse + CRC check"
    assert c.code_stage(sp.stage_table.__code__) is None  # bench/: not a project stage
    assert c.code_stage(pytest.raises.__code__) is None  # not a project file


class _Header:
    """A batch header whose first attribute read captures the reading frame (a
    library-like frame outside raftlog/ and sink/, called by project code)."""

    def __init__(self) -> None:
        self.frame = None

    @property
    def start(self) -> int:
        self.frame = sys._getframe()
        raise LookupError("captured")


def test_a_stack_is_charged_to_its_innermost_project_frame():
    c = sp.Classifier()
    h = _Header()
    with pytest.raises(LookupError):
        record_check.check_records(b"", [h])  # type: ignore[list-item]
    # The innermost frame is this test file's (not raftlog/ or sink/): the stage
    # comes from the nearest project frame under it, record_check's.
    assert c.stage(h.frame) == "produce: batch parse + CRC check"
    assert c.where(h.frame).startswith("sink/kafka/protocol/record_check.py:check_batch_records:")
    assert c.stage(None) == "(no Python frame)"


def test_stage_table_takes_the_instrumented_stages_and_the_rest_of_the_loop_thread():
    report = {
        "loop_stages_cpu_s": {"kafka: request framing + decode": 0.3, "apply: state machine": 0.2},
        "threads": [
            {"name": "MainThread", "python": True, "loop": True, "cpu_s": 0.8},
            {"name": "raftlog-disk-1", "python": True, "loop": False, "cpu_s": 0.2},
            {"name": "stage-profiler", "python": True, "loop": False, "cpu_s": 0.1},
            {"name": "event_engine", "python": False, "loop": False, "cpu_s": 0.05},
        ],
    }
    t = sp.stage_table(report)
    assert t["kafka: request framing + decode"] == pytest.approx(0.3)
    assert t["apply: state machine"] == pytest.approx(0.2)
    assert t[sp.REMAINDER] == pytest.approx(0.3)
    assert t["thread: raftlog-disk-1"] == pytest.approx(0.2)
    assert t["native thread: event_engine"] == pytest.approx(0.05)
    assert t["(profiler)"] == pytest.approx(0.1)


def _spin(seconds: float) -> None:
    """Burn this thread's CPU for `seconds` of it (thread_time, not wall time)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_the_clock_charges_nested_stages_exclusively_and_not_while_suspended():
    clock = sp.CLOCK
    clock.reset()
    inner = sp.timed("inner", lambda: _spin(0.02))

    def outer_body():
        _spin(0.02)
        inner()

    outer = sp.timed("outer", outer_body)

    async def waits():
        _spin(0.02)
        await asyncio.sleep(0)  # suspended: the other task's CPU is not ours
        _spin(0.02)

    async def other():
        _spin(0.05)

    awaited = sp.timed_async("awaited", waits)

    async def main():
        t = asyncio.ensure_future(other())
        await awaited()
        await t

    clock.enabled = True
    try:
        outer()
        asyncio.run(main())
    finally:
        clock.enabled = False
    # a coroutine counts once per resumption (it ran in two steps)
    assert clock.calls == {"outer": 1, "inner": 1, "awaited": 2}
    assert clock.cpu["outer"] == pytest.approx(0.02, abs=0.01)
    assert clock.cpu["inner"] == pytest.approx(0.02, abs=0.01)
    assert clock.cpu["awaited"] == pytest.approx(0.04, abs=0.015)
    assert clock._stack == []
    outer()  # disabled: not counted
    assert clock.calls["outer"] == 1


def _wait_for(path: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.01)


def test_a_window_opened_and_closed_by_the_control_file_writes_a_report(tmp_path):
    control = str(tmp_path / "ctl")
    prof = sp.StageProfiler(control, sample=True)
    prof.start()
    pid = os.getpid()
    open(control, "w").close()
    _wait_for(f"{control}.{pid}.started")
    # Work in this (the main) thread, in a timed stage, while the profiler samples.
    work = sp.timed("test: work", lambda: _spin(0.001))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        work()
        time.sleep(0.001)
        if prof.rounds > 20:
            break
    assert prof.rounds > 20, "the profiler took no samples within 10 s"
    os.unlink(control)
    _wait_for(f"{control}.{pid}.json")
    with open(f"{control}.{pid}.json") as f:
        report = json.load(f)
    assert report["pid"] == pid
    assert report["rounds"] > 10
    assert sum(report["loop_samples"].values()) == report["rounds"]
    assert any(t["loop"] for t in report["threads"])
    assert any(t["name"] == "stage-profiler" for t in report["threads"])
    assert report["loop_stage_calls"]["test: work"] > 0
    assert report["loop_stages_cpu_s"]["test: work"] > 0
    assert not sp.CLOCK.enabled  # off again with the window
    assert sys.getswitchinterval() == pytest.approx(0.005)  # restored after the window
