"""`raftsink demo`: the demos as a `raftsink` command.

Registered in the `raftsink.commands` entry-point group (pyproject.toml), which sink/cli.py
discovers; the server package never imports this one. Light on purpose (`raftsink --help`
loads it): the demos are imported only by run(), after require_extra() has checked that the
pipeline demo's extra is installed (the storage demo needs the base install only).
"""

from __future__ import annotations

import argparse
import sys

from sink.cli import missing_extra

HELP = "the main job: producers -> 3-node cluster -> Spark streaming -> Parquet, with a leader kill"
EXTRA = "demo"
REQUIRES = ("pyspark", "pyarrow", "numpy", "confluent_kafka")
"""Modules the pipeline demo imports beyond the base install (the `demo` extra: the `spark`
extra plus confluent-kafka for the producers)."""


def require_extra() -> str | None:
    """None when the pipeline demo's extra is installed, else what to install."""
    return missing_extra(
        "demo",
        EXTRA,
        REQUIRES,
        " (or run the storage crash demo, which needs nothing more: raftsink demo --storage)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `raftsink demo` options."""
    p.add_argument("--data-dir", default=None, help="where to keep data (default: a temp dir)")
    p.add_argument(
        "--records", type=int, default=150_000, help="records to produce (default 150000)"
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    p.add_argument("--storage", action="store_true", help="run the storage crash demo instead")
    p.add_argument("--seconds", type=float, default=4.0, help="storage demo: writer round length")
    p.add_argument("--seed", type=int, default=None, help="storage demo: crash schedule seed")


def run(args: argparse.Namespace) -> int:
    """Run the chosen demo; checks the extra before doing anything."""
    if args.storage:
        from demos.storage_demo import storage_demo

        return storage_demo(data_dir=args.data_dir, seconds=args.seconds, seed=args.seed)
    problem = require_extra()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    from demos.pipeline import run_pipeline

    return run_pipeline(data_dir=args.data_dir, records=args.records, keep=args.keep)
