"""`python -m sink.config --doc [--write FILE]`: print the settings table, or put it
into FILE between its markers (docs/operations.md)."""

from __future__ import annotations

import argparse
import sys

from sink.config.doc import render_table, replace_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sink.config", description=__doc__)
    parser.add_argument("--doc", action="store_true", help="the markdown settings table")
    parser.add_argument("--write", metavar="FILE", help="replace the table inside FILE")
    args = parser.parse_args(argv)
    if not args.doc:
        parser.error("nothing to do (use --doc)")
    if args.write:
        with open(args.write) as f:
            text = replace_table(f.read())  # before opening for writing: never truncate
        with open(args.write, "w") as f:
            f.write(text)
        return 0
    print(render_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
