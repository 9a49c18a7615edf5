"""`raftsink partitions`: move a partition's replicas (partition groups), over the read API.

    raftsink partitions move TOPIC PARTITION --replicas N,N,N  [--wait] [--json]
    raftsink partitions moves                                  [--json]
    raftsink partitions rebalance                              [--wait] [--json]

`move` commits the new replica list (first = the preferred leader) on the controller's
leader after checking it (known, live new nodes; one replica per host); the group's
leader then adds the new nodes as learners, promotes them once caught up, hands
leadership over if it is itself leaving, and removes the old ones, one change at a
time (docs/partition-groups.md, "Moving replicas"). `--wait` waits until the move is
done. `moves` lists the moves not finished yet. The same list again changes nothing;
the partition's current list cancels a pending move. `rebalance` starts the moves that
even out replica counts over the nodes (after `raftsink members add`: onto the new
node; groups already moving are left alone), `--wait` until they are done.

The cluster is given by --nodes HOST:PORT,... (read API addresses) or --cluster FILE
(cluster.json of `raftsink local`). Exit status: 0 done, 1 refused, unreachable or not
done within --timeout (the reason on stderr), 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from sink.cli_connect import add_read_api_args
from sink.cli_members import call, run_request

HELP = "move a partition's replicas (partition groups); list moves in progress; rebalance"
WAIT_POLL_S = 0.5


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("partitions", help=HELP, description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=("move", "moves", "rebalance"))
    p.add_argument("topic", nargs="?", help="move: the topic")
    p.add_argument("partition", nargs="?", type=int, help="move: the partition")
    p.add_argument("--replicas", help="move: the new replica list N,N,... (first = preferred)")
    p.add_argument(
        "--wait", action="store_true", help="move, rebalance: wait until the moves are done"
    )
    p.add_argument("--nodes", help="read API addresses HOST:PORT,... of the cluster")
    p.add_argument("--cluster", help="cluster.json written by `raftsink local`")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds (default 600)")
    p.add_argument("--json", action="store_true", help="print the raw JSON reply")
    add_read_api_args(p)
    p.set_defaults(func=run)


def build_request(args: argparse.Namespace) -> dict[str, Any]:
    """The Members request for the command line; ValueError on bad usage."""
    if args.action in ("moves", "rebalance"):
        return {"op": args.action, "timeout_s": args.timeout}
    if not args.topic or args.partition is None or not args.replicas:
        raise ValueError("move needs TOPIC PARTITION --replicas N,N,...")
    if args.partition < 0:
        raise ValueError(f"partition must be >= 0, got {args.partition}")
    try:
        replicas = [int(n) for n in args.replicas.split(",") if n.strip()]
    except ValueError:
        raise ValueError(f"--replicas must be node ids N,N,..., got {args.replicas!r}") from None
    if not replicas:
        raise ValueError("--replicas names no node")
    return {
        "op": "move",
        "topic": args.topic,
        "partition": args.partition,
        "replicas": replicas,
        "timeout_s": args.timeout,
    }


def format_moves(moves: list[dict[str, Any]]) -> str:
    if not moves:
        return "no move in progress"
    lines = [f"{'topic':<24} {'part':>4} {'group':>5}  replicas -> target (adding / removing)"]
    for m in moves:
        lines.append(
            f"{m['topic']:<24} {m['partition']:>4} {m['group']:>5}  {m['replicas']} -> "
            f"{m['target']} ({m['adding']} / {m['removing']})"
        )
    return "\n".join(lines)


async def _wait(nodes: list[str], groups: set[int], timeout: float) -> tuple[str, str]:
    """Poll `moves` until none of groups' moves is left -> ("", "") or (code, error)."""
    deadline = time.monotonic() + timeout
    while True:
        result, code, error = await call(nodes, {"op": "moves", "timeout_s": 10.0}, 10.0)
        if not code and all(m["group"] not in groups for m in result.get("moves", [])):
            return "", ""
        if time.monotonic() > deadline:
            left = sorted(groups)
            return code or "timeout", error or f"group(s) {left}: moves not done in {timeout:g} s"
        await asyncio.sleep(WAIT_POLL_S)


def run(args: argparse.Namespace) -> int:
    done = run_request(args, "partitions", build_request)
    if isinstance(done, int):
        return done
    nodes, _, result = done
    if args.action in ("move", "rebalance") and args.wait:
        groups = (
            {m["group"] for m in result.get("moves", [])}
            if args.action == "rebalance"
            else {result["group"]}
        )
        code, error = asyncio.run(_wait(nodes, groups, args.timeout))
        if code:
            print(f"raftsink partitions {args.action}: {code}: {error}", file=sys.stderr)
            return 1
        result["done"] = True
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.action == "moves":
        print(format_moves(result.get("moves", [])))
    elif args.action == "rebalance":
        moves = result.get("moves", [])
        state = "done" if result.get("done") else "started"
        print(f"rebalance: {len(moves)} move(s) {state}" + (":" if moves else " (balanced)"))
        for m in moves:
            print(
                f"  {m['topic']}-{m['partition']} (group {m['group']}): "
                f"{m['replicas']} -> {m['target']}"
            )
    else:
        steps = ", ".join(result.get("steps", [])) or "none (order only)"
        state = "done" if result.get("done") else "started"
        print(
            f"move of {result['topic']}-{result['partition']} (group {result['group']}) "
            f"{state}: {result['replicas']} -> {result['target']}; steps: {steps}"
        )
    return 0
