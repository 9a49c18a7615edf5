"""`raftsink chaos`: the fault campaign as a `raftsink` command.

Registered in the `raftsink.commands` entry-point group (pyproject.toml), which sink/cli.py
discovers; the server package never imports this one. Light on purpose: `raftsink --help`
loads it, so the campaign's own modules (and their dependencies) are imported only by run(),
after require_extra() has checked that the `chaos` extra is installed.

Exit status: 0 valid (no anomaly, every reader reached the end), 1 anomalies or a node crash,
2 the extra is missing or the options are refused (fewer than 3 nodes, `move` without
partition groups), 3 unknown (no anomaly found, but the end could not be read).
"""

from __future__ import annotations

import argparse
import os
import random
import sys

from sink.cli import missing_extra

HELP = "Jepsen-style fault campaign on a local cluster (3 nodes by default)"
EXTRA = "chaos"
REQUIRES = ("confluent_kafka", "aiokafka", "matplotlib")
"""Modules the campaign imports beyond the base install (the `chaos` extra provides them)."""

KINDS = (
    "kill",
    "pause",
    "partition",
    "disk",
    "wipe",
    "corrupt",
    "membership",
    "move",
)  # chaos.nemesis.KINDS (not imported: light)


def require_extra() -> str | None:
    """None when the extra is installed, else the message that says what to install."""
    return missing_extra("chaos", EXTRA, REQUIRES)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `raftsink chaos` options."""
    p.add_argument(
        "--seed", type=int, default=None, help="seed of the fault schedule (default: random)"
    )
    p.add_argument("--minutes", type=float, default=2.0, help="workload duration (default 2)")
    p.add_argument(
        "--seconds", type=float, default=None, help="workload duration in seconds (overrides)"
    )
    p.add_argument("--out", default=None, help="output directory (default chaos-SEED)")
    p.add_argument(
        "--nemesis",
        default=None,
        help=f"comma-separated fault kinds among {','.join(KINDS)} (default: all; move only "
        "with partition groups; membership with --partition-groups drains the node "
        "first, which needs --nodes 4 or more to remove anything)",
    )
    p.add_argument("--nodes", type=int, default=3, help="node processes (default 3; 5 works)")
    p.add_argument(
        "--partition-groups",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a Raft group per partition plus the controller (replication factor min(3, "
        "nodes)); faults aimed at 'the leader' hit the node leading the most data groups "
        "(default: on, as `raftsink serve`; --no-partition-groups: one Raft group)",
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
    p.add_argument(
        "--secure",
        action="store_true",
        help="TLS on every listener (Raft mTLS through the proxy), SASL_SSL SCRAM-SHA-512 "
        "clients, authorization on with ACLs for the workload's user (docs/chaos.md)",
    )
    p.add_argument(
        "--schedule-grace",
        type=float,
        default=0.0,
        help="seconds the workload may run past its duration for the nemesis to finish its "
        "schedule when faults ran late (default 0)",
    )
    p.add_argument("--drop-data", action="store_true", help="delete node data dirs at the end")


def run(args: argparse.Namespace) -> int:
    """Run one campaign from parsed arguments; checks the extra before doing anything."""
    problem = require_extra()
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    from chaos.campaign import run_campaign

    seed = args.seed if args.seed is not None else random.randrange(2**31)
    out = args.out or f"chaos-{seed}"
    nemeses = [n for n in (args.nemesis or "").split(",") if n]
    if not args.partition_groups and "move" in nemeses:
        print(
            "raftsink chaos: the move nemesis needs --partition-groups (it moves a "
            "partition's data group)",
            file=sys.stderr,
        )
        return 2
    if args.nodes < 3:
        print(f"raftsink chaos: --nodes must be at least 3, got {args.nodes}", file=sys.stderr)
        return 2
    duration = {"seconds": args.seconds} if args.seconds else {"minutes": args.minutes}
    groups = " partition-groups" if args.partition_groups else ""
    print(
        f"raftsink chaos: seed={seed} {duration} nodes={args.nodes}{groups} out={out}",
        file=sys.stderr,
    )
    data = run_campaign(
        seed,
        out,
        **duration,
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
        secure=args.secure,
        schedule_grace_s=args.schedule_grace,
        nodes=args.nodes,
        partition_groups=args.partition_groups,
    )
    with open(os.path.join(out, "summary.txt")) as f:
        print(f.read())
    print(f"report: {out}/report.json, {out}/summary.txt, {out}/plot.png", file=sys.stderr)
    return {"VALID": 0, "INVALID": 1}.get(data["verdict"], 3)
