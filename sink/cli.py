"""The `raftsink` command line.

Subcommands present now:
    verify DIR      read-only integrity check of a node's data directory
    demo            the main job (today: the storage crash-and-recover demo)
"""

from __future__ import annotations

import argparse
import logging
import sys


def _cmd_verify(args: argparse.Namespace) -> int:
    from raftlog.storage import DataDirLockedError, verify_data_dir

    def progress(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr)

    try:
        report = verify_data_dir(args.data_dir, progress=progress)
    except DataDirLockedError as exc:
        print(f"raftsink verify: {exc}", file=sys.stderr)
        return 2
    print(report.to_text())
    return 0 if report.ok else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    from sink.demos import storage_demo

    return storage_demo(data_dir=args.data_dir, seconds=args.seconds, seed=args.seed)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raftsink", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("verify", help="check a data directory's segments and index (read-only)")
    p.add_argument("data_dir", help="the node's storage directory")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("demo", help="run the main job on an embedded default")
    p.add_argument("--data-dir", default=None, help="where to keep data (default: a temp dir)")
    p.add_argument("--seconds", type=float, default=4.0, help="how long each writer round runs")
    p.add_argument("--seed", type=int, default=None, help="seed for the crash schedule")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
