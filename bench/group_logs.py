"""Cost of opening many group logs in one process: one LMDB environment per log
(`own`, what every LogStore.open does) against one shared per data directory
(`shared`, LogEnvironment).

For each group count (10, 100, 1,000) and layout, a fresh child process opens
that many logs, appends one entry and saves a hard state in each, closes them,
then reopens them all (a node restart). Reported per run: open and reopen time,
the process's address space (VSZ) and resident memory (RSS) after the reopen,
its open file descriptors, and whether it failed (and how). `own` at 1,000
groups reserves 1,000 x lmdb_map_bytes (64 GiB) of address space and three
descriptors per log; `shared` one map and two descriptors in all, plus the
segment files.

    python bench/group_logs.py [--groups 10,100,1000] [--layouts own,shared] [--dir DIR]
                               [--nofile N]   (the children's soft RLIMIT_NOFILE, e.g. 1024)

The last line of output is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmSize", "VmRSS"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def child(layout: str, groups: int, directory: str) -> dict:
    """Runs in its own process: open, write, close, reopen `groups` logs."""
    from raftlog.entry import EntryType, HardState, LogEntry
    from raftlog.storage import LogEnvironment, LogStore

    base = _status()
    fds_base = len(os.listdir("/proc/self/fd"))
    env = None
    result: dict = {"layout": layout, "groups": groups}

    def open_all() -> list:
        nonlocal env
        if layout == "own":
            return [LogStore.open(os.path.join(directory, str(g))) for g in range(groups)]
        env = LogEnvironment.open(directory)
        return [env.open_log(g) for g in range(groups)]

    def close_all(logs: list) -> None:
        for log in logs:
            log.close()
        if env is not None:
            env.close()

    opened = 0
    try:
        t = time.perf_counter()
        logs = open_all()
        opened = len(logs)
        for g, log in enumerate(logs):
            log.append([LogEntry(1, 1, EntryType.DATA, b"group %d" % g)])
            log.save_hard_state(HardState(term=1, vote=1, commit=1))
        result["open_write_s"] = round(time.perf_counter() - t, 3)
        close_all(logs)
        t = time.perf_counter()
        logs = open_all()
        result["reopen_s"] = round(time.perf_counter() - t, 3)
        assert all(log.last_index() == 1 for log in logs)
        st = _status()
        result["vsz_gib"] = round(st["VmSize"] / 2**30, 1)
        result["vsz_growth_gib"] = round((st["VmSize"] - base["VmSize"]) / 2**30, 1)
        result["rss_mib"] = round(st["VmRSS"] / 2**20, 1)
        result["rss_growth_mib"] = round((st["VmRSS"] - base["VmRSS"]) / 2**20, 1)
        result["fds"] = len(os.listdir("/proc/self/fd")) - fds_base
        close_all(logs)
        result["ok"] = True
    except Exception as exc:  # the figure of interest: how the old layout fails
        result["ok"] = False
        result["error"] = f"{type(exc).__name__}: {exc}"[:200]
        result["opened_before_error"] = opened
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", default="10,100,1000")
    ap.add_argument("--layouts", default="own,shared")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    ap.add_argument("--nofile", type=int, default=0, help="children's soft descriptor limit")
    ap.add_argument("--child", nargs=3, metavar=("LAYOUT", "GROUPS", "DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        layout, groups, directory = args.child
        if args.nofile:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, hard))
        print(json.dumps(child(layout, int(groups), directory)))
        return
    scratch = tempfile.mkdtemp(prefix="group-logs-", dir=args.dir)
    runs = []
    try:
        for n in (int(x) for x in args.groups.split(",")):
            for layout in args.layouts.split(","):
                d = os.path.join(scratch, f"{layout}-{n}")
                me = os.path.abspath(__file__)
                proc = subprocess.run(
                    [
                        sys.executable,
                        me,
                        "--nofile",
                        str(args.nofile),
                        "--child",
                        layout,
                        str(n),
                        d,
                    ],
                    capture_output=True,
                    text=True,
                    cwd=ROOT,
                    check=False,
                )
                lines = proc.stdout.strip().splitlines()
                if proc.returncode != 0 or not lines:
                    row = {"layout": layout, "groups": n, "ok": False}
                    row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
                else:
                    row = json.loads(lines[-1])
                print(json.dumps(row), file=sys.stderr)
                runs.append(row)
                shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(
        json.dumps(
            {
                "bench": "group_logs",
                "nofile_limit": args.nofile or resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
