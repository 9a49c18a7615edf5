"""connectors.spark.local_session starts Spark's driver quietly: the demo's and a user's
first screen shows raftsink's lines, not Spark's log4j start-up notes (its default
profile, the default level and how to change it, Hadoop's native-library warning)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
from connectors.spark import local_session
s = local_session("quiet-start")
assert s.range(5).count() == 5
s.stop()
print("done")
"""

NOISE = (
    "Using Spark's default log4j profile",
    "Setting default log level",
    "To adjust logging level",
    "NativeCodeLoader",
)


def test_local_session_starts_without_log4j_notes():
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("done"), proc.stdout
    heard = [n for n in NOISE if n in proc.stderr]
    assert not heard, f"{heard} in Spark's start-up output:\n{proc.stderr[-3000:]}"
