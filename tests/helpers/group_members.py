"""Consumer-group members as processes, for the client-matrix tests.

Each member is a real client in its own process (so a test can SIGTERM it, kill -9 it and
start it again): tests/clients/py/group_member.py for confluent-kafka, kafka-python and
aiokafka, tests/clients/js/kafkajs_client.js `member` for KafkaJS, and `kcat -G` itself. The
first two print one JSON event per line (see group_member.py); kcat's output is translated:
its `-J` message lines become `recs`, its "% Group ... rebalanced ... assigned:/revoked:"
lines on stderr become `assignment`. kcat commits on its own (auto commit), so it reports no
`commit` events; tests read committed offsets from the coordinator (`committed_offsets`).

Events are collected by a reader thread per stream with the time they arrived; tests wait on
conditions over them with deadlines (`wait_until`), never on sleeps.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers.client_tools import kafkajs_script, kcat_path

ROOT = Path(__file__).resolve().parents[2]
PY_MEMBER = ROOT / "tests" / "clients" / "py" / "group_member.py"

# The clients of the matrix. "confluent-coop" is confluent-kafka with the cooperative-sticky
# assignor (incremental rebalances); the others use their default (eager) assignors.
CLIENTS = ["confluent", "confluent-coop", "kafka-python", "aiokafka", "kafkajs", "kcat"]
# Clients with static membership (group.instance.id): KafkaJS has none.
STATIC_CLIENTS = ["confluent", "kafka-python", "aiokafka", "kcat"]


@dataclass
class Event:
    t: float  # time.monotonic() when the line arrived
    ev: str
    data: dict


@dataclass
class Member:
    """One running member process and what it reported."""

    name: str
    client: str
    proc: subprocess.Popen
    events: list[Event] = field(default_factory=list)
    stderr_tail: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    # ------------------------------------------------------------------ reading
    def _add(self, ev: str, data: dict) -> None:
        with self.lock:
            self.events.append(Event(time.monotonic(), ev, data))

    def snapshot(self) -> list[Event]:
        with self.lock:
            return list(self.events)

    @property
    def assignment(self) -> list[int] | None:
        """The last assignment it reported (None: none yet)."""
        for e in reversed(self.snapshot()):
            if e.ev == "assignment":
                return list(e.data["parts"])
        return None

    def assignments(self) -> list[list[int]]:
        return [list(e.data["parts"]) for e in self.snapshot() if e.ev == "assignment"]

    def records(self) -> list[tuple[int, int, float]]:
        """(partition, offset, arrival time) of every record it read, in order."""
        out = []
        for e in self.snapshot():
            if e.ev == "recs":
                out.extend((p, o, e.t) for p, o in e.data["recs"])
        return out

    def commits(self) -> list[tuple[int, int, float]]:
        """(partition, next offset, arrival time) of every commit acknowledged to it."""
        out = []
        for e in self.snapshot():
            if e.ev == "commit":
                out.extend((int(p), o, e.t) for p, o in e.data["offs"].items())
        return out

    def errors(self) -> list[str]:
        return [e.data.get("error", "") for e in self.snapshot() if e.ev == "error"]

    def describe(self) -> str:
        evs = self.snapshot()
        kinds: dict[str, int] = {}
        for e in evs:
            kinds[e.ev] = kinds.get(e.ev, 0) + 1
        tail = "\n      ".join(self.stderr_tail[-15:])
        return (
            f"{self.name} ({self.client}, pid {self.proc.pid}, exit {self.proc.poll()}): "
            f"events {kinds}; assignments {self.assignments()[-4:]}; "
            f"errors {self.errors()[-5:]}\n    stderr tail:\n      {tail}"
        )

    # ------------------------------------------------------------------ control
    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM: a clean close (LeaveGroup for a dynamic member); wait for the exit."""
        if self.running:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.name} did not close within {timeout} s") from None
        for th in self.threads:
            th.join(timeout=10)

    def kill(self) -> None:
        """SIGKILL: the member vanishes without LeaveGroup or a last commit."""
        if self.running:
            self.proc.kill()
        self.proc.wait()
        for th in self.threads:
            th.join(timeout=10)


# ---------------------------------------------------------------------- starting members

_KCAT_REBALANCE = re.compile(r"rebalanced.*?:\s*(assigned|revoked):\s*(.*)$")
_KCAT_PART = re.compile(r"\[(\d+)\]")


def _read_json_lines(m: Member, stream: Iterable[str]) -> None:
    for line in stream:
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            m.stderr_tail.append("stdout: " + line[:300])
            continue
        m._add(obj.pop("ev", "?"), obj)


def _read_kcat_stdout(m: Member, stream: Iterable[str]) -> None:
    for line in stream:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            m.stderr_tail.append("stdout: " + line[:300])
            continue
        m._add("recs", {"recs": [[obj["partition"], obj["offset"]]]})


def _read_stderr(m: Member, stream: Iterable[str], kcat: bool) -> None:
    for line in stream:
        line = line.rstrip()
        m.stderr_tail.append(line[:500])
        del m.stderr_tail[:-200]
        if kcat:
            hit = _KCAT_REBALANCE.search(line)
            if hit:
                parts = [int(x) for x in _KCAT_PART.findall(hit.group(2))]
                m._add("assignment", {"parts": sorted(parts) if hit.group(1) == "assigned" else []})


def start_member(
    name: str,
    client: str,
    brokers: str,
    topic: str,
    group: str,
    instance_id: str = "",
    session_ms: int = 10000,
    env: dict[str, str] | None = None,
) -> Member:
    """Start one member of `group` on `topic` with `client` (one of CLIENTS); env: extra
    environment of the member process (e.g. KAFKAJS_MEMBER_RETRIES)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    kcat = client == "kcat"
    if client in ("confluent", "confluent-coop", "kafka-python", "aiokafka"):
        cmd = [
            sys.executable,
            str(PY_MEMBER),
            "--client",
            "confluent" if client.startswith("confluent") else client,
            "--brokers",
            brokers,
            "--topic",
            topic,
            "--group",
            group,
            "--session-ms",
            str(session_ms),
        ]
        if client == "confluent-coop":
            cmd += ["--strategy", "cooperative-sticky"]
        if instance_id:
            cmd += ["--instance-id", instance_id]
        env["PYTHONPATH"] = str(ROOT)
    elif client == "kafkajs":
        if instance_id:
            raise ValueError("KafkaJS has no static membership (group.instance.id)")
        node, script = kafkajs_script()
        cmd = [node, script, brokers, "member", topic]
        env.update(
            KAFKAJS_GROUP=group,
            KAFKAJS_SESSION_MS=str(session_ms),
            KAFKAJS_CLIENT_ID=f"kafkajs-{name}",
        )
    elif kcat:
        cmd = [
            kcat_path(),
            "-G",
            group,
            "-b",
            brokers,
            "-J",
            "-E",  # go on after non-fatal errors (a topic not yet in a follower's metadata)
            "-u",  # unbuffered: stdout is a pipe, each record must reach the test at once
            # not `-o beginning`: kcat >= 1.7 applies -o to every assignment in -G mode,
            # which would ignore the committed offsets after each rebalance
            "-X",
            "auto.offset.reset=earliest",
            "-X",
            f"session.timeout.ms={session_ms}",
            "-X",
            f"heartbeat.interval.ms={max(100, session_ms // 10)}",
            "-X",
            "auto.commit.interval.ms=200",
            "-X",
            "fetch.wait.max.ms=100",
            "-X",
            "topic.metadata.refresh.interval.ms=2000",
        ]
        if instance_id:
            cmd += ["-X", f"group.instance.id={instance_id}"]
        cmd.append(topic)
    else:
        raise ValueError(f"unknown client {client!r} (one of {CLIENTS})")
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    m = Member(name, client, proc)
    out_reader = _read_kcat_stdout if kcat else _read_json_lines
    m.threads = [
        threading.Thread(target=out_reader, args=(m, proc.stdout), daemon=True),
        threading.Thread(target=_read_stderr, args=(m, proc.stderr, kcat), daemon=True),
    ]
    for th in m.threads:
        th.start()
    return m


# ---------------------------------------------------------------------- conditions


def wait_until(
    cond: Callable[[], bool], timeout: float, what: Callable[[], str] | str, step: float = 0.1
) -> None:
    """Wait for cond() with a deadline; the failure names what was awaited and the state."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout} s waiting for {detail}")
        time.sleep(step)


def settled(members: list[Member], partitions: int) -> bool:
    """Every given member reports a non-empty assignment; together they are disjoint and
    cover every partition: one generation's assignment, fully taken up."""
    seen: list[int] = []
    for m in members:
        parts = m.assignment
        if not m.running or not parts:
            return False
        seen.extend(parts)
    return sorted(seen) == list(range(partitions))


def owners(members: list[Member]) -> dict[int, str]:
    return {p: m.name for m in members for p in (m.assignment or [])}
