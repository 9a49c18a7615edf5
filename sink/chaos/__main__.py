"""`python -m sink.chaos` (and `raftsink chaos`): run one fault campaign.

Exit status: 0 valid (no anomaly, every reader reached the end), 1 anomalies
or a node crash, 3 unknown (no anomaly found, but the end could not be read).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys

KINDS = ("kill", "pause", "partition", "disk")  # sink.chaos.nemesis.KINDS (not imported: light)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `raftsink chaos` options (sink/cli.py adds them to its subparser)."""
    p.add_argument(
        "--seed", type=int, default=None, help="seed of the fault schedule (default: random)"
    )
    p.add_argument("--minutes", type=float, default=2.0, help="workload duration (default 2)")
    p.add_argument("--out", default=None, help="output directory (default chaos-SEED)")
    p.add_argument(
        "--nemesis",
        default=",".join(KINDS),
        help=f"comma-separated fault kinds among {','.join(KINDS)} (default: all)",
    )
    p.add_argument("--partitions", type=int, default=4, help="partitions of the topic (default 4)")
    p.add_argument("--producers", type=int, default=3, help="idempotent producers (default 3)")
    p.add_argument("--rate", type=float, default=100.0, help="records/s per producer (default 100)")
    p.add_argument("--kafka-consumers", type=int, default=2, help="Kafka consumers (default 2)")
    p.add_argument("--readers", type=int, default=2, help="read API readers (default 2)")
    p.add_argument("--fault-min", type=float, default=3.0, help="shortest fault, s (default 3)")
    p.add_argument("--fault-max", type=float, default=8.0, help="longest fault, s (default 8)")
    p.add_argument("--gap-min", type=float, default=2.0, help="shortest quiet gap, s (default 2)")
    p.add_argument("--gap-max", type=float, default=5.0, help="longest quiet gap, s (default 5)")
    p.add_argument("--drop-data", action="store_true", help="delete node data dirs at the end")


def run_from_args(args: argparse.Namespace) -> int:
    from sink.chaos.campaign import run_campaign

    seed = args.seed if args.seed is not None else random.randrange(2**31)
    out = args.out or f"chaos-{seed}"
    nemeses = [n for n in args.nemesis.split(",") if n]
    print(f"raftsink chaos: seed={seed} minutes={args.minutes} out={out}", file=sys.stderr)
    data = run_campaign(
        seed,
        out,
        minutes=args.minutes,
        nemeses=nemeses,
        keep_data=not args.drop_data,
        partitions=args.partitions,
        producers=args.producers,
        rate=args.rate,
        kafka_consumers=args.kafka_consumers,
        read_api_readers=args.readers,
        fault_min_s=args.fault_min,
        fault_max_s=args.fault_max,
        gap_min_s=args.gap_min,
        gap_max_s=args.gap_max,
    )
    with open(os.path.join(out, "summary.txt")) as f:
        print(f.read())
    print(f"report: {out}/report.json, {out}/summary.txt, {out}/plot.png", file=sys.stderr)
    return {"VALID": 0, "INVALID": 1}.get(data["verdict"], 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="raftsink chaos", description=__doc__.splitlines()[0])
    add_arguments(parser)
    logging.basicConfig(level=os.environ.get("RAFTSINK_LOG_LEVEL", "WARNING"))
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
