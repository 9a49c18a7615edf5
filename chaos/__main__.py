"""`python -m chaos` (the same as `raftsink chaos`): run one fault campaign.

Exit status: see chaos/command.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from chaos.command import HELP, add_arguments, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=HELP)
    add_arguments(parser)
    logging.basicConfig(level=os.environ.get("RAFTSINK_LOG_LEVEL", "WARNING"))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
