"""`raftsink serve` flags, generated from the configuration table.

Every setting gets --<section>-<name> (e.g. --kafka-max-frame-bytes) plus its
flat first-version flag where it had one (--max-frame-bytes, --tick-ms, ...).
A boolean also gets a --no- form; without a value the positive form means true
(so `--write-caching` and `--no-auto-create-topics` work as they always did).
Values stay text here: load_config coerces them exactly as it coerces the
environment's, so a bad flag is reported like a bad variable, naming the key.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from sink.config.table import OPTIONS, Option

_DEST = "config_flags"
"""Namespace attribute: {key: (text, the option string used)}."""


class _Record(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, key: str, **kw: Any) -> None:
        self.key = key
        super().__init__(option_strings, _DEST, **kw)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = dict(getattr(namespace, _DEST, None) or {})
        given[self.key] = (self.const if values is None or values == [] else values, option_string)
        setattr(namespace, _DEST, given)


_METAVARS: dict[Any, str] = {
    int: "INT",
    float: "NUMBER",
    "peers": "ID=RAFT/KAFKA/READ_API,...",
    "addresses": "ID=HOST:PORT,...",
}


def _help(opt: Option) -> str:
    first = opt.doc.split(". ")[0].rstrip(".")
    default = "required" if opt.required else f"default {_show(opt.default)}"
    return f"{first} ({opt.key}; {default})".replace("%", "%%")


def _show(value: Any) -> str:
    if value == "" or value == {}:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag (plus aliases) per setting to `parser`."""
    group = parser.add_argument_group("settings (also TOML keys and RAFTSINK_* variables)")
    for opt in OPTIONS:
        if opt.kind is bool:
            group.add_argument(
                *opt.flag_names,
                action=_Record,
                key=opt.key,
                nargs="?",
                const="true",
                metavar="BOOL",
                help=_help(opt),
            )
            group.add_argument(
                *("--no-" + name[2:] for name in opt.flag_names),
                action=_Record,
                key=opt.key,
                nargs=0,
                const="false",
                help=argparse.SUPPRESS,
            )
        else:
            group.add_argument(
                *opt.flag_names,
                action=_Record,
                key=opt.key,
                metavar=_METAVARS.get(opt.kind, "TEXT"),
                help=_help(opt),
            )


def flag_overrides(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """The flags given on the command line: ({key: text}, {key: "flag --name"})."""
    given: dict[str, tuple[Any, str]] = getattr(args, _DEST, None) or {}
    return (
        {key: value for key, (value, _) in given.items()},
        {key: f"flag {flag}" for key, (_, flag) in given.items()},
    )
