"""kill -9 a writer process at random points; everything it reported durable
must be there and intact after reopening, and nothing is half there."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys

import pytest

from raftlog.storage import LogStore, verify_data_dir
from tests.helpers.storage import payload

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROUNDS = 8


@pytest.mark.crash
def test_kill_minus_nine_rounds(tmp_path):
    seed = int(os.environ.get("RAFTSINK_CRASH_SEED", random.randrange(2**32)))
    print(f"seed={seed} (replay with RAFTSINK_CRASH_SEED={seed})")
    rng = random.Random(seed)
    data_dir = str(tmp_path / "log")
    durable_last, durable_term, hard_term = 0, 0, 0
    for rnd in range(ROUNDS):
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.helpers.crash_writer",
                data_dir,
                str(rng.randrange(2**32)),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        # Reports are the clock: kill after a random number of them, so the
        # kill lands at an arbitrary point of the writer's pipeline.
        kill_after = rng.randint(1, 400)
        for _ in range(kill_after):
            line = child.stdout.readline()
            assert line, f"writer died on its own (code {child.wait()}), seed={seed}"
            kind, *vals = line.split()
            if kind == "A":
                durable_last = max(durable_last, int(vals[0]))
                durable_term = max(durable_term, int(vals[1]))
            else:
                hard_term = max(hard_term, int(vals[0]))
        child.send_signal(signal.SIGKILL)
        child.wait()
        # Reports that were already in the pipe are durable too.
        for line in child.stdout:
            kind, *vals = line.split()
            if kind == "A":
                durable_last = max(durable_last, int(vals[0]))
            else:
                hard_term = max(hard_term, int(vals[0]))
        store = LogStore.open(data_dir)
        try:
            assert store.last_index() >= durable_last, f"lost durable entries, seed={seed}"
            assert store.hard_state().term >= hard_term, f"lost hard state, seed={seed}"
            # Every entry present (reported or not) is whole and correct.
            idx = store.first_index()
            while idx <= store.last_index():
                for e in store.read(idx, 2000, 32 * 1024 * 1024):
                    assert e.data == payload(e.index, e.term, len(e.data)), (
                        f"entry {e.index} damaged, round {rnd}, seed={seed}"
                    )
                    idx = e.index + 1
        finally:
            store.close()
    report = verify_data_dir(data_dir)
    assert report.ok, report.to_text()
    assert durable_last > 0
